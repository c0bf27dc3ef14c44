//go:build !linux

package proc

import "fmt"

// Members is unsupported on this platform.
func Members(pgrp, session int) ([]int, error) {
	return nil, fmt.Errorf("%w: process listing", ErrUnsupported)
}
