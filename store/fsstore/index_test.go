package fsstore

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/clock"
	"github.com/belayhq/belay/internal/vfs/vfstest"
	"github.com/belayhq/belay/store/storetest"
	"github.com/stretchr/testify/require"
)

// counts leaves out what varies from run to run.
func (st IndexStats) counts() IndexStats {
	return IndexStats{FromIndex: st.FromIndex, Opened: st.Opened}
}

// busySessions creates n sessions with state of every kind: a finished
// run, a queued one, deliveries (one leased), keys.
func busySessions(t *testing.T, s *Store, clk *clock.Fake, n int) []string {
	t.Helper()
	ctx := context.Background()
	var ids []string
	for i := range n {
		sess, err := s.CreateSession(ctx, belay.SessionInput{Provider: "fake", IdempotencyKey: "s" + string(rune('a'+i)), Labels: map[string]string{"i": "x"}})
		require.NoError(t, err)
		ids = append(ids, sess.ID)
		r, _, err := s.CreateRun(ctx, belay.RunInput{Session: sess.ID, IdempotencyKey: "r1", Input: json.RawMessage(`{"prompt":"p"}`)})
		require.NoError(t, err)
		l, err := s.AcquireRunLease(ctx, r.ID, "w", time.Minute, 0)
		require.NoError(t, err)
		clk.Advance(time.Second)
		_, err = s.UpdateRun(ctx, r.ID, l.Epoch, belay.RunUpdate{Phase: belay.PhaseComplete, Deliver: &belay.DeliveryInput{Session: sess.ID, Type: "run.done", Key: r.ID}})
		require.NoError(t, err)
		_, _, err = s.CreateRun(ctx, belay.RunInput{Session: sess.ID, Priority: i})
		require.NoError(t, err)
		_, _, err = s.PostDelivery(ctx, belay.DeliveryInput{Session: sess.ID, Type: "t", Key: "k"})
		require.NoError(t, err)
		_, err = s.LeaseDeliveries(ctx, sess.ID, "agent", time.Minute, 1)
		require.NoError(t, err)
		_, err = s.Append(ctx, sess.ID, belay.Sync, belay.Event{Type: "note", Data: json.RawMessage(`{"padding":"abcdefghij"}`)})
		require.NoError(t, err)
	}
	return ids
}

// indexed creates n busy sessions in a new store and closes it, which
// writes the index: its directory, clock and sessions, and what it showed.
func indexed(t *testing.T, n int) (dir string, clk *clock.Fake, ids []string, want view) {
	t.Helper()
	dir = t.TempDir()
	clk = clock.NewFake(storetest.Start)
	s := openStore(t, dir, Options{Clock: clk})
	ids = busySessions(t, s, clk, n)
	want = capture(t, s)
	require.NoError(t, s.Close())
	return dir, clk, ids, want
}

// TestIndexRestoresOnlyUnchangedSessions: an index older than the
// journals (the store that followed it was killed) is trusted for the
// sessions whose journals did not change since, and for no other: the
// changed, the recreated under the same id and the new are folded from
// their journals, and the deleted are gone.
func TestIndexRestoresOnlyUnchangedSessions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir, clk, ids, _ := indexed(t, 5)
	opts := Options{Clock: clk}
	old, err := os.ReadFile(filepath.Join(dir, IndexName))
	require.NoError(t, err)

	s := openStore(t, dir, opts)
	require.Equal(t, IndexStats{FromIndex: 5}, s.Loaded().counts())
	clk.Advance(time.Hour)
	// 0: appended to; 1: a run finished; 2: deleted; 3: deleted and
	// created again under its id, the same way; 4: untouched; and one new.
	_, err = s.Append(ctx, ids[0], belay.Sync, belay.Event{Type: "note"})
	require.NoError(t, err)
	queued, err := s.Runs(ctx, belay.RunFilter{Session: ids[1], Status: belay.RunQueued})
	require.NoError(t, err)
	require.Len(t, queued, 1)
	_, err = s.CancelQueuedRun(ctx, queued[0].ID, "changed my mind")
	require.NoError(t, err)
	for _, id := range ids[2:4] {
		queued, err := s.Runs(ctx, belay.RunFilter{Session: id, Status: belay.RunQueued})
		require.NoError(t, err)
		_, err = s.CancelQueuedRun(ctx, queued[0].ID, "deleting")
		require.NoError(t, err)
		require.NoError(t, s.DeleteSession(ctx, id, true))
	}
	_, err = s.CreateSession(ctx, belay.SessionInput{ID: ids[3], Provider: "fake", IdempotencyKey: "sd", Labels: map[string]string{"i": "x"}})
	require.NoError(t, err)
	newSession(t, s)
	live := killedWith(t, s, old)

	s = openStore(t, dir, opts)
	require.Equal(t, IndexStats{FromIndex: 1, Opened: 4}, s.Loaded().counts())
	require.Equal(t, live, capture(t, s))
	require.NoError(t, s.Close())
	dropFolds(t, dir)
	s = openStore(t, dir, opts)
	require.Equal(t, live, capture(t, s))
}

