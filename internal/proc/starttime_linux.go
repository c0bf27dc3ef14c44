package proc

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"
)

// StartTime returns the token naming the incarnation of pid: the boot id and
// the start time in clock ticks since boot, as "<boot id>:<ticks>".
func StartTime(pid int) (string, error) {
	if err := checkPID(pid); err != nil {
		return "", err
	}
	boot, err := bootID()
	if err != nil {
		return "", err
	}
	st, err := readStat(pid)
	if err != nil {
		return "", err
	}
	return boot + ":" + strconv.FormatUint(st.StartTime, 10), nil
}

func readStat(pid int) (stat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			// ENOENT can also mean "hidden" (hidepid); only kill(2) decides
			// that the process is gone.
			if alive, aerr := Alive(pid); aerr == nil && !alive {
				return stat{}, fmt.Errorf("%w: pid %d", ErrNoProcess, pid)
			}
		}
		return stat{}, fmt.Errorf("proc: start time of pid %d: %w", pid, err)
	}
	st, err := parseStat(string(b))
	if err != nil {
		return stat{}, fmt.Errorf("proc: pid %d: %w", pid, err)
	}
	return st, nil
}

// zombie reports whether pid has exited but not been reaped. Any failure to
// read its state answers false: the caller already knows the PID exists.
func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	st, err := parseStat(string(b))
	if err != nil {
		return false
	}
	return st.State == 'Z' || st.State == 'X'
}

// bootID identifies the current boot. It prefers the kernel's random boot id
// and falls back to the boot time in /proc/stat ("btime").
var bootID = sync.OnceValues(func() (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err == nil {
		if id := strings.TrimSpace(string(b)); id != "" {
			return id, nil
		}
	}
	b, err2 := os.ReadFile("/proc/stat")
	if err2 == nil {
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "btime "); ok {
				return "btime-" + strings.TrimSpace(v), nil
			}
		}
	}
	return "", fmt.Errorf("proc: boot id unavailable: %w", errors.Join(err, err2))
})
