package gotune

import (
	"bufio"
	"bytes"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
)

// memoryTotal returns the memory this process may use: the machine's,
// or its cgroup's limit when that is lower; 0 if neither is known.
func memoryTotal() uint64 {
	total := physicalMemory()
	if limit := cgroupLimit(os.DirFS("/")); limit > 0 && (total == 0 || limit < total) {
		total = limit
	}
	return total
}

// cgroupLimit returns the memory limit of this process's cgroup (v2:
// memory.max of the path /proc/self/cgroup names; v1: the memory
// controller's limit_in_bytes), 0 if it has none or it cannot be read.
// fsys is the root of the filesystem.
func cgroupLimit(fsys fs.FS) uint64 {
	self, err := fs.ReadFile(fsys, "proc/self/cgroup")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(self))
	for sc.Scan() {
		// hierarchy-ID:controllers:path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		var file string
		switch {
		case parts[0] == "0" && parts[1] == "":
			file = path.Join("sys/fs/cgroup", parts[2], "memory.max")
		case hasController(parts[1], "memory"):
			file = path.Join("sys/fs/cgroup/memory", parts[2], "memory.limit_in_bytes")
		default:
			continue
		}
		if limit := readLimit(fsys, file); limit > 0 {
			return limit
		}
	}
	return 0
}

func hasController(list, name string) bool {
	for c := range strings.SplitSeq(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// readLimit reads a cgroup limit file: a byte count, or "max" (none).
// v1 writes a huge count for none; anything above 1 EiB counts as none.
func readLimit(fsys fs.FS, file string) uint64 {
	b, err := fs.ReadFile(fsys, file)
	if err != nil {
		return 0
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n >= 1<<60 {
		return 0
	}
	return n
}