// TestIndexNotTrustedAfterSameSizeRewrite: a journal changed in place,
// its size kept, is not the journal the index saw: its change time
// differs. The session is opened from its journal (and reading it finds
// the damage).
func TestIndexNotTrustedAfterSameSizeRewrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir, clk, ids, _ := indexed(t, 2)
	path := journalPath(dir, ids[0])
	afterClockTick(t, path)
	damageInPlace(t, path)

	s := openStore(t, dir, Options{Clock: clk})
	require.Equal(t, IndexStats{FromIndex: 1, Opened: 1}, s.Loaded().counts())
	_, err := s.Events(ctx, ids[0], 0, 100)
	require.ErrorContains(t, err, "quarantined: damage at offset")
	_, err = s.Events(ctx, ids[1], 0, 100)
	require.NoError(t, err)
}

// damageInPlace changes one byte of the first run's input in a journal
// busySessions wrote, in place: the file keeps its size and inode, and the
// record (not the last, whose damage would be a torn write) its length.
func damageInPlace(t *testing.T, path string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	i := bytes.Index(raw, []byte(`"prompt":"p"`))
	require.Positive(t, i)
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("q"), int64(i+len(`"prompt":"`)))
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// afterClockTick waits until a file changed now gets a change time later
// than path's: on a kernel whose file times are coarse, a change made in
// the same tick as path's last one could carry the same time.
func afterClockTick(t *testing.T, path string) {
	t.Helper()
	fi, err := os.Stat(path)
	require.NoError(t, err)
	want, ok := stamp(fi)
	if !ok {
		t.Skip("the store index is not used on this system")
	}
	probe := filepath.Join(t.TempDir(), "probe")
	for {
		require.NoError(t, os.WriteFile(probe, []byte("x"), 0o600))
		fi, err := os.Stat(probe)
		require.NoError(t, err)
		if st, _ := stamp(fi); st.Ctime > want.Ctime {
			return
		}
	}
}

// TestDamagedIndexIsNotUsed: a torn, damaged or foreign index loads every
// session from its journal, and says why.
func TestDamagedIndexIsNotUsed(t *testing.T) {
	t.Parallel()
	dir, clk, _, want := indexed(t, 3)
	good, err := os.ReadFile(filepath.Join(dir, IndexName))
	require.NoError(t, err)

	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 0x20
	for name, c := range map[string]struct {
		raw []byte
		why string
	}{
		"torn":    {good[:len(good)-7], "checksum"},
		"damaged": {flipped, "checksum"},
		"foreign": {append([]byte("belayix9"), good[8:]...), "not an index of this version"},
		"empty":   {nil, "not an index of this version"},
	} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, IndexName), c.raw, 0o600), name)
		s := openStore(t, dir, Options{Clock: clk})
		require.ErrorContains(t, s.Loaded().Err, c.why, name)
		require.Equal(t, IndexStats{Opened: 3}, s.Loaded().counts(), name)
		require.Equal(t, want, capture(t, s), name)
		require.NoError(t, s.Close())
	}
}

