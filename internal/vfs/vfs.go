// Package vfs is the small filesystem seam that belay's durable code writes
// through, so that tests can inject short writes, ENOSPC, EIO on fsync and
// crashes. It is internal: a seam, not a promise.
package vfs

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// File is the subset of *os.File that durable code needs.
type File interface {
	io.Reader
	io.ReaderAt
	io.Writer
	io.Seeker
	io.Closer
	// Sync makes written data durable. On Linux it is fdatasync(2).
	Sync() error
	Truncate(size int64) error
	Stat() (fs.FileInfo, error)
	Name() string
}

// FS is the subset of the os package that durable code needs.
type FS interface {
	OpenFile(name string, flag int, perm fs.FileMode) (File, error)
	Rename(oldpath, newpath string) error
	Remove(name string) error
	RemoveAll(path string) error
	Stat(name string) (fs.FileInfo, error)
	MkdirAll(path string, perm fs.FileMode) error
	ReadDir(name string) ([]fs.DirEntry, error)
	// SyncDir fsyncs a directory so that entries created, renamed or removed
	// in it are durable.
	SyncDir(dir string) error
}

// OS is the real filesystem.
var OS FS = osFS{}

type osFS struct{}

func (osFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	f, err := openFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) Rename(oldpath, newpath string) error         { return os.Rename(oldpath, newpath) }
func (osFS) Remove(name string) error                     { return os.Remove(name) }
func (osFS) RemoveAll(path string) error                  { return os.RemoveAll(path) }
func (osFS) Stat(name string) (fs.FileInfo, error)        { return os.Stat(name) }
func (osFS) MkdirAll(path string, perm fs.FileMode) error { return os.MkdirAll(path, perm) }
func (osFS) ReadDir(name string) ([]fs.DirEntry, error)   { return os.ReadDir(name) }

func (osFS) SyncDir(dir string) error {
	d, err := os.Open(filepath.Clean(dir))
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

type osFile struct{ *os.File }

func (f osFile) Sync() error { return datasync(f.File) }

// StartWriteback implements WritebackStarter.
func (f osFile) StartWriteback(off, n int64) error { return startWriteback(f.File, off, n) }

// WritebackStarter is a File that can start writing a range of its data
// to disk without waiting for it.
type WritebackStarter interface {
	StartWriteback(off, n int64) error
}

// StartWriteback asks the system to start writing the file's data in
// [off, off+n) to disk without waiting for it (sync_file_range on Linux),
// so that the Sync that follows a large write waits less. It makes nothing
// durable and changes nothing Sync must do; files of other file systems
// (test doubles, NoSync) and other systems ignore it.
func StartWriteback(f File, off, n int64) error {
	if w, ok := f.(WritebackStarter); ok {
		return w.StartWriteback(off, n)
	}
	return nil
}

// NoSync is fsys without fsync: Sync and SyncDir do nothing. It is for
// scratch data that is read back at once or thrown away (benchmark
// fixtures, transcripts converted through a journal), never for data that
// must survive a crash.
func NoSync(fsys FS) FS { return noSyncFS{fsys} }

type noSyncFS struct{ FS }

func (f noSyncFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	file, err := f.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return noSyncFile{file}, nil
}

func (noSyncFS) SyncDir(string) error { return nil }

type noSyncFile struct{ File }

func (noSyncFile) Sync() error { return nil }
