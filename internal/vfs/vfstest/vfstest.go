// Package vfstest provides a fault-injecting vfs.FS for tests: short
// writes, ENOSPC, EIO on fsync, failing renames.
package vfstest

import (
	"io/fs"
	"sync"

	"github.com/belayhq/belay/internal/vfs"
)

// Faults decides, per call, whether an operation fails. A nil func never
// fails. Names are full paths as passed to the FS.
type Faults struct {
	// Write returns how many bytes of p to really write and the error to
	// return; (len(p), nil) lets the write through untouched.
	Write func(name string, p []byte) (int, error)
	// Sync returns an error to fail a file's Sync with, after doing nothing.
	Sync func(name string) error
	// Rename returns an error to fail a rename with.
	Rename func(oldpath, newpath string) error
	// Open returns an error to fail an OpenFile with (a permission the
	// process lacks, say), before the file is opened.
	Open func(name string, flag int) error
}

// FS wraps a vfs.FS and injects Faults. Faults may be changed at any time
// with Set.
type FS struct {
	vfs.FS
	mu     sync.Mutex
	faults Faults
}

// New wraps base (vfs.OS if nil).
func New(base vfs.FS) *FS {
	if base == nil {
		base = vfs.OS
	}
	return &FS{FS: base}
}

// Set replaces the faults.
func (f *FS) Set(faults Faults) {
	f.mu.Lock()
	f.faults = faults
	f.mu.Unlock()
}

func (f *FS) get() Faults {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.faults
}

// OpenFile opens a file whose writes and syncs go through the faults.
func (f *FS) OpenFile(name string, flag int, perm fs.FileMode) (vfs.File, error) {
	if h := f.get().Open; h != nil {
		if err := h(name, flag); err != nil {
			return nil, &fs.PathError{Op: "open", Path: name, Err: err}
		}
	}
	file, err := f.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &faultyFile{File: file, fs: f, name: name}, nil
}

// Rename renames unless a fault says otherwise.
func (f *FS) Rename(oldpath, newpath string) error {
	if h := f.get().Rename; h != nil {
		if err := h(oldpath, newpath); err != nil {
			return err
		}
	}
	return f.FS.Rename(oldpath, newpath)
}

type faultyFile struct {
	vfs.File
	fs   *FS
	name string
}

func (ff *faultyFile) Write(p []byte) (int, error) {
	h := ff.fs.get().Write
	if h == nil {
		return ff.File.Write(p)
	}
	n, ferr := h(ff.name, p)
	if n > len(p) {
		n = len(p)
	}
	if n > 0 {
		w, err := ff.File.Write(p[:n])
		if err != nil {
			return w, err
		}
	}
	return n, ferr
}

func (ff *faultyFile) Sync() error {
	if h := ff.fs.get().Sync; h != nil {
		if err := h(ff.name); err != nil {
			return err
		}
	}
	return ff.File.Sync()
}
