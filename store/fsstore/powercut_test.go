package fsstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/vfs/vfstest"
	"github.com/belayhq/belay/journal/commitlog"
)

// TestPowerCutKeepsWhatWasAcknowledged cuts the power under concurrent
// writers: every file loses what was written since its last sync (all of
// it, or a random part of it that the page cache had written back). After
// the store is opened again every acknowledged Sync append and state
// change is there at its seq, nothing is quarantined, and the live state
// is the fold of the journals. With the commit log the journals are never
// synced while the store runs, so this is the test of its replay.
func TestPowerCutKeepsWhatWasAcknowledged(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{SyncLog, SyncFile} {
		for _, partial := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/partial=%v", mode, partial), func(t *testing.T) {
				t.Parallel()
				powerCut(t, mode, partial)
			})
		}
	}
}

type acked struct {
	session string
	seq     uint64
	typ     string
}

func powerCut(t *testing.T, mode string, partial bool) {
	ctx := context.Background()
	dir := t.TempDir()
	pc := vfstest.NewPowerCut(nil)
	s, err := Open(ctx, dir, Options{FS: pc, Sync: mode, SnapshotEvery: 5, LogSegmentSize: 64 << 10})
	require.NoError(t, err)

	var mu sync.Mutex
	var acks []acked
	runs := map[string]belay.RunStatus{} // run -> last acknowledged status
	ack := func(a acked) {
		mu.Lock()
		acks = append(acks, a)
		mu.Unlock()
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var frozen atomic.Bool
	// gone reports the writer's error unless the power is already gone.
	gone := func(err error) {
		if !frozen.Load() {
			t.Errorf("before the cut: %v", err)
		}
	}
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sess, err := s.CreateSession(ctx, belay.SessionInput{Provider: "fake"})
			if err != nil {
				t.Error(err)
				return
			}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				typ := fmt.Sprintf("note-%d-%d", w, i)
				seqs, err := s.Append(ctx, sess.ID, belay.Sync, belay.Event{Type: typ})
				if err != nil {
					gone(err)
					return
				}
				ack(acked{sess.ID, seqs[0], typ})
				if _, err := s.Append(ctx, sess.ID, belay.Buffered, belay.Event{Type: "delta"}); err != nil {
					gone(err)
					return
				}
				r, _, err := s.CreateRun(ctx, belay.RunInput{Session: sess.ID})
				if err != nil {
					gone(err)
					return
				}
				mu.Lock()
				runs[r.ID] = belay.RunQueued
				mu.Unlock()
				l, err := s.AcquireRunLease(ctx, r.ID, "w", time.Minute, 0)
				if err != nil {
					gone(err)
					return
				}
				if _, err := s.UpdateRun(ctx, r.ID, l.Epoch, belay.RunUpdate{Phase: belay.PhaseComplete}); err != nil {
					gone(err)
					return
				}
				mu.Lock()
				runs[r.ID] = belay.RunComplete
				mu.Unlock()
			}
		}()
	}
	// Let the writers go through several log segments and snapshots.
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(runs) >= 300
	}, 30*time.Second, time.Millisecond)
	frozen.Store(true)
	pc.Freeze()
	close(stop)
	wg.Wait()
	_ = s.Close() // fails: the power is gone
	rng := rand.New(rand.NewPCG(1, uint64(len(acks))))
	var keep func(string, int) int
	if partial {
		keep = func(_ string, n int) int { return rng.IntN(n + 1) }
	}
	require.NoError(t, pc.Cut(keep))
	if mode == SyncLog {
		pending, err := commitlog.Pending(nil, dirLog(dir), func(id string) string { return journalPath(dir, id) })
		require.NoError(t, err)
		if !partial {
			require.NotEmpty(t, pending, "the journals lost what only the log had")
		}
		ro, err := Open(ctx, dir, Options{ReadOnly: true})
		require.NoError(t, err)
		for _, id := range pending {
			got, err := ro.Session(ctx, id)
			require.NoError(t, err)
			require.Contains(t, got.Problem, "commit log")
		}
		require.NoError(t, ro.Close())
	}

	// A second cut right after the store opens again, while the replayed
	// segments may still be waiting for their checkpoint: the journals
	// the replay wrote are not synced yet either.
	pc2 := vfstest.NewPowerCut(nil)
	again, err := Open(ctx, dir, Options{FS: pc2, Sync: mode})
	require.NoError(t, err)
	cutPower(t, pc2, again)

	s2, err := Open(ctx, dir, Options{Sync: mode})
	require.NoError(t, err)
	defer s2.Close()
	for _, a := range acks {
		evs, err := s2.Events(ctx, a.session, a.seq-1, 1)
		require.NoError(t, err, "session %s", a.session)
		require.Len(t, evs, 1, "acknowledged seq %d of %s", a.seq, a.session)
		require.Equal(t, a.typ, evs[0].Type)
	}
	for id, status := range runs {
		r, err := s2.Run(ctx, id)
		require.NoError(t, err, "run %s was acknowledged", id)
		if status == belay.RunComplete {
			require.Equal(t, belay.RunComplete, r.Status, "run %s", id)
		}
	}
	sessions, err := s2.Sessions(ctx, belay.SessionFilter{})
	require.NoError(t, err)
	for _, sess := range sessions {
		require.Empty(t, sess.Problem, sess.ID)
		require.NotEqual(t, belay.SessionQuarantined, sess.State)
	}
	live := capture(t, s2)
	require.NoError(t, s2.Close())
	dropFolds(t, dir)
	fromJournal := openStore(t, dir, Options{Sync: mode})
	require.Equal(t, live, capture(t, fromJournal))
}

