package fsstore

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/clock"
	"github.com/belayhq/belay/internal/vfs/vfstest"
	"github.com/belayhq/belay/journal"
	"github.com/belayhq/belay/store/storetest"
)

func TestStoreIDsAreReserved(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openStore(t, dir, Options{})
	ctx := context.Background()
	sess := newSession(t, s)
	_, err := s.Append(ctx, sess.ID, belay.Sync, belay.Event{Type: "note", ID: storeIDPrefix + "run/k1"})
	require.ErrorIs(t, err, belay.ErrInvalid)
	// Caller ids that look like a key do not shadow the store's own events.
	_, err = s.Append(ctx, sess.ID, belay.Sync, belay.Event{Type: "note", ID: "run:k1"}, belay.Event{Type: "note", ID: "k1"})
	require.NoError(t, err)
	r, created, err := s.CreateRun(ctx, belay.RunInput{Session: sess.ID, IdempotencyKey: "k1"})
	require.NoError(t, err)
	require.True(t, created)
	require.NoError(t, s.Close())
	dropFolds(t, dir)
	s = openStore(t, dir, Options{})
	got, err := s.Run(ctx, r.ID)
	require.NoError(t, err, "the run was journaled, not only folded")
	require.Equal(t, r.InputSeq, got.InputSeq)
}

// dropFolds removes the sessions' snapshots and the store index, so that
// the next open folds every session from its journal alone.
func dropFolds(t *testing.T, dir string) {
	t.Helper()
	snaps, err := filepath.Glob(filepath.Join(dir, SessionsName, "*", journal.SnapshotName))
	require.NoError(t, err)
	for _, p := range snaps {
		require.NoError(t, os.Remove(p))
	}
	require.NoError(t, RemoveIndex(dir))
}

type view struct {
	Sessions   []belay.Session
	Runs       []belay.Run
	Deliveries []belay.Delivery
}

func capture(t *testing.T, s *Store) view {
	t.Helper()
	ctx := context.Background()
	var v view
	var err error
	v.Sessions, err = s.Sessions(ctx, belay.SessionFilter{})
	require.NoError(t, err)
	v.Runs, err = s.Runs(ctx, belay.RunFilter{})
	require.NoError(t, err)
	v.Deliveries, err = s.Deliveries(ctx, belay.DeliveryFilter{})
	require.NoError(t, err)
	return v
}

// TestFoldsAgree checks that the live state, the state restored from the
// store index, the state rebuilt from snapshots and the state rebuilt from
// the journals alone are the same, raw events at later times included.
func TestFoldsAgree(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clk := clock.NewFake(storetest.Start)
	opts := Options{Clock: clk, SnapshotEvery: 4}
	s := openStore(t, dir, opts)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		sess, err := s.CreateSession(ctx, belay.SessionInput{Provider: "fake", Labels: map[string]string{"i": "x"}, IdempotencyKey: "s" + string(rune('a'+i))})
		require.NoError(t, err)
		done, _, err := s.CreateRun(ctx, belay.RunInput{Session: sess.ID, IdempotencyKey: "r1", Priority: i, Input: json.RawMessage(`{"prompt":"p"}`)})
		require.NoError(t, err)
		l, err := s.AcquireRunLease(ctx, done.ID, "w", time.Minute, 0)
		require.NoError(t, err)
		clk.Advance(time.Second)
		_, err = s.UpdateRun(ctx, done.ID, l.Epoch, belay.RunUpdate{Phase: belay.PhaseStreaming, Ref: &belay.ConversationRef{ID: "c"}})
		require.NoError(t, err)
		_, err = s.Append(ctx, sess.ID, belay.Sync, belay.Event{Type: "delta", Run: done.ID, Epoch: l.Epoch, Data: json.RawMessage(`"x"`)})
		require.NoError(t, err)
		_, err = s.UpdateRun(ctx, done.ID, l.Epoch, belay.RunUpdate{Phase: belay.PhaseFailed, Error: &belay.RunError{Class: belay.ClassTimeout, Message: "m"}})
		require.NoError(t, err)
		queued, _, err := s.CreateRun(ctx, belay.RunInput{Session: sess.ID})
		require.NoError(t, err)
		if i == 1 {
			_, err = s.CancelQueuedRun(ctx, queued.ID, "no")
			require.NoError(t, err)
		}
		for k := 0; k < 3; k++ {
			_, _, err := s.PostDelivery(ctx, belay.DeliveryInput{Session: sess.ID, Type: "t", Key: string(rune('a' + k)), Priority: k})
			require.NoError(t, err)
		}
		ld, err := s.LeaseDeliveries(ctx, sess.ID, "agent", time.Minute, 2)
		require.NoError(t, err)
		_, err = s.SettleDelivery(ctx, ld[0].ID, belay.Settlement{Kind: belay.SettleRetry, Epoch: ld[0].Epoch, Delay: time.Hour})
		require.NoError(t, err)
		// A raw event much later than the last state change.
		clk.Advance(20 * 24 * time.Hour)
		_, err = s.Append(ctx, sess.ID, belay.Buffered, belay.Event{Type: "note"})
		require.NoError(t, err)
	}
	require.NoError(t, s.Close())
	fromIndex := openStore(t, dir, opts)
	require.Equal(t, IndexStats{FromIndex: 3}, fromIndex.Loaded().counts())
	want := capture(t, fromIndex)
	require.NoError(t, fromIndex.Close())

	require.NoError(t, RemoveIndex(dir))
	fromSnap := openStore(t, dir, opts)
	require.Equal(t, IndexStats{Opened: 3}, fromSnap.Loaded().counts())
	require.Equal(t, want, capture(t, fromSnap))
	require.NoError(t, fromSnap.Close())

	dropFolds(t, dir)
	fromJournal := openStore(t, dir, opts)
	require.Equal(t, want, capture(t, fromJournal))
	// Raw events count as activity in every fold.
	for _, sess := range want.Sessions {
		require.True(t, sess.UpdatedAt.After(storetest.Start.Add(19*24*time.Hour)), "%s updated at %s", sess.ID, sess.UpdatedAt)
	}
}

