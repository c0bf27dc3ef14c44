package commitlog

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/vfs"
	"github.com/belayhq/belay/internal/vfs/vfstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fixture is a directory of journal-like files written through a log, the
// way a journal does: the bytes go to the file first, then to the log.
type fixture struct {
	t       *testing.T
	dir     string
	fsys    vfs.FS
	opts    Options
	log     *Log
	sizes   map[string]int64
	crashed atomic.Bool
}

func newFixture(t *testing.T, fsys vfs.FS, segSize int64) *fixture {
	t.Helper()
	return newFixtureWith(t, fsys, segSize, nil)
}

func newFixtureWith(t *testing.T, fsys vfs.FS, segSize int64, set func(*Options)) *fixture {
	t.Helper()
	if fsys == nil {
		fsys = vfs.OS
	}
	dir := t.TempDir()
	f := &fixture{t: t, dir: dir, fsys: fsys, sizes: map[string]int64{}}
	f.opts = Options{FS: fsys, SegmentSize: segSize, Path: f.path}
	if set != nil {
		set(&f.opts)
	}
	skip := f.opts.skipCheckpoint
	f.opts.skipCheckpoint = func() bool { return f.crashed.Load() || skip != nil && skip() }
	f.open()
	return f
}

func (f *fixture) path(name string) string { return filepath.Join(f.dir, "files", name) }
func (f *fixture) logDir() string          { return filepath.Join(f.dir, "log") }

func (f *fixture) open() Replay {
	f.t.Helper()
	require.NoError(f.t, os.MkdirAll(filepath.Join(f.dir, "files"), 0o700))
	l, rep, err := Open(f.logDir(), f.opts)
	require.NoError(f.t, err)
	f.log = l
	return rep
}

// write appends data to name's file and commits it through the log.
func (f *fixture) write(name string, data []byte) error {
	fh, err := os.OpenFile(f.path(name), os.O_RDWR|os.O_CREATE, 0o600)
	require.NoError(f.t, err)
	off := f.sizes[name]
	_, err = fh.WriteAt(data, off)
	require.NoError(f.t, err)
	require.NoError(f.t, fh.Close())
	if err := f.log.Commit(name, off, data); err != nil {
		return err
	}
	f.sizes[name] = off + int64(len(data))
	return nil
}

func (f *fixture) read(name string) []byte {
	f.t.Helper()
	b, err := os.ReadFile(f.path(name))
	require.NoError(f.t, err)
	return b
}

func (f *fixture) segments() []uint64 {
	f.t.Helper()
	nos, err := Segments(vfs.OS, f.logDir())
	require.NoError(f.t, err)
	return nos
}

// crash stops the log as a killed process would: Close with every
// checkpoint skipped, so its segments stay behind.
func (f *fixture) crash() {
	f.t.Helper()
	f.crashed.Store(true)
	_ = f.log.Close()
	f.crashed.Store(false)
}

func line(name string, i int) []byte { return fmt.Appendf(nil, "%s line %d\n", name, i) }

// TestReplayRestoresLostWrites: what the files lost (a power cut takes
// their unsynced pages) the log puts back on open; files that lost
// nothing are left as they are; the segments are gone afterwards.
func TestReplayRestoresLostWrites(t *testing.T) {
	f := newFixture(t, nil, 0)
	var want = map[string][]byte{}
	for i := range 20 {
		for _, name := range []string{"a", "b", "c"} {
			d := line(name, i)
			require.NoError(t, f.write(name, d))
			want[name] = append(want[name], d...)
		}
	}
	f.crash()
	old := f.segments()
	require.NotEmpty(t, old)
	require.NoError(t, os.Truncate(f.path("a"), 7))           // lost its tail
	require.NoError(t, os.WriteFile(f.path("b"), nil, 0o600)) // lost everything
	rep := f.open()
	require.Equal(t, 2, rep.Repaired)
	require.Equal(t, 60, rep.Records)
	for name, w := range want {
		require.Equal(t, w, f.read(name), name)
	}
	// New segments are numbered after the replayed ones, which are
	// retired in the background, after their files are synced.
	require.NoError(t, f.write("c", []byte("after\n")))
	require.Greater(t, f.log.seg.no, old[len(old)-1])
	require.NoError(t, f.log.Close())
	require.Empty(t, f.segments())
}

// TestCloseCheckpoints: a clean Close syncs the files and leaves no
// segment; a log that rotates retires its old segments as it goes.
func TestCloseCheckpoints(t *testing.T) {
	f := newFixture(t, nil, 3*blockSize)
	for i := range 50 {
		require.NoError(t, f.write(fmt.Sprint("f", i%5), line("x", i)))
	}
	require.NoError(t, f.log.Close())
	require.Empty(t, f.segments())
	st := f.log.Stats()
	require.EqualValues(t, 50, st.Records)
	require.Positive(t, st.Checkpoints)
	require.ErrorIs(t, f.log.Commit("a", 0, []byte("x")), ErrClosed)
}