// TestIndexLeavesOutFailedJournals: a session whose journal failed a
// commit is not indexed (its file may hold the failed batch); the next
// open folds it from its journal, without what failed.
func TestIndexLeavesOutFailedJournals(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{SyncLog, SyncFile} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dir := t.TempDir()
			ffs := vfstest.New(nil)
			s := openStore(t, dir, Options{FS: ffs, Sync: mode})
			bad, good := newSession(t, s), newSession(t, s)
			fail := func(name string) bool { return strings.Contains(name, bad.ID) }
			if mode == SyncLog {
				// Half the batch reaches the journal.
				ffs.Set(vfstest.Faults{Write: func(name string, p []byte) (int, error) {
					if fail(name) {
						return len(p) / 2, syscall.EIO
					}
					return len(p), nil
				}})
			} else {
				ffs.Set(vfstest.Faults{Sync: func(name string) error {
					if fail(name) {
						return syscall.EIO
					}
					return nil
				}})
			}
			_, err := s.Append(ctx, bad.ID, belay.Sync, belay.Event{Type: "lost"})
			require.Error(t, err)
			_, err = s.Append(ctx, good.ID, belay.Sync, belay.Event{Type: "kept"})
			require.NoError(t, err)
			ffs.Set(vfstest.Faults{})
			require.NoError(t, s.Close())

			s = openStore(t, dir, Options{Sync: mode})
			require.Equal(t, IndexStats{FromIndex: 1, Opened: 1}, s.Loaded().counts())
			evs, err := s.Events(ctx, bad.ID, 0, 10)
			require.NoError(t, err)
			for _, e := range evs {
				require.NotEqual(t, "lost", e.Type)
			}
		})
	}
}

// TestReadOnlyOpenUsesTheIndex: an offline reader loads from the index
// too, and writes none.
func TestReadOnlyOpenUsesTheIndex(t *testing.T) {
	t.Parallel()
	dir, _, _, want := indexed(t, 3)
	before, err := os.Stat(filepath.Join(dir, IndexName))
	require.NoError(t, err)

	ro := openStore(t, dir, Options{ReadOnly: true})
	require.Equal(t, IndexStats{FromIndex: 3}, ro.Loaded().counts())
	require.Equal(t, want, capture(t, ro))
	require.NoError(t, ro.Close())
	after, err := os.Stat(filepath.Join(dir, IndexName))
	require.NoError(t, err)
	require.Equal(t, before.ModTime(), after.ModTime())
}

// TestPowerCutAfterIndexedClose: a clean close writes the index; the
// next store appends and the power is cut. Every acknowledged append is
// there after, and the state is the fold of the journals.
func TestPowerCutAfterIndexedClose(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{SyncLog, SyncFile} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clk := clock.NewFake(storetest.Start)
			dir, pc, s := openPowerCut(t, Options{Clock: clk, Sync: mode})
			ids := busySessions(t, s, clk, 3)
			require.NoError(t, s.Close())

			s, err := Open(ctx, dir, Options{FS: pc, Clock: clk, Sync: mode})
			require.NoError(t, err)
			require.Equal(t, IndexStats{FromIndex: 3}, s.Loaded().counts())
			seqs, err := s.Append(ctx, ids[1], belay.Sync, belay.Event{Type: "acked"})
			require.NoError(t, err)
			cutPower(t, pc, s)

			s = openStore(t, dir, Options{Clock: clk, Sync: mode})
			require.Equal(t, 2, s.Loaded().FromIndex)
			got, err := s.Session(ctx, ids[1])
			require.NoError(t, err)
			require.Equal(t, seqs[0], got.LastSeq)
			live := capture(t, s)
			require.NoError(t, s.Close())
			dropFolds(t, dir)
			s = openStore(t, dir, Options{Clock: clk, Sync: mode})
			require.Equal(t, live, capture(t, s))
		})
	}
}

func FuzzDecodeIndex(f *testing.F) {
	f.Add(encodeIndex(map[string]indexEntry{
		"ses_a": {stamp: fileStamp{Dev: 1, Ino: 2, Size: 3, Mtime: 4, Ctime: 5}, lastSeq: 6, lastEvent: 7, state: []byte(`{"version":2}`)},
		"ses_b": {state: []byte(`{}`)},
	}))
	f.Add([]byte("belayix1"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, err := decodeIndex(raw)
		if err != nil {
			return
		}
		// What decodes encodes back to the same bytes (records are sorted
		// by id; a duplicate id keeps the last).
		again, err := decodeIndex(encodeIndex(got))
		require.NoError(t, err)
		require.Equal(t, got, again)
	})
}

