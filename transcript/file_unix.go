//go:build unix

package transcript

import (
	"io/fs"
	"os"
	"syscall"
)

// keepModeOwner gives path the mode and owner of fi.
func keepModeOwner(path string, fi fs.FileInfo) error {
	if err := os.Chmod(path, fi.Mode().Perm()); err != nil {
		return err
	}
	want, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	cur, err := os.Stat(path)
	if err != nil {
		return err
	}
	have, ok := cur.Sys().(*syscall.Stat_t)
	if !ok || have.Uid == want.Uid && have.Gid == want.Gid {
		return nil
	}
	return os.Chown(path, int(want.Uid), int(want.Gid))
}
