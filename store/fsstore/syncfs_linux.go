package fsstore

import (
	"os"

	"golang.org/x/sys/unix"
)

// syncfsFunc returns a function that syncs the filesystem holding dir.
func syncfsFunc(dir string) (func() error, func() error, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, nil, err
	}
	return func() error { return unix.Syncfs(int(f.Fd())) }, f.Close, nil
}
