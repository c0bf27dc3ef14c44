package atomicfile

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay/internal/vfs"
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

// wbFS is the OS file system whose files record the writeback ranges
// started on them and the copies handed to their ReadFrom.
type wbFS struct {
	vfs.FS
	ranges    [][2]int64
	readFroms int
	err       error
}

type wbFile struct {
	vfs.File
	fs *wbFS
}

func (f *wbFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	file, err := f.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &wbFile{File: file, fs: f}, nil
}

func (f *wbFile) StartWriteback(off, n int64) error {
	f.fs.ranges = append(f.fs.ranges, [2]int64{off, n})
	return f.fs.err
}

func (f *wbFile) ReadFrom(r io.Reader) (int64, error) {
	f.fs.readFroms++
	return io.Copy(f.File, r)
}

// TestWriteStartsWriteback: a large write starts the writeback of every
// writebackEvery bytes as it goes, whether written or copied from a file
// (the copy reaching the file's own ReadFrom, which keeps it in the
// kernel), and the file holds exactly what was written; a writeback that
// fails fails the write and keeps the old content.
func TestWriteStartsWriteback(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	copied := bytes.Repeat([]byte("0123456789abcdef"), (writebackEvery+writebackEvery/2)/16)
	require.NoError(t, os.WriteFile(src, copied, 0o600))
	chunk := bytes.Repeat([]byte{'x'}, 1<<20)
	write := func(w io.Writer) error {
		for range 20 {
			if _, err := w.Write(chunk); err != nil {
				return err
			}
		}
		in, err := os.Open(src)
		if err != nil {
			return err
		}
		defer in.Close()
		_, err = io.Copy(w, in)
		return err
	}
	fsys := &wbFS{FS: vfs.OS}
	path := filepath.Join(dir, "out")
	require.NoError(t, Write(fsys, path, 0o600, write, nil))
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, append(bytes.Repeat(chunk, 20), copied...), got)
	require.Equal(t, 1, fsys.readFroms)
	require.Len(t, fsys.ranges, 3) // 8 MiB, 8 MiB, then 4 MiB + the copy
	next := int64(0)
	for _, r := range fsys.ranges {
		require.Equal(t, next, r[0])
		require.GreaterOrEqual(t, r[1], int64(writebackEvery))
		next += r[1]
	}

	require.NoError(t, os.WriteFile(path, []byte("old"), 0o600))
	fsys = &wbFS{FS: vfs.OS, err: syscall.EIO}
	require.ErrorIs(t, Write(fsys, path, 0o600, write, nil), syscall.EIO)
	got, err = os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "old", string(got))
}
