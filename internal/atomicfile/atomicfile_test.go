package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay/internal/vfs/vfstest"
)

func TestWriteFileReplaces(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "f.json")
	require.NoError(t, WriteFile(vfstest.New(nil), path, []byte("one"), 0o600))
	require.NoError(t, WriteFile(vfstest.New(nil), path, []byte("two"), 0o600))
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "two", string(got))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	entries, _ := os.ReadDir(dir)
	require.Len(t, entries, 1, "no temp file is left")
}

func TestWriteFileFailuresKeepTheOldContent(t *testing.T) {
	t.Parallel()
	for name, faults := range map[string]vfstest.Faults{
		"ENOSPC": {Write: func(string, []byte) (int, error) { return 1, syscall.ENOSPC }},
		"short":  {Write: func(_ string, p []byte) (int, error) { return len(p) - 1, nil }},
		"EIO":    {Sync: func(string) error { return syscall.EIO }},
		"rename": {Rename: func(string, string) error { return syscall.EXDEV }},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, "f.json")
			require.NoError(t, os.WriteFile(path, []byte("old"), 0o600))
			fsys := vfstest.New(nil)
			fsys.Set(faults)
			err := WriteFile(fsys, path, []byte("new content"), 0o600)
			require.Error(t, err)
			if name != "short" {
				require.True(t, errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EIO) || errors.Is(err, syscall.EXDEV), "%v", err)
			}
			got, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Equal(t, "old", string(got))
			entries, _ := os.ReadDir(dir)
			require.Len(t, entries, 1, "the temp file is removed")
		})
	}
}

// TestWriteStreamsAndChecksBeforeRename: Write takes its content from a
// function, and a failing write or before hook leaves the old content and
// no temp file.
func TestWriteStreamsAndChecksBeforeRename(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "f.jsonl")
	require.NoError(t, os.WriteFile(path, []byte("old"), 0o600))
	boom := errors.New("boom")
	err := Write(vfstest.New(nil), path, 0o600, func(w io.Writer) error {
		_, _ = w.Write([]byte("partial"))
		return boom
	}, nil)
	require.ErrorIs(t, err, boom)
	err = Write(vfstest.New(nil), path, 0o600, func(w io.Writer) error {
		_, err := w.Write([]byte("new"))
		return err
	}, func(tmp string) error {
		got, err := os.ReadFile(tmp)
		require.NoError(t, err)
		require.Equal(t, "new", string(got), "the temp file is complete before the hook")
		return boom
	})
	require.ErrorIs(t, err, boom)
	got, _ := os.ReadFile(path)
	require.Equal(t, "old", string(got))
	entries, _ := os.ReadDir(dir)
	require.Len(t, entries, 1)
	var seen string
	require.NoError(t, Write(vfstest.New(nil), path, 0o600, func(w io.Writer) error {
		_, err := w.Write([]byte("new"))
		return err
	}, func(tmp string) error { seen = tmp; return nil }))
	got, _ = os.ReadFile(path)
	require.Equal(t, "new", string(got))
	require.NotEmpty(t, seen)
	require.NoFileExists(t, seen)
}
