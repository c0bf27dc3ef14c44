//go:build unix

package browser

import (
	"os/exec"
	"syscall"
	"time"
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
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = syscall.Kill(-c.PID, syscall.SIGKILL)
	// Until it is gone: its profile is deleted next, and a browser still
	// writing there would leave files behind.
	for range 250 {
		if !c.alive() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}
