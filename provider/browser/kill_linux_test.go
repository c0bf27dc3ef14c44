package browser

import (
	"syscall"
	"testing"

	"github.com/belayhq/belay/internal/proc"
)

// TestKillEndsHelpersInOtherGroups: a browser's helper in a process group
// of its own (as a browser's zygote and crash handler may be), that
// ignores SIGTERM, is ended with the browser: kill returns only once no
// process of the browser's session is left, so the profile deleted next
// has no writer (CI saw a helper still alive after kill).
func TestKillEndsHelpersInOtherGroups(t *testing.T) {
	// Job control puts the background helper in a group of its own.
	f := startShell(t, true, "set -m\n(trap '' TERM; exec sleep 300) &\necho $!\nwait\n", "")
	if pg, _ := syscall.Getpgid(f.child); pg == f.cmd.Process.Pid {
		t.Fatalf("the helper is in the browser's process group %d: the test needs it in its own", pg)
	}
	c := f.chrome(t, "")
	c.kill()
	<-f.exited
	if ok, _ := proc.Alive(f.child); ok {
		t.Fatalf("helper %d outlived kill", f.child)
	}
}
