//go:build !unix

package browser

import (
	"os"
	"os/exec"
)

func detach(cmd *exec.Cmd) {}

func (c *chrome) kill() {
	if c.alive() {
		if p, err := os.FindProcess(c.PID); err == nil {
			_ = p.Kill()
		}
	}
}
