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

// startWriteback starts writing the range's dirty pages to disk without
// waiting (sync_file_range(2) with SYNC_FILE_RANGE_WRITE). It makes
// nothing durable; a later fdatasync has less left to wait for.
func startWriteback(f *os.File, off, n int64) error {
	for {
		err := unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
		switch err {
		case unix.EINTR:
			continue
		case unix.ENOSYS, unix.EOPNOTSUPP, unix.EINVAL:
			return nil // not on this system or file: only a hint
		}
		return err
	}
}
