package lock

import (
	"context"
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
// whole record. On success o is held.
func (l *Lock) publish(o Owner) error {
	data, err := o.Encode()
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
		// The lock is visible but may not survive a crash. Undo it rather
		// than claim a hold we cannot vouch for.
		l.held = &o
		ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		defer cancel()
		if rerr := l.releaseLocked(ctx); rerr != nil {
			l.held = nil
			return fmt.Errorf("lock: publish %s: sync dir: %w (and undo failed: %v)", l.path, err, rerr)
		}
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
