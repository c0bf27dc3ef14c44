package vfs

import (
	"os"

	"golang.org/x/sys/unix"
)

// datasync flushes file data and the metadata needed to read it back
// (fdatasync(2)), which is all an append-only log needs.
func datasync(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err != unix.EINTR {
			return err
		}
	}
}