// TestIndexWrittenWhileOpen: an open store writes the index every
// IndexEvery, of the sessions whose journals are closed; after a kill the
// next open restores those that did not change since from it.
func TestIndexWrittenWhileOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	clk := clock.NewFake(storetest.Start)
	opts := Options{Clock: clk, MaxOpen: 1, IndexEvery: time.Minute}
	s := openStore(t, dir, opts)
	ids := busySessions(t, s, clk, 3) // MaxOpen 1: only the last one's journal is open
	require.NoFileExists(t, filepath.Join(dir, IndexName))
	clk.Advance(time.Minute)
	var live []byte
	require.Eventually(t, func() bool {
		var err error
		live, err = os.ReadFile(filepath.Join(dir, IndexName))
		return err == nil
	}, 10*time.Second, time.Millisecond, "the index is written within IndexEvery")
	got, err := decodeIndex(live)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.NotContains(t, got, ids[2], "its journal is open")

	// A session in the index changes after it was written.
	_, err = s.Append(ctx, ids[0], belay.Sync, belay.Event{Type: "note"})
	require.NoError(t, err)
	want := killedWith(t, s, live)

	s = openStore(t, dir, opts)
	require.Equal(t, IndexStats{FromIndex: 1, Opened: 2}, s.Loaded().counts())
	require.Equal(t, want, capture(t, s))
}

// killedWith returns what s shows, then closes it and puts index back:
// as if s had been killed, with index the last one written before.
func killedWith(t *testing.T, s *Store, index []byte) view {
	t.Helper()
	v := capture(t, s)
	require.NoError(t, s.Close())
	require.NoError(t, os.WriteFile(filepath.Join(s.Dir(), IndexName), index, 0o600))
	return v
}

// restoredAgreesWithFold reopens dir (from the index if any), then again
// with every fold dropped, and returns the session and run as each saw
// them.
func restoredAgreesWithFold(t *testing.T, dir string, opts Options, session, run string) {
	t.Helper()
	ctx := context.Background()
	view := func() (belay.Session, belay.Run) {
		s := openStore(t, dir, opts)
		sess, err := s.Session(ctx, session)
		require.NoError(t, err)
		var r belay.Run
		if run != "" {
			r, err = s.Run(ctx, run)
			require.NoError(t, err)
		}
		require.NoError(t, s.Close())
		return sess, r
	}
	sess1, run1 := view()
	dropFolds(t, dir)
	sess2, run2 := view()
	require.Equal(t, sess2, sess1, "the session as restored and as folded")
	require.Equal(t, run2, run1, "the run as restored and as folded")
}

// TestIndexAfterEvictedBufferedAppend: a journal closed for being idle
// commits its buffered appends as it closes; the index has the last seq
// after them.
func TestIndexAfterEvictedBufferedAppend(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	opts := Options{MaxOpen: 1, BufferedDelay: time.Hour}
	s := openStore(t, dir, opts)
	a, b := newSession(t, s), newSession(t, s)
	_, err := s.Append(ctx, a.ID, belay.Buffered, belay.Event{Type: "buffered-note"})
	require.NoError(t, err)
	_, err = s.Append(ctx, b.ID, belay.Sync, belay.Event{Type: "evicts-a"})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	restoredAgreesWithFold(t, dir, opts, a.ID, "")
}

// TestIndexAfterEvictedJournalFailedItsLastCommit: a journal closed for
// being idle fails the commit of its buffered state change as it closes:
// the change was not acknowledged as durable, it is cut off the file, and
// the index agrees with the fold.
func TestIndexAfterEvictedJournalFailedItsLastCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	ffs := vfstest.New(nil)
	opts := Options{FS: ffs, Sync: SyncFile, MaxOpen: 1, BufferedDelay: time.Hour}
	s := openStore(t, dir, opts)
	sess, r := startedRun(t, s)
	other := newSession(t, s) // evicts sess
	_, err := s.UpdateRun(ctx, r.ID, r.Epoch, belay.RunUpdate{Phase: belay.PhaseStreaming, Buffered: true})
	require.NoError(t, err)
	ffs.Set(vfstest.Faults{Sync: func(name string) error {
		if strings.Contains(name, sess.ID) {
			return syscall.EIO
		}
		return nil
	}})
	_, err = s.Append(ctx, other.ID, belay.Sync, belay.Event{Type: "evicts"})
	require.NoError(t, err)
	ffs.Set(vfstest.Faults{})
	// The session is not stuck: its next use opens the journal again.
	_, err = s.Append(ctx, sess.ID, belay.Sync, belay.Event{Type: "after"})
	require.NoError(t, err)
	_, err = s.Events(ctx, sess.ID, 0, 100)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	raw, err := os.ReadFile(journalPath(dir, sess.ID))
	require.NoError(t, err)
	require.NotContains(t, string(raw), `"streaming"`, "the failed commit was cut off")
	restoredAgreesWithFold(t, dir, Options{Sync: SyncFile}, sess.ID, r.ID)
}

