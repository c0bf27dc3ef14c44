package command

import (
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// groupAlive reports whether process group pgid has a member that has not
// exited. Zombies do not count: an exited agent whose new parent does not
// reap it must not hold up a kill's grace period.
func groupAlive(pgid int) bool {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return unix.Kill(-pgid, 0) == nil
	}
	want := strconv.Itoa(pgid)
	for _, e := range ents {
		name := e.Name()
		if name[0] < '0' || name[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + name + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		// After the command: state, ppid, pgrp, ...
		f := strings.Fields(s[i+1:])
		if len(f) >= 3 && f[2] == want && f[0] != "Z" && f[0] != "X" {
			return true
		}
	}
	return false
}
