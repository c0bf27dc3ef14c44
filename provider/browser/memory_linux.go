package browser

import (
	"os"
	"strconv"
	"strings"

	"github.com/belayhq/belay/internal/proc"
)

// memory returns the memory in bytes (proportional set size) of the browser's processes
// (its session), or 0 if it cannot tell.
func (c *chrome) memory() int64 {
	if !c.alive() {
		return 0
	}
	members, err := proc.Members(0, c.PID)
	if err != nil {
		return 0
	}
	page := int64(os.Getpagesize())
	var total int64
	for _, pid := range members {
		total += procMemory(strconv.Itoa(pid), page)
	}
	return total
}

// procMemory is a process's proportional set size (shared pages split
// between the processes that map them, so a browser's helpers are not
// counted many times), or its resident set size if the kernel does not
// report it.
func procMemory(pid string, page int64) int64 {
	if b, err := os.ReadFile("/proc/" + pid + "/smaps_rollup"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Pss:"); ok {
				f := strings.Fields(v)
				if len(f) >= 1 {
					kb, _ := strconv.ParseInt(f[0], 10, 64)
					return kb << 10
				}
			}
		}
	}
	m, err := os.ReadFile("/proc/" + pid + "/statm")
	if err != nil {
		return 0
	}
	mf := strings.Fields(string(m))
	if len(mf) < 2 {
		return 0
	}
	rss, _ := strconv.ParseInt(mf[1], 10, 64)
	return rss * page
}

// ProfileMemory returns the memory (proportional set size) of the
// browsers whose profile directory is under root, by profile directory.
func ProfileMemory(root string) map[string]int64 {
	out := map[string]int64{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	page := int64(os.Getpagesize())
	for _, e := range ents {
		name := e.Name()
		if name[0] < '0' || name[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + name + "/cmdline")
		if err != nil {
			continue
		}
		for _, arg := range strings.Split(string(b), "\x00") {
			if dir, ok := strings.CutPrefix(arg, "--user-data-dir="); ok && strings.HasPrefix(dir, root) {
				out[dir] += procMemory(name, page)
				break
			}
		}
	}
	return out
}
