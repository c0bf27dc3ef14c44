package proc

import (
	"os"
	"strconv"
)

// Members returns the PIDs of the live processes (zombies excluded) whose
// process group is pgrp (when pgrp > 0) or whose session is session (when
// session > 0), from /proc.
func Members(pgrp, session int) ([]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue // not a process
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // exited meanwhile
		}
		st, err := parseStat(string(b))
		if err != nil || st.State == 'Z' || st.State == 'X' {
			continue
		}
		if (pgrp > 0 && st.PGrp == pgrp) || (session > 0 && st.Session == session) {
			out = append(out, pid)
		}
	}
	return out, nil
}
