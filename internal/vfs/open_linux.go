package vfs

import (
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// openFile is os.OpenFile for the plain permission bits, in fewer system
// calls: os.OpenFile tries to add every descriptor to the network poller
// (five more calls for a regular file, which it refuses), where a store
// that opens a journal per session at start opens hundreds of thousands.
// The file is a blocking one, as os.OpenFile leaves a regular file.
func openFile(name string, flag int, perm fs.FileMode) (*os.File, error) {
	if perm&^fs.ModePerm != 0 {
		return os.OpenFile(name, flag, perm)
	}
	for {
		fd, err := unix.Open(name, flag|unix.O_CLOEXEC, uint32(perm))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "open", Path: name, Err: err}
		}
		return os.NewFile(uintptr(fd), name), nil
	}
}