// TestCutReplaysInOrder: a file cut back after a failed commit is cut
// back by the replay too, at the same point of the order, so the bytes
// that were written after the cut win.
func TestCutReplaysInOrder(t *testing.T) {
	f := newFixture(t, nil, 0)
	require.NoError(t, f.write("a", []byte("kept\n")))
	require.NoError(t, f.write("a", []byte("failed batch, long\n")))
	require.NoError(t, f.log.Cut("a", 5))
	require.NoError(t, os.Truncate(f.path("a"), 5))
	f.sizes["a"] = 5
	require.NoError(t, f.write("a", []byte("next\n")))
	f.crash()
	require.NoError(t, os.WriteFile(f.path("a"), nil, 0o600))
	f.open()
	defer f.log.Close()
	require.Equal(t, "kept\nnext\n", string(f.read("a")))
}

// TestMissingFileSkipped: the records of a file that is gone (a deleted
// session) are skipped, not recreated.
func TestMissingFileSkipped(t *testing.T) {
	f := newFixture(t, nil, 0)
	require.NoError(t, f.write("gone", []byte("x\n")))
	require.NoError(t, f.write("kept", []byte("y\n")))
	f.crash()
	require.NoError(t, os.Remove(f.path("gone")))
	rep := f.open()
	defer f.log.Close()
	require.Equal(t, 1, rep.Missing)
	_, err := os.Stat(f.path("gone"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

// crashedTwoBatches writes two batches to "a", crashes, and returns the
// segment's path and bytes.
func crashedTwoBatches(t *testing.T) (f *fixture, seg string, b []byte) {
	t.Helper()
	f = newFixture(t, nil, 0)
	require.NoError(t, f.write("a", []byte("one\n")))
	require.NoError(t, f.write("a", []byte("two\n")))
	f.crash()
	seg = filepath.Join(f.logDir(), segName(f.segments()[0]))
	b, err := os.ReadFile(seg)
	require.NoError(t, err)
	return f, seg, b
}

// TestTornTailIsNotDamage: a batch cut short at the end of a segment (the
// write a power cut interrupted, never acknowledged) ends the replay
// there without an error; the batches before it are applied.
func TestTornTailIsNotDamage(t *testing.T) {
	f, seg, b := crashedTwoBatches(t)
	// Tear the second batch: zero its second half.
	second := blockSize
	for i := second + 20; i < second+blockSize; i++ {
		b[i] = 0
	}
	require.NoError(t, os.WriteFile(seg, b, 0o600))
	require.NoError(t, os.WriteFile(f.path("a"), nil, 0o600))
	rep := f.open()
	defer f.log.Close()
	require.Contains(t, rep.Torn, "checksum")
	require.Equal(t, "one\n", string(f.read("a")))
}

// TestDamageBeforeValidBatchesRefuses: damage followed by a valid batch
// is acknowledged data gone bad: Open refuses with an error naming the
// file and offset, and changes nothing.
func TestDamageBeforeValidBatchesRefuses(t *testing.T) {
	f, seg, b := crashedTwoBatches(t)
	b[headerSize+3] ^= 0x40 // a bit in the first batch's body
	require.NoError(t, os.WriteFile(seg, b, 0o600))
	require.NoError(t, os.WriteFile(f.path("a"), nil, 0o600))
	_, _, err := Open(f.logDir(), f.opts)
	var de *DamageError
	require.ErrorAs(t, err, &de)
	require.ErrorIs(t, err, belay.ErrCorruptRecord)
	require.Equal(t, int64(0), de.Offset)
	require.Contains(t, err.Error(), seg)
	require.Empty(t, f.read("a"), "nothing was replayed")
	require.Len(t, f.segments(), 1, "the segment is kept")
}

// TestConcurrentCommits: many writers at once; every byte comes back
// after the files lose everything.
func TestConcurrentCommits(t *testing.T) {
	f := newFixture(t, nil, 0) // no rotation: a checkpointed file cannot lose its bytes
	const writers, each = 16, 40
	var mu sync.Mutex
	var wg sync.WaitGroup
	want := map[string][]byte{}
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprint("w", w)
			for i := range each {
				d := line(name, i)
				mu.Lock() // one writer per file, as a journal's committer
				err := f.write(name, d)
				want[name] = append(want[name], d...)
				mu.Unlock()
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	f.crash()
	for name := range want {
		require.NoError(t, os.WriteFile(f.path(name), nil, 0o600))
	}
	f.open()
	defer f.log.Close()
	for name, w := range want {
		require.Equal(t, w, f.read(name), name)
	}
}

// TestSyncFailureMovesOn: a failed fdatasync of the log fails the commits
// it was to make durable and is never retried on the same file; the next
// commit goes to a new segment and succeeds.
func TestSyncFailureMovesOn(t *testing.T) {
	ffs := vfstest.New(nil)
	f := newFixture(t, ffs, 0)
	require.NoError(t, f.write("a", []byte("one\n")))
	failed := f.log.seg.no // (set before the commit was acknowledged)
	ffs.Set(vfstest.Faults{Sync: func(name string) error {
		if strings.HasSuffix(name, segName(failed)) {
			return syscall.EIO
		}
		return nil
	}})
	err := f.write("a", []byte("two\n"))
	require.ErrorIs(t, err, syscall.EIO)
	require.Contains(t, err.Error(), "fdatasync")
	require.NoError(t, f.write("b", []byte("three\n")))
	require.NoError(t, f.log.Close())
	require.Empty(t, f.segments())
}

// TestCheckpointFailureStops: a checkpoint whose file sync fails stops the
// log for good (a retried fsync may lie); the segment is kept and the
// next open replays it.
func TestCheckpointFailureStops(t *testing.T) {
	ffs := vfstest.New(nil)
	f := newFixture(t, ffs, 0)
	require.NoError(t, f.write("a", []byte("one\n")))
	ffs.Set(vfstest.Faults{Sync: func(name string) error {
		if name == f.path("a") {
			return syscall.EIO
		}
		return nil
	}})
	err := f.log.Close()
	require.ErrorIs(t, err, syscall.EIO)
	require.Contains(t, err.Error(), "reopened")
	require.Len(t, f.segments(), 1)
	ffs.Set(vfstest.Faults{})
	require.NoError(t, os.WriteFile(f.path("a"), nil, 0o600))
	f.open()
	require.Equal(t, "one\n", string(f.read("a")))
	require.NoError(t, f.log.Close())
}

// TestFenceStopsWrites: a log whose fence fails writes nothing, and its
// Close leaves the segment for the owner without an error.
func TestFenceStopsWrites(t *testing.T) {
	var fenced error
	var mu sync.Mutex
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "files"), 0o700))
	l, _, err := Open(filepath.Join(dir, "log"), Options{
		Path: func(n string) string { return filepath.Join(dir, "files", n) },
		Fence: func() error {
			mu.Lock()
			defer mu.Unlock()
			return fenced
		},
	})
	require.NoError(t, err)
	require.NoError(t, l.Commit("a", 0, []byte("x")))
	mu.Lock()
	fenced = errors.New("lock lost")
	mu.Unlock()
	require.ErrorContains(t, l.Commit("a", 1, []byte("y")), "lock lost")
	require.NoError(t, l.Close())
	nos, err := Segments(nil, filepath.Join(dir, "log"))
	require.NoError(t, err)
	require.NotEmpty(t, nos)
}

// TestPending finds the files that lack what the log holds, without
// changing anything, and does not flag bytes a later cut took back.
func TestPending(t *testing.T) {
	f := newFixture(t, nil, 0)
	require.NoError(t, f.write("whole", []byte("a\n")))
	require.NoError(t, f.write("short", []byte("b\n")))
	require.NoError(t, f.write("cut", []byte("c\n")))
	require.NoError(t, f.write("cut", []byte("failed\n")))
	require.NoError(t, f.log.Cut("cut", 2))
	require.NoError(t, os.Truncate(f.path("cut"), 2))
	f.crash()
	require.NoError(t, os.WriteFile(f.path("short"), nil, 0o600))
	names, err := Pending(nil, f.logDir(), f.path)
	require.NoError(t, err)
	require.Equal(t, []string{"short"}, names)
	require.Empty(t, f.read("short"), "Pending changes nothing")
	f.open()
	require.NoError(t, f.log.Close())
	names, err = Pending(nil, f.logDir(), f.path)
	require.NoError(t, err)
	require.Empty(t, names)
}

// TestNoSpaceToPreallocate: a segment that cannot be preallocated grows as
// it is written instead.
func TestNoSpaceToPreallocate(t *testing.T) {
	ffs := vfstest.New(nil)
	ffs.Set(vfstest.Faults{Write: func(name string, p []byte) (int, error) {
		if strings.HasSuffix(name, ".log") && len(p) == len(zeros) && bytes.Count(p, []byte{0}) == len(p) {
			return 0, syscall.ENOSPC
		}
		return len(p), nil
	}})
	f := newFixture(t, ffs, 0)
	require.NoError(t, f.write("a", []byte("one\n")))
	f.crash()
	require.NoError(t, os.WriteFile(f.path("a"), nil, 0o600))
	ffs.Set(vfstest.Faults{})
	f.open()
	require.NoError(t, f.log.Close())
	require.Equal(t, "one\n", string(f.read("a")))
}

// TestReusedSegmentsReplayNothingStale: retired segment files are kept
// and reused for new segments; the batches they held before validate
// under no other number, so a replay applies only what the new segment
// holds, even after a journal it named was cut back.
func TestReusedSegmentsReplayNothingStale(t *testing.T) {
	f := newFixture(t, nil, 4*blockSize)
	for i := range 40 {
		require.NoError(t, f.write("a", line("a", i)))
	}
	countFree := func() int {
		ents, err := os.ReadDir(f.logDir())
		require.NoError(t, err)
		var free int
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "free-") {
				free++
			}
		}
		return free
	}
	// Segments are checkpointed in the background, and a free file may
	// be taken by a later segment meanwhile: once the last checkpoint is
	// done, its file is kept.
	require.Eventually(t, func() bool { return countFree() > 0 }, 10*time.Second, time.Millisecond,
		"checkpointed segments are kept for reuse")
	require.LessOrEqual(t, countFree(), maxFree)
	require.NoError(t, f.log.Close()) // every batch of a is checkpointed
	f.open()                          // its first segment reuses a file
	require.NoError(t, f.write("b", []byte("b\n")))
	f.crash()
	// Cut a back, as a failed commit's rollback might have: no stale
	// batch of a reused file may write it again.
	require.NoError(t, os.Truncate(f.path("a"), 10))
	require.NoError(t, os.WriteFile(f.path("b"), nil, 0o600))
	f.open()
	require.NoError(t, f.log.Close())
	require.Len(t, f.read("a"), 10)
	require.Equal(t, "b\n", string(f.read("b")))
	require.Empty(t, f.segments())
}

