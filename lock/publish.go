package lock

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/belayhq/belay/internal/atomicfile"
	"github.com/belayhq/belay/internal/vfs"
)

// publish creates the lock file with o's complete record, or fails with an
// error matching fs.ErrExist if the lock file exists. The record is written
// and fsynced in a unique temp file, then hard-linked to the lock path:
// link(2) is atomic and exclusive, so the path never exists without its
// whole record. The caller then takes the kernel lock on it.
func (l *Lock) publish(o Owner) error {
	data, err := padRecord(o)
	if err != nil {
		return err
	}
	tmp := atomicfile.TempName(l.path)
	if err := writeSynced(tmp, data); err != nil {
		_ = vfs.OS.Remove(tmp)
		return fmt.Errorf("lock: publish %s: %w", l.path, err)
	}
	lerr := os.Link(tmp, l.path)
	_ = vfs.OS.Remove(tmp) // only a name: the lock path keeps the inode
	if lerr != nil {
		if errors.Is(lerr, fs.ErrExist) {
			return lerr
		}
		return fmt.Errorf("lock: publish %s: %w", l.path, lerr)
	}
	if err := vfs.OS.SyncDir(filepath.Dir(l.path)); err != nil {
		// The file may not survive a crash. Take it back rather than claim
		// a hold we cannot vouch for: it is ours (a live local record is
		// never replaced by anyone else), so removing it is safe.
		_ = vfs.OS.Remove(l.path)
		return fmt.Errorf("lock: publish %s: sync dir: %w", l.path, err)
	}
	return nil
}

// writeSynced creates name exclusively with data and fsyncs it.
func writeSynced(name string, data []byte) error {
	f, err := vfs.OS.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, filePerm)
	if err != nil {
		return err
	}
	n, err := f.Write(data)
	if err == nil && n != len(data) {
		err = fmt.Errorf("short write (%d of %d bytes)", n, len(data))
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