func TestFoldErrorQuarantines(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openStore(t, dir, Options{})
	sess := newSession(t, s)
	require.NoError(t, s.Close())
	// Something else wrote a store event that does not fit the state.
	j, err := journal.Open(filepath.Join(dir, SessionsName, sess.ID), journal.Options{})
	require.NoError(t, err)
	_, err = j.Append(context.Background(), journal.Sync, belay.Event{Type: belay.EventRunLeased, Run: "run_00000000000000000000000000", Epoch: 1, Data: json.RawMessage(`{}`)})
	require.NoError(t, err)
	require.NoError(t, j.Close())

	s = openStore(t, dir, Options{})
	got, err := s.Session(context.Background(), sess.ID)
	require.NoError(t, err)
	require.Equal(t, belay.SessionQuarantined, got.State)
	require.Contains(t, got.Problem, "unknown run")
	_, err = s.Append(context.Background(), sess.ID, belay.Sync, belay.Event{Type: "note"})
	require.ErrorIs(t, err, belay.ErrReadOnly)
	_, _, err = s.CreateRun(context.Background(), belay.RunInput{Session: sess.ID})
	require.ErrorIs(t, err, belay.ErrReadOnly)
}

// commitFaults are the sync modes the fault tests run in, each with the
// file whose sync makes a session's commit durable: the commit log's
// segment (SyncLog, shared by every session committing at that moment)
// or the session's own journal (SyncFile).
var commitFaults = []struct {
	mode string
	// synced reports whether a sync of name makes session's commits durable.
	synced func(name, session string) bool
}{
	{SyncLog, func(name, _ string) bool {
		return strings.Contains(name, string(filepath.Separator)+LogName+string(filepath.Separator))
	}},
	{SyncFile, func(name, session string) bool {
		return strings.Contains(name, session) && strings.HasSuffix(name, journal.FileName)
	}},
}

// TestFailedJournalDoesNotBlockOthers fails one session's commit and
// checks that the others keep leasing and expiring deliveries. With the
// commit log the sync is shared, so the fault is the session's write.
func TestFailedJournalDoesNotBlockOthers(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{SyncLog, SyncFile} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ffs := vfstest.New(nil)
			clk := clock.NewFake(storetest.Start)
			s := openStore(t, t.TempDir(), Options{FS: ffs, Clock: clk, Sync: mode})
			ctx := context.Background()
			bad, good := newSession(t, s), newSession(t, s)
			for _, id := range []string{bad.ID, good.ID} {
				_, _, err := s.PostDelivery(ctx, belay.DeliveryInput{Session: id, Type: "t", Priority: 1})
				require.NoError(t, err)
			}
			_, err := s.LeaseDeliveries(ctx, good.ID, "agent", time.Minute, 1)
			require.NoError(t, err)
			op := "fdatasync"
			if mode == SyncLog {
				op = "write"
				ffs.Set(vfstest.Faults{Write: func(name string, p []byte) (int, error) {
					if strings.Contains(name, bad.ID) {
						return 0, syscall.EIO
					}
					return len(p), nil
				}})
			} else {
				ffs.Set(vfstest.Faults{Sync: func(name string) error {
					if strings.Contains(name, bad.ID) {
						return syscall.EIO
					}
					return nil
				}})
			}
			_, err = s.Append(ctx, bad.ID, belay.Sync, belay.Event{Type: "note"})
			require.ErrorIs(t, err, belay.ErrReadOnly)

			got, err := s.Session(ctx, bad.ID)
			require.NoError(t, err)
			require.Equal(t, belay.SessionIdle, got.State, "a failed write is not damage")
			require.Contains(t, got.Problem, op)

			clk.Advance(time.Minute)
			expired, _, err := s.ExpireDeliveryLeases(ctx)
			require.NoError(t, err)
			require.Len(t, expired, 1)
			require.Equal(t, good.ID, expired[0].Session)
			leased, err := s.LeaseDeliveries(ctx, "", "agent", time.Minute, 5)
			require.NoError(t, err)
			require.Len(t, leased, 1)
			require.Equal(t, good.ID, leased[0].Session)
		})
	}
}

