//go:build unix

package browser

import (
	"os/exec"
	"syscall"
	"time"

	"github.com/belayhq/belay/internal/proc"
)

// detach starts the browser in its own session, so that a signal to the
// daemon's process group does not reach it and it outlives the daemon.
func detach(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
}

// kill ends the browser and every process it started (its session's
// process group), if it is still the browser that was started.
func (c *chrome) kill() {
	if !c.alive() {
		return
	}
	_ = syscall.Kill(-c.PID, syscall.SIGTERM)
	for range 50 {
		if !c.alive() {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if c.alive() {
		_ = syscall.Kill(-c.PID, syscall.SIGKILL)
	}
	// Until it is gone: its profile is deleted next, and a browser still
	// writing there would leave files behind.
	for range 250 {
		if !c.alive() {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.killSession()
}

// killSession ends what is left of the browser's session once its first
// process is gone: helpers (renderers, the zygote, crash handlers) outlive
// it for a moment, some in process groups of their own, and may still
// write to the profile. The session id stays the browser's while any of
// them lives, so it names no other program. Where processes cannot be
// listed (not Linux), the process group's signal above is all.
func (c *chrome) killSession() {
	for range 250 {
		left, err := proc.Members(0, c.PID)
		if err != nil || len(left) == 0 {
			return
		}
		for _, pid := range left {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
