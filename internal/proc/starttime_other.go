//go:build !linux && !darwin

package proc

import "fmt"

// StartTime returns the token naming the incarnation of pid. It is
// unsupported on this platform.
func StartTime(pid int) (string, error) {
	if err := checkPID(pid); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%w: process start time", ErrUnsupported)
}

func zombie(int) bool { return false }