func TestPruneRenameFailureKeepsSession(t *testing.T) {
	t.Parallel()
	ffs := vfstest.New(nil)
	s := openStore(t, t.TempDir(), Options{FS: ffs})
	ctx := context.Background()
	sess := newSession(t, s)
	ffs.Set(vfstest.Faults{Rename: func(_, newpath string) error {
		if strings.Contains(newpath, ".trash-") {
			return syscall.EXDEV
		}
		return nil
	}})
	_, err := s.Prune(ctx, storePolicyNow())
	require.Error(t, err)
	got, err := s.Session(ctx, sess.ID)
	require.NoError(t, err)
	require.Equal(t, belay.SessionIdle, got.State)
	_, err = s.Append(ctx, sess.ID, belay.Sync, belay.Event{Type: "note"})
	require.NoError(t, err, "the session still works")
	ffs.Set(vfstest.Faults{})
	rep, err := s.Prune(ctx, storePolicyNow())
	require.NoError(t, err)
	require.Len(t, rep.Pruned, 1)
	_, err = s.Append(ctx, sess.ID, belay.Sync, belay.Event{Type: "note"})
	require.ErrorIs(t, err, belay.ErrNotFound)
}

// TestDiskFullHeals: writes fail while the disk is full, with an error that
// says so and names the free space; nothing half-written stays behind;
// once space is free the same session accepts writes again at once,
// without reopening the store.
func TestDiskFullHeals(t *testing.T) {
	t.Parallel()
	type fault struct {
		name   string
		mode   string
		faults vfstest.Faults
	}
	var faults []fault
	for _, c := range commitFaults {
		faults = append(faults,
			fault{"ENOSPC on write", c.mode, vfstest.Faults{Write: func(name string, p []byte) (int, error) {
				if strings.HasSuffix(name, "journal.jsonl") {
					return len(p) / 2, syscall.ENOSPC
				}
				return len(p), nil
			}}},
			fault{"ENOSPC on fdatasync", c.mode, vfstest.Faults{Sync: func(name string) error {
				if c.synced(name, "") {
					return syscall.ENOSPC
				}
				return nil
			}}},
			fault{"EDQUOT on write", c.mode, vfstest.Faults{Write: func(name string, p []byte) (int, error) {
				return 0, syscall.EDQUOT
			}}},
		)
	}
	for _, fault := range faults {
		t.Run(fault.mode+"/"+fault.name, func(t *testing.T) {
			t.Parallel()
			ffs := vfstest.New(nil)
			s := openStore(t, t.TempDir(), Options{FS: ffs, Sync: fault.mode})
			ctx := context.Background()
			sess := newSession(t, s)
			_, err := s.Append(ctx, sess.ID, belay.Sync, belay.Event{Type: "kept"})
			require.NoError(t, err)

			ffs.Set(fault.faults)
			_, err = s.Append(ctx, sess.ID, belay.Sync, belay.Event{Type: "refused"})
			require.ErrorIs(t, err, belay.ErrDiskFull)
			require.Contains(t, err.Error(), "bytes free")
			_, _, err = s.CreateRun(ctx, belay.RunInput{Session: sess.ID})
			require.ErrorIs(t, err, belay.ErrDiskFull, "still full: the retry fails the same way")
			got, err := s.Session(ctx, sess.ID)
			require.NoError(t, err)
			require.Equal(t, belay.SessionIdle, got.State, "a full disk is not damage")
			info, err := s.JournalInfo(sess.ID)
			require.NoError(t, err)
			require.True(t, info.DiskFull)
			require.False(t, info.Quarantined)

			ffs.Set(vfstest.Faults{}) // space is free again
			_, err = s.Append(ctx, sess.ID, belay.Sync, belay.Event{Type: "after"})
			require.NoError(t, err, "the session heals without a restart")
			evs, err := s.Events(ctx, sess.ID, 0, 0)
			require.NoError(t, err)
			var types []string
			for i, e := range evs {
				require.Equal(t, uint64(i+1), e.Seq)
				types = append(types, e.Type)
			}
			require.NotContains(t, types, "refused", "a write reported as failed never comes back")
			require.Equal(t, "after", types[len(types)-1])
			runs, err := s.Runs(ctx, belay.RunFilter{Session: sess.ID})
			require.NoError(t, err)
			require.Empty(t, runs)
			info, err = s.JournalInfo(sess.ID)
			require.NoError(t, err)
			require.False(t, info.DiskFull)

			// And after a restart, the same.
			require.NoError(t, s.Close())
			s2 := openStore(t, s.Dir(), Options{})
			evs2, err := s2.Events(ctx, sess.ID, 0, 0)
			require.NoError(t, err)
			require.Equal(t, len(evs), len(evs2))
		})
	}
}

