//go:build !unix

package proc

import "fmt"

// Alive reports whether a process with pid exists. It is unsupported on this
// platform.
func Alive(pid int) (bool, error) {
	if err := checkPID(pid); err != nil {
		return false, err
	}
	return false, fmt.Errorf("%w: process probe", ErrUnsupported)
}
