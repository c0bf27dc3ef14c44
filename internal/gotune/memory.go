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
// or its cgroups' limit when that is lower; 0 if neither is known.
func memoryTotal() uint64 {
	total := physicalMemory()
	if limit := cgroupLimit(os.DirFS("/")); limit > 0 && (total == 0 || limit < total) {
		total = limit
	}
	return total
}

// cgroupLimit returns the lowest memory limit of this process's cgroup and
// the cgroups above it that are visible (v2: memory.max; v1: the memory
// controller's memory.limit_in_bytes), 0 if none has one or none can be
// read. The cgroup's directory is found as the Go runtime finds it for
// CPU limits: the path /proc/self/cgroup names, under the mount of that
// hierarchy /proc/self/mountinfo lists, taken relative to the mount's
// root (in a container the mount's root is often the container's own
// cgroup). fsys is the root of the filesystem.
func cgroupLimit(fsys fs.FS) uint64 {
	groups, err := fs.ReadFile(fsys, "proc/self/cgroup")
	if err != nil {
		return 0
	}
	mounts, err := fs.ReadFile(fsys, "proc/self/mountinfo")
	if err != nil {
		return 0
	}
	var lowest uint64
	sc := bufio.NewScanner(bytes.NewReader(groups))
	for sc.Scan() {
		// hierarchy-ID:controllers:path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		v2 := parts[0] == "0" && parts[1] == ""
		if !v2 && !hasItem(parts[1], "memory") {
			continue
		}
		dir, top, ok := cgroupDir(mounts, v2, parts[2])
		if !ok {
			continue
		}
		file := "memory.limit_in_bytes"
		if v2 {
			file = "memory.max"
		}
		// The cgroup and those above it, up to the mount point.
		for {
			if limit := readLimit(fsys, path.Join(dir, file)); limit > 0 && (lowest == 0 || limit < lowest) {
				lowest = limit
			}
			if dir == top {
				break
			}
			dir = path.Dir(dir)
		}
	}
	return lowest
}

// cgroupDir returns the directory (relative to the filesystem root) of
// cgroup path p and the mount point above it, from mountinfo: the cgroup2
// mount (v2) or the cgroup mount with the memory controller (v1) whose
// root contains p.
func cgroupDir(mountinfo []byte, v2 bool, p string) (dir, top string, ok bool) {
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	for sc.Scan() {
		// id parent major:minor root mount-point options [optional...] - fstype source super-options
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || len(fields) < sep+2 {
			continue
		}
		root, point, fstype := fields[3], fields[4], fields[sep+1]
		super := ""
		if sep+3 < len(fields) {
			super = fields[sep+3]
		}
		switch {
		case v2 && fstype == "cgroup2":
		case !v2 && fstype == "cgroup" && hasItem(super, "memory"):
		default:
			continue
		}
		rel, inside := strings.CutPrefix(p, root)
		if root == "/" {
			rel, inside = p, true
		} else if inside && rel != "" && !strings.HasPrefix(rel, "/") {
			inside = false // a sibling whose name starts like the root
		}
		if !inside {
			continue
		}
		top = strings.TrimPrefix(path.Clean(point), "/")
		if top == "" {
			top = "."
		}
		return path.Join(top, rel), top, true
	}
	return "", "", false
}

func hasItem(list, name string) bool {
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