// TestSegmentsNumberedInWriteOrder: a replay goes by segment number, so a
// segment's number must be later than that of every segment written
// before it, whether it was a spare, a reused file or made on the spot;
// a cut and the write after it then replay in their order across a
// rotation.
func TestSegmentsNumberedInWriteOrder(t *testing.T) {
	var frozen atomic.Bool
	f := newFixtureWith(t, nil, 2*blockSize, func(o *Options) { o.skipCheckpoint = frozen.Load })
	var last uint64
	for i := range 30 {
		require.NoError(t, f.write(fmt.Sprint("f", i%3), line("x", i)))
		no := f.log.seg.no // (set before the commit was acknowledged)
		require.GreaterOrEqual(t, no, last, "write %d", i)
		last = no
	}
	// From here no segment is checkpointed until the crash: the replay
	// sees them all.
	frozen.Store(true)
	require.NoError(t, f.write("j", []byte("kept\n")))
	require.NoError(t, f.write("j", []byte("failed\n")))
	require.NoError(t, f.log.Cut("j", 5))
	require.NoError(t, os.Truncate(f.path("j"), 5))
	f.sizes["j"] = 5
	cutIn := f.log.seg.no
	for i := 0; f.log.seg.no == cutIn; i++ {
		require.NoError(t, f.write("other", line("o", i)))
	}
	require.NoError(t, f.write("j", []byte("after\n")))
	f.crash()
	require.NoError(t, os.WriteFile(f.path("j"), nil, 0o600))
	f.open()
	require.NoError(t, f.log.Close())
	require.Equal(t, "kept\nafter\n", string(f.read("j")))
}

// TestDropOfAnUnopenableFile: a journal file the log cannot open (its mode
// changed under the daemon) refuses the drop with the reason, and the log
// goes on: nothing was synced, so nothing a failed write-back reported is
// lost. A failed fsync still stops it.
func TestDropOfAnUnopenableFile(t *testing.T) {
	ffs := vfstest.New(nil)
	f := newFixture(t, ffs, 0)
	require.NoError(t, f.write("a", []byte("one\n")))
	ffs.Set(vfstest.Faults{Open: func(name string, _ int) error {
		if name == f.path("a") {
			return syscall.EACCES
		}
		return nil
	}})
	err := f.log.Drop("a")
	require.ErrorIs(t, err, syscall.EACCES)
	require.NoError(t, f.write("b", []byte("two\n")), "the log still takes commits")
	ffs.Set(vfstest.Faults{Sync: func(name string) error {
		if name == f.path("a") {
			return syscall.EIO
		}
		return nil
	}})
	require.ErrorIs(t, f.log.Drop("a"), syscall.EIO)
	require.Error(t, f.write("b", []byte("three\n")), "a failed fsync stops the log")
	ffs.Set(vfstest.Faults{})
	_ = f.log.Close()
}