func dirLog(dir string) string { return filepath.Join(dir, LogName) }

// cutPower cuts the power under s: every change from now fails, s is
// closed (it writes nothing more), and each file is left with what it
// synced.
func cutPower(t *testing.T, pc *vfstest.PowerCut, s *Store) {
	t.Helper()
	pc.Freeze()
	_ = s.Close() // fails: the power is gone
	require.NoError(t, pc.Cut(nil))
}

// openPowerCut opens a store in a new directory on a PowerCut FS.
func openPowerCut(t *testing.T, opts Options) (string, *vfstest.PowerCut, *Store) {
	t.Helper()
	dir := t.TempDir()
	pc := vfstest.NewPowerCut(nil)
	opts.FS = pc
	s, err := Open(context.Background(), dir, opts)
	require.NoError(t, err)
	return dir, pc, s
}

// TestPowerCutAfterIDReuse: a session deleted and created again under
// the same id, then a power cut: the replay applies none of the deleted
// journal's records to the new one.
func TestPowerCutAfterIDReuse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir, pc, s := openPowerCut(t, Options{})
	id := "ses_01jfz0000000000000000000aa"
	_, err := s.CreateSession(ctx, belay.SessionInput{ID: id, Provider: "fake"})
	require.NoError(t, err)
	for range 20 {
		_, err := s.Append(ctx, id, belay.Sync, belay.Event{Type: "old", Data: []byte(`{"padding":"the deleted session's bytes"}`)})
		require.NoError(t, err)
	}
	require.NoError(t, s.DeleteSession(ctx, id, false))
	_, err = s.CreateSession(ctx, belay.SessionInput{ID: id, Provider: "fake"})
	require.NoError(t, err)
	seqs, err := s.Append(ctx, id, belay.Sync, belay.Event{Type: "new"})
	require.NoError(t, err)
	cutPower(t, pc, s)

	s2 := openStore(t, dir, Options{})
	got, err := s2.Session(ctx, id)
	require.NoError(t, err)
	require.Empty(t, got.Problem)
	require.Equal(t, seqs[0], got.LastSeq)
	evs, err := s2.Events(ctx, id, 0, 100)
	require.NoError(t, err)
	require.Len(t, evs, 2)
	require.Equal(t, "new", evs[1].Type)
}

// TestApplyLog: the commit log a killed process left is replayed into the
// journals and retired, for an offline writer that comes next.
func TestApplyLog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir, pc, s := openPowerCut(t, Options{})
	sess := newSession(t, s)
	seqs, err := s.Append(ctx, sess.ID, belay.Sync, belay.Event{Type: "kept"})
	require.NoError(t, err)
	cutPower(t, pc, s)
	segs, err := commitlog.Segments(nil, dirLog(dir))
	require.NoError(t, err)
	require.NotEmpty(t, segs)

	require.NoError(t, ApplyLog(dir))
	segs, err = commitlog.Segments(nil, dirLog(dir))
	require.NoError(t, err)
	require.Empty(t, segs)
	ro, err := Open(ctx, dir, Options{ReadOnly: true})
	require.NoError(t, err)
	defer ro.Close()
	got, err := ro.Session(ctx, sess.ID)
	require.NoError(t, err)
	require.Empty(t, got.Problem)
	require.Equal(t, seqs[0], got.LastSeq)
	require.NoError(t, ApplyLog(dir), "nothing left to apply")
}
