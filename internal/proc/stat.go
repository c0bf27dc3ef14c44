package proc

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// stat is the part of /proc/<pid>/stat this package reads.
type stat struct {
	State     byte   // field 3: R, S, D, Z, X, ...
	PGrp      int    // field 5: process group
	Session   int    // field 6: session id
	StartTime uint64 // field 22: start time in clock ticks after boot
}

var errBadStat = errors.New("proc: malformed stat line")

// parseStat parses the content of /proc/<pid>/stat (see proc(5)). Field 2,
// comm, is the executable name in parentheses and may itself contain spaces
// and parentheses, so the fields after it are found after the LAST ')'.
func parseStat(line string) (stat, error) {
	open := strings.IndexByte(line, '(')
	end := strings.LastIndexByte(line, ')')
	if open < 0 || end < open {
		return stat{}, fmt.Errorf("%w: no (comm)", errBadStat)
	}
	// After ')' come fields 3.. ; field N is rest[N-3].
	rest := strings.Fields(line[end+1:])
	const startTimeField = 22
	if len(rest) < startTimeField-2 {
		return stat{}, fmt.Errorf("%w: %d fields after comm, want at least %d", errBadStat, len(rest), startTimeField-2)
	}
	if len(rest[0]) != 1 {
		return stat{}, fmt.Errorf("%w: state %q", errBadStat, rest[0])
	}
	start, err := strconv.ParseUint(rest[startTimeField-3], 10, 64)
	if err != nil {
		return stat{}, fmt.Errorf("%w: starttime: %v", errBadStat, err)
	}
	pgrp, err1 := strconv.Atoi(rest[2])
	sess, err2 := strconv.Atoi(rest[3])
	if err1 != nil || err2 != nil {
		return stat{}, fmt.Errorf("%w: pgrp %q, session %q", errBadStat, rest[2], rest[3])
	}
	return stat{State: rest[0][0], PGrp: pgrp, Session: sess, StartTime: start}, nil
}
