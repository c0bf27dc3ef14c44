//go:build !unix

package command

import (
	"errors"
	"time"
)

func start(dir string, argv []string, stdin, workDir string, env []string) (handle, error) {
	return handle{}, errors.New("detached processes are not supported on this platform")
}

func (h handle) kill(grace time.Duration) {}
