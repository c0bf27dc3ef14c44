package browser

import (
	"os"
	"strconv"
	"strings"
)

// memory returns the resident memory in bytes of the browser's processes
// (its session), or 0 if it cannot tell.
func (c *chrome) memory() int64 {
	if !c.alive() {
		return 0
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	want := strconv.Itoa(c.PID)
	page := int64(os.Getpagesize())
	var total int64
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
		// After the command: state, ppid, pgrp, session, ...
		f := strings.Fields(s[i+1:])
		if len(f) < 4 || f[3] != want {
			continue
		}
		m, err := os.ReadFile("/proc/" + name + "/statm")
		if err != nil {
			continue
		}
		mf := strings.Fields(string(m))
		if len(mf) < 2 {
			continue
		}
		rss, _ := strconv.ParseInt(mf[1], 10, 64)
		total += rss * page
	}
	return total
}
