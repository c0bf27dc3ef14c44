package vfs

import (
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
