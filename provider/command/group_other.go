//go:build unix && !linux

package command

import "golang.org/x/sys/unix"

// groupAlive reports whether process group pgid has a member. Zombies
// count here: a kill then waits its whole grace period.
func groupAlive(pgid int) bool { return unix.Kill(-pgid, 0) == nil }
