//go:build unix

package proc

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Alive reports whether a process with pid exists, with kill(pid, 0)
// semantics: EPERM means it exists. On Linux a zombie counts as dead.
func Alive(pid int) (bool, error) {
	if err := checkPID(pid); err != nil {
		return false, err
	}
	err := unix.Kill(pid, 0)
	switch {
	case err == nil, errors.Is(err, unix.EPERM):
		return !zombie(pid), nil
	case errors.Is(err, unix.ESRCH):
		return false, nil
	default:
		return false, fmt.Errorf("proc: probe pid %d: %w", pid, err)
	}
}
