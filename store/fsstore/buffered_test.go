package fsstore

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/vfs/vfstest"
)

// startedRun creates a run in a new session, leases it and starts its
// first attempt (a synced update), as the runner does.
func startedRun(t *testing.T, s *Store) (belay.Session, belay.Run) {
	t.Helper()
	ctx := context.Background()
	sess := newSession(t, s)
	r, _, err := s.CreateRun(ctx, belay.RunInput{Session: sess.ID})
	require.NoError(t, err)
	l, err := s.AcquireRunLease(ctx, r.ID, "w", time.Minute, 0)
	require.NoError(t, err)
	l, err = s.UpdateRun(ctx, r.ID, l.Epoch, belay.RunUpdate{Phase: belay.PhaseAwaitingResponse, Attempt: 1})
	require.NoError(t, err)
	return sess, l
}

// TestBufferedUpdateRidesOnNextSync checks that a buffered phase change is
// neither folded nor readable before it is durable, is made durable by the
// session's next synced write, and folds the same live, from a snapshot
// and from the journal alone.
func TestBufferedUpdateRidesOnNextSync(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// Buffered appends wait for a synced one, however long it takes.
	opts := Options{BufferedDelay: time.Hour}
	s := openStore(t, dir, opts)
	ctx := context.Background()
	sess, r := startedRun(t, s)
	before, err := s.Session(ctx, sess.ID)
	require.NoError(t, err)

	got, err := s.UpdateRun(ctx, r.ID, r.Epoch, belay.RunUpdate{Phase: belay.PhaseStreaming, Buffered: true})
	require.NoError(t, err)
	require.Equal(t, belay.PhaseStreaming, got.Phase, "the caller gets the run as it will be")
	stored, err := s.Run(ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, belay.PhaseAwaitingResponse, stored.Phase, "not folded before it is durable")
	now, err := s.Session(ctx, sess.ID)
	require.NoError(t, err)
	require.Equal(t, before.LastSeq, now.LastSeq, "readers see only synced events")

	// The next synced write of the session carries it, in order.
	_, err = s.RenewRunLease(ctx, r.ID, r.Epoch, time.Minute, nil)
	require.NoError(t, err)
	stored, err = s.Run(ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, belay.PhaseStreaming, stored.Phase)
	evs, err := s.Events(ctx, sess.ID, before.LastSeq, 10)
	require.NoError(t, err)
	require.Len(t, evs, 2)
	require.Equal(t, belay.EventRunUpdated, evs[0].Type)
	require.Equal(t, belay.EventRunRenewed, evs[1].Type)

	// A second buffered change that nothing synced before Close: Close
	// commits it, and every fold agrees on it.
	_, err = s.UpdateRun(ctx, r.ID, r.Epoch, belay.RunUpdate{Phase: belay.PhaseFinishing, Buffered: true})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	fromSnap := openStore(t, dir, opts)
	want := capture(t, fromSnap)
	require.NoError(t, fromSnap.Close())
	dropFolds(t, dir)
	fromJournal := openStore(t, dir, opts)
	require.Equal(t, want, capture(t, fromJournal))
	stored, err = fromJournal.Run(ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, belay.PhaseFinishing, stored.Phase)
}

// TestBufferedUpdateFoldsOnItsOwn checks that a buffered phase change
// with no synced write after it is folded once its own commit (the
// buffered delay) makes it durable.
func TestBufferedUpdateFoldsOnItsOwn(t *testing.T) {
	t.Parallel()
	s := openStore(t, t.TempDir(), Options{BufferedDelay: time.Millisecond})
	ctx := context.Background()
	_, r := startedRun(t, s)
	_, err := s.UpdateRun(ctx, r.ID, r.Epoch, belay.RunUpdate{Phase: belay.PhaseStreaming, Buffered: true})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		got, err := s.Run(ctx, r.ID)
		return err == nil && got.Phase == belay.PhaseStreaming
	}, 10*time.Second, time.Millisecond)
}

// TestBufferedUpdateLostWithItsCommit fails the commit that carries a
// buffered phase change: the change is never folded, the session heals,
// the next writes take its seq, and the live state is the fold of the
// journal.
func TestBufferedUpdateLostWithItsCommit(t *testing.T) {
	t.Parallel()
	for _, c := range commitFaults {
		t.Run(c.mode, func(t *testing.T) {
			t.Parallel()
			ffs := vfstest.New(nil)
			dir := t.TempDir()
			opts := Options{FS: ffs, BufferedDelay: time.Hour, Sync: c.mode}
			s := openStore(t, dir, opts)
			ctx := context.Background()
			sess, r := startedRun(t, s)
			before, err := s.Session(ctx, sess.ID)
			require.NoError(t, err)

			_, err = s.UpdateRun(ctx, r.ID, r.Epoch, belay.RunUpdate{Phase: belay.PhaseStreaming, Buffered: true})
			require.NoError(t, err)
			ffs.Set(vfstest.Faults{Sync: func(name string) error {
				if c.synced(name, sess.ID) {
					return syscall.EIO
				}
				return nil
			}})
			_, err = s.RenewRunLease(ctx, r.ID, r.Epoch, time.Minute, nil)
			require.ErrorIs(t, err, belay.ErrReadOnly)
			ffs.Set(vfstest.Faults{})

			// The heal cuts the journal back to what was acknowledged: the phase
			// change went with it and was never folded.
			_, err = s.RenewRunLease(ctx, r.ID, r.Epoch, time.Minute, nil)
			require.NoError(t, err)
			stored, err := s.Run(ctx, r.ID)
			require.NoError(t, err)
			require.Equal(t, belay.PhaseAwaitingResponse, stored.Phase)
			evs, err := s.Events(ctx, sess.ID, before.LastSeq, 10)
			require.NoError(t, err)
			require.Len(t, evs, 1)
			require.Equal(t, belay.EventRunRenewed, evs[0].Type)
			require.Equal(t, before.LastSeq+1, evs[0].Seq)

			// Buffered changes after the heal fold as usual.
			_, err = s.UpdateRun(ctx, r.ID, r.Epoch, belay.RunUpdate{Phase: belay.PhaseStreaming, Buffered: true})
			require.NoError(t, err)
			_, err = s.UpdateRun(ctx, r.ID, r.Epoch, belay.RunUpdate{Phase: belay.PhaseComplete})
			require.NoError(t, err)
			live := capture(t, s)
			require.NoError(t, s.Close())
			dropFolds(t, dir)
			fromJournal := openStore(t, dir, Options{Sync: c.mode})
			require.Equal(t, live, capture(t, fromJournal))
		})
	}
}

func TestBufferedUpdateRefusesDecisions(t *testing.T) {
	t.Parallel()
	s := openStore(t, t.TempDir(), Options{})
	ctx := context.Background()
	_, r := startedRun(t, s)
	for _, u := range []belay.RunUpdate{
		{Phase: belay.PhaseComplete, Buffered: true},
		{Phase: belay.PhaseFailed, Buffered: true, Error: &belay.RunError{Class: belay.ClassTimeout, Message: "m"}},
		{Phase: belay.PhaseAwaitingResponse, Attempt: 2, Buffered: true},
		{Phase: belay.PhaseStreaming, Ref: &belay.ConversationRef{ID: "c"}, Buffered: true},
		{Phase: belay.PhaseStreaming, Reason: "r", Buffered: true},
		{Buffered: true},
	} {
		_, err := s.UpdateRun(ctx, r.ID, r.Epoch, u)
		require.ErrorIs(t, err, belay.ErrInvalid, "%+v", u)
	}
}
