// Package atomicfile replaces files so that readers and crashes see either
// the old content or the new, never a mix: temp file in the same directory,
// fsync, rename, fsync the directory.
package atomicfile

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/belayhq/belay/internal/vfs"
)

// WriteFile atomically replaces path with data, created with perm.
func WriteFile(fsys vfs.FS, path string, data []byte, perm fs.FileMode) error {
	return Write(fsys, path, perm, func(w io.Writer) error {
		n, err := w.Write(data)
		if err == nil && n != len(data) {
			err = fmt.Errorf("short write (%d of %d bytes)", n, len(data))
		}
		return err
	}, nil)
}

// Write atomically replaces path with what write writes, in a temp file
// created with perm. before, if not nil, is called with the temp file's
// name once it is written, synced and closed, before the rename (to give
// it an owner, say); an error from it leaves path as it was.
func Write(fsys vfs.FS, path string, perm fs.FileMode, write func(io.Writer) error, before func(tmp string) error) error {
	dir := filepath.Dir(path)
	tmp := TempName(path)
	f, err := fsys.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return fmt.Errorf("atomicfile: create temp for %s: %w", path, err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = f.Close()
			_ = fsys.Remove(tmp)
		}
	}()
	if err := write(&writeback{f: f}); err != nil {
		return fmt.Errorf("atomicfile: write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("atomicfile: sync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		_ = fsys.Remove(tmp)
		ok = true
		return fmt.Errorf("atomicfile: close %s: %w", tmp, err)
	}
	ok = true
	if before != nil {
		if err := before(tmp); err != nil {
			_ = fsys.Remove(tmp)
			return err
		}
	}
	if err := fsys.Rename(tmp, path); err != nil {
		_ = fsys.Remove(tmp)
		return fmt.Errorf("atomicfile: rename %s: %w", path, err)
	}
	if err := fsys.SyncDir(dir); err != nil {
		return fmt.Errorf("atomicfile: sync dir %s: %w", dir, err)
	}
	return nil
}

// writebackEvery is how many bytes written start their writeback to disk
// while the rest is being written, so that the sync at the end of a large
// file waits for the last of them only.
const writebackEvery = 8 << 20

// writeback is the temp file as write sees it: every writebackEvery bytes
// it starts their writeback (vfs.StartWriteback). It passes ReadFrom on to
// the file, so that a copy from another file stays in the kernel
// (copy_file_range).
type writeback struct {
	f             vfs.File
	written, from int64 // bytes written; the first not yet handed to writeback
}

func (w *writeback) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	if err != nil {
		return n, err
	}
	return n, w.advance(int64(n))
}

func (w *writeback) ReadFrom(r io.Reader) (int64, error) {
	n, err := io.Copy(w.f, r)
	if err != nil {
		return n, err
	}
	return n, w.advance(n)
}

func (w *writeback) advance(n int64) error {
	w.written += n
	if w.written-w.from < writebackEvery {
		return nil
	}
	err := vfs.StartWriteback(w.f, w.from, w.written-w.from)
	w.from = w.written
	return err
}

// TempName returns a unique temporary name beside path. Temp names start
// with '.' and end in ".tmp" so directory scans can skip them.
func TempName(path string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+"."+hex.EncodeToString(b[:])+".tmp")
}