// TestCreateSessionOnFullDiskCreatesNothing: a session whose creation
// fails on a full disk leaves no session behind.
func TestCreateSessionOnFullDiskCreatesNothing(t *testing.T) {
	t.Parallel()
	ffs := vfstest.New(nil)
	s := openStore(t, t.TempDir(), Options{FS: ffs})
	ctx := context.Background()
	ffs.Set(vfstest.Faults{Write: func(string, []byte) (int, error) { return 0, syscall.ENOSPC }})
	_, err := s.CreateSession(ctx, belay.SessionInput{Provider: "fake"})
	require.ErrorIs(t, err, belay.ErrDiskFull)
	all, err := s.Sessions(ctx, belay.SessionFilter{})
	require.NoError(t, err)
	require.Empty(t, all)
	ffs.Set(vfstest.Faults{})
	_, err = s.CreateSession(ctx, belay.SessionInput{Provider: "fake"})
	require.NoError(t, err)
}

// TestWaitEventsOutlivesAFullDisk: a watcher waiting on a session whose
// write failed on a full disk keeps waiting, and sees the next event once
// space is free, rather than ending with the write's error.
func TestWaitEventsOutlivesAFullDisk(t *testing.T) {
	t.Parallel()
	ffs := vfstest.New(nil)
	s := openStore(t, t.TempDir(), Options{FS: ffs})
	ctx := context.Background()
	sess := newSession(t, s)
	last := sess.LastSeq
	waited := make(chan error, 1)
	go func() { waited <- s.WaitEvents(ctx, sess.ID, last) }()

	ffs.Set(vfstest.Faults{Write: func(string, []byte) (int, error) { return 0, syscall.ENOSPC }})
	_, err := s.Append(ctx, sess.ID, belay.Sync, belay.Event{Type: "refused"})
	require.ErrorIs(t, err, belay.ErrDiskFull)
	select {
	case err := <-waited:
		t.Fatalf("the wait ended on a full disk: %v", err)
	default:
	}
	ffs.Set(vfstest.Faults{})
	_, err = s.Append(ctx, sess.ID, belay.Sync, belay.Event{Type: "after"})
	require.NoError(t, err)
	select {
	case err := <-waited:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("the wait did not see the event written once space was free")
	}
}

// TestDeleteOfAnUnopenableJournal: a session whose journal the store
// cannot open (its mode changed under the daemon) is not deleted, the
// error says why and what to do, and the store goes on taking writes; the
// same delete works once the file can be opened.
func TestDeleteOfAnUnopenableJournal(t *testing.T) {
	t.Parallel()
	ffs := vfstest.New(nil)
	dir := t.TempDir()
	s := openStore(t, dir, Options{FS: ffs})
	ctx := context.Background()
	sess := newSession(t, s)
	other := newSession(t, s)
	ffs.Set(vfstest.Faults{Open: func(name string, _ int) error {
		if name == journalPath(dir, sess.ID) {
			return syscall.EACCES
		}
		return nil
	}})
	err := s.DeleteSession(ctx, sess.ID, true)
	require.ErrorIs(t, err, fs.ErrPermission)
	require.Contains(t, err.Error(), "was not deleted")
	require.Contains(t, err.Error(), "chmod 600")
	_, err = s.Append(ctx, other.ID, belay.Sync, belay.Event{Type: "note"})
	require.NoError(t, err, "the store goes on")
	ffs.Set(vfstest.Faults{})
	_, err = s.Session(ctx, sess.ID)
	require.NoError(t, err, "nothing was deleted")
	require.NoError(t, s.DeleteSession(ctx, sess.ID, true))
	_, err = s.Session(ctx, sess.ID)
	require.ErrorIs(t, err, belay.ErrNotFound)
}
