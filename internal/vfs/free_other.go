//go:build !unix

package vfs

import "errors"

// FreeBytes is unsupported on this platform.
func FreeBytes(string) (uint64, error) {
	return 0, errors.New("vfs: free space unknown on this platform")
}