// TestQuarantineDropsTheIndex: a read that finds damage records the
// quarantine, which does not change the journal; the index written before
// is removed at once, so that a kill then cannot bring the session back
// as healthy, and the next index leaves it out.
func TestQuarantineDropsTheIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir, clk, ids, _ := indexed(t, 2)
	opts := Options{Clock: clk}

	// Damage inside what the snapshot covers: an open does not see it.
	path := journalPath(dir, ids[0])
	damageInPlace(t, path)
	s := openStore(t, dir, opts)
	require.NoError(t, s.Close()) // indexes it: the damage is not known yet
	require.FileExists(t, filepath.Join(dir, IndexName))

	s = openStore(t, dir, opts)
	require.Equal(t, IndexStats{FromIndex: 2}, s.Loaded().counts())
	_, err := s.Events(ctx, ids[0], 0, 100)
	require.ErrorContains(t, err, "quarantined")
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(dir, IndexName))
		return os.IsNotExist(err)
	}, 10*time.Second, time.Millisecond, "the index is removed")
	require.NoError(t, s.Close())
	idx, err := os.ReadFile(filepath.Join(dir, IndexName))
	require.NoError(t, err)
	entries, err := decodeIndex(idx)
	require.NoError(t, err)
	require.NotContains(t, entries, ids[0])
	require.Contains(t, entries, ids[1])

	s = openStore(t, dir, opts)
	got, err := s.Session(ctx, ids[0])
	require.NoError(t, err)
	require.Equal(t, belay.SessionQuarantined, got.State)
}

// TestIndexAfterEventWithItsOwnTime: a caller's event that carries its own
// time makes it the session's newest event time as the fold finds it.
func TestIndexAfterEventWithItsOwnTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir, clk, opts, s := clockedStore(t, Options{})
	a := newSession(t, s)
	clk.Advance(time.Minute)
	_, err := s.Append(ctx, a.ID, belay.Sync, belay.Event{Type: "note", TS: storetest.Start.Add(time.Hour)})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	restoredAgreesWithFold(t, dir, opts, a.ID, "")

	// A time in the past, then an event that is a repeat (nothing written).
	s = openStore(t, dir, opts)
	clk.Advance(2 * time.Hour)
	_, err = s.Append(ctx, a.ID, belay.Sync, belay.Event{Type: "note", ID: "once", TS: storetest.Start.Add(-time.Hour)})
	require.NoError(t, err)
	clk.Advance(time.Minute)
	_, err = s.Append(ctx, a.ID, belay.Sync, belay.Event{Type: "note", ID: "once"})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	restoredAgreesWithFold(t, dir, opts, a.ID, "")
}

// TestFailedOpenKeepsTheIndex: a store that fails to open writes no index
// over the one there.
func TestFailedOpenKeepsTheIndex(t *testing.T) {
	t.Parallel()
	dir, clk, _, _ := indexed(t, 2)
	before, err := os.ReadFile(filepath.Join(dir, IndexName))
	require.NoError(t, err)
	require.NoError(t, os.RemoveAll(filepath.Join(dir, LogName)))
	require.NoError(t, os.WriteFile(filepath.Join(dir, LogName), []byte("not a directory"), 0o600))
	_, err = Open(context.Background(), dir, Options{Clock: clk})
	require.Error(t, err)
	after, err := os.ReadFile(filepath.Join(dir, IndexName))
	require.NoError(t, err)
	require.Equal(t, before, after)
}
