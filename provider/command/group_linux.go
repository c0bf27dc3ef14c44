package command

import (
	"golang.org/x/sys/unix"

	"github.com/belayhq/belay/internal/proc"
)

// groupAlive reports whether process group pgid has a member that has not
// exited. Zombies do not count: an exited agent whose new parent does not
// reap it must not hold up a kill's grace period.
func groupAlive(pgid int) bool {
	members, err := proc.Members(pgid, 0)
	if err != nil {
		return unix.Kill(-pgid, 0) == nil
	}
	return len(members) > 0
}
