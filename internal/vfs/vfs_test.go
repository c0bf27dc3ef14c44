package vfs

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestNoSync: the no-sync filesystem writes through to the files and
// skips only the syncs.
func TestNoSync(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fsys := NoSync(OS)
	path := filepath.Join(dir, "a")
	f, err := fsys.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("kept")); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := fsys.SyncDir(dir); err != nil {
		t.Fatal(err)
	}
	if err := fsys.Rename(path, path+"2"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path + "2")
	if err != nil || string(b) != "kept" {
		t.Fatalf("read back %q, %v; want %q", b, err, "kept")
	}
	if _, err := fsys.OpenFile(filepath.Join(dir, "missing", "x"), os.O_RDONLY, 0); !os.IsNotExist(err) {
		t.Fatalf("opening a missing file: %v, want not-exist", err)
	}
}

// TestStartWriteback: starting the writeback of a real file's range is
// accepted (and changes nothing read back); a NoSync file ignores it.
func TestStartWriteback(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, fsys := range []FS{OS, NoSync(OS)} {
		path := filepath.Join(dir, "a")
		f, err := fsys.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write([]byte("kept")); err != nil {
			t.Fatal(err)
		}
		if err := StartWriteback(f, 0, 4); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(path); err != nil || string(b) != "kept" {
			t.Fatalf("read back %q, %v", b, err)
		}
	}
	if _, ok := File(osFile{}).(WritebackStarter); !ok {
		t.Fatal("an OS file does not start writeback")
	}
}

// TestOpenFile: the OS file system's open behaves as os.OpenFile: errors
// are path errors that match fs.ErrNotExist and fs.ErrExist, a created
// file gets the permission (less the umask), and the file reads, writes,
// seeks and syncs.
func TestOpenFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	_, err := OS.OpenFile(path, os.O_RDWR, 0o600)
	var pe *fs.PathError
	if !errors.As(err, &pe) || pe.Path != path || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("open missing: %v", err)
	}
	f, err := OS.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Seek(1, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	if _, err := io.ReadFull(f, b); err != nil || string(b) != "ello" {
		t.Fatalf("read %q, %v", b, err)
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode().Perm()&^0o640 != 0 || fi.Size() != 5 {
		t.Fatalf("stat %v %v", fi, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := OS.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("exclusive create of an existing file: %v", err)
	}
}
