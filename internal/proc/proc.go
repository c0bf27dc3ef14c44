package proc

import (
	"errors"
	"fmt"
)

var (
	// ErrUnsupported reports that the platform cannot answer the question.
	ErrUnsupported = errors.New("proc: unsupported on this platform")
	// ErrNoProcess reports that no process with the PID exists.
	ErrNoProcess = errors.New("proc: no such process")
)

// checkPID rejects PIDs that kill(2) would interpret as process groups or
// "every process": 0, -1 and other negative numbers.
func checkPID(pid int) error {
	if pid <= 0 {
		return fmt.Errorf("proc: invalid pid %d", pid)
	}
	return nil
}

// State is what a process is doing, as far as this package can tell.
type State int

const (
	// StateUnknown: the platform cannot tell, or the probe failed.
	StateUnknown State = iota
	// StateRunning: running or sleeping normally.
	StateRunning
	// StateStopped: stopped by a signal (SIGSTOP, SIGTSTP) or a debugger;
	// it will not run until it gets SIGCONT.
	StateStopped
)
