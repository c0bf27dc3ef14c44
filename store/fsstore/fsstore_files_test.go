package fsstore

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/ids"
	"github.com/belayhq/belay/journal"
	"github.com/belayhq/belay/lock"
	"github.com/belayhq/belay/store"
)

func openStore(t *testing.T, dir string, opts Options) *Store {
	t.Helper()
	s, err := Open(context.Background(), dir, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func newSession(t *testing.T, s *Store) belay.Session {
	t.Helper()
	sess, err := s.CreateSession(context.Background(), belay.SessionInput{Provider: "fake"})
	require.NoError(t, err)
	return sess
}

func journalPath(dir, id string) string {
	return filepath.Join(dir, SessionsName, id, journal.FileName)
}

func TestSecondOpenNamesTheHolder(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	openStore(t, dir, Options{Purpose: "daemon"})
	_, err := Open(context.Background(), dir, Options{})
	require.ErrorIs(t, err, belay.ErrStoreLocked)
	require.Contains(t, err.Error(), "pid ")
	require.Contains(t, err.Error(), "daemon")
}

func TestReadOnlyOpenChangesNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openStore(t, dir, Options{})
	sess := newSession(t, s)
	ctx := context.Background()
	_, err := s.Append(ctx, sess.ID, belay.Sync, belay.Event{Type: "note"})
	require.NoError(t, err)

	ro := openStore(t, dir, Options{ReadOnly: true})
	got, err := ro.Session(ctx, sess.ID)
	require.NoError(t, err)
	require.Equal(t, uint64(2), got.LastSeq)
	_, err = ro.CreateSession(ctx, belay.SessionInput{Provider: "fake"})
	require.ErrorIs(t, err, belay.ErrReadOnly)
	_, err = ro.Append(ctx, sess.ID, belay.Sync, belay.Event{Type: "note"})
	require.ErrorIs(t, err, belay.ErrReadOnly)
	_, _, err = ro.CreateRun(ctx, belay.RunInput{Session: sess.ID})
	require.ErrorIs(t, err, belay.ErrReadOnly)
	_, err = ro.Prune(ctx, storePolicyNow())
	require.ErrorIs(t, err, belay.ErrReadOnly)
	require.NoError(t, ro.Close())
	_, err = os.Stat(filepath.Join(dir, SessionsName, sess.ID, journal.SnapshotName))
	require.ErrorIs(t, err, os.ErrNotExist, "a read-only store writes no snapshot")
}

func TestQuarantinedSessionIsReadOnlyAndUntouched(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openStore(t, dir, Options{})
	ctx := context.Background()
	bad, good := newSession(t, s), newSession(t, s)
	for i := 0; i < 5; i++ {
		_, err := s.Append(ctx, bad.ID, belay.Sync, belay.Event{Type: "note"})
		require.NoError(t, err)
	}
	require.NoError(t, s.Close())

	path := journalPath(dir, bad.ID)
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	raw[bytes.IndexByte(raw, '\n')+40] ^= 0x20 // damage line 2
	require.NoError(t, os.WriteFile(path, raw, 0o600))

	s = openStore(t, dir, Options{})
	got, err := s.Session(ctx, bad.ID)
	require.NoError(t, err)
	require.Equal(t, belay.SessionQuarantined, got.State)
	require.Contains(t, got.Problem, "quarantined")
	require.Equal(t, "fake", got.Provider, "what precedes the damage is still read")
	evs, err := s.Events(ctx, bad.ID, 0, 0)
	require.ErrorIs(t, err, belay.ErrReadOnly)
	require.Len(t, evs, 1)
	_, err = s.Append(ctx, bad.ID, belay.Sync, belay.Event{Type: "note"})
	require.ErrorIs(t, err, belay.ErrReadOnly)
	_, _, err = s.CreateRun(ctx, belay.RunInput{Session: bad.ID})
	require.ErrorIs(t, err, belay.ErrReadOnly)
	_, _, err = s.PostDelivery(ctx, belay.DeliveryInput{Session: bad.ID, Type: "t"})
	require.ErrorIs(t, err, belay.ErrReadOnly)
	// The other session is unaffected.
	_, err = s.Append(ctx, good.ID, belay.Sync, belay.Event{Type: "note"})
	require.NoError(t, err)
	rep, err := s.Prune(ctx, storePolicyNow())
	require.NoError(t, err)
	require.Equal(t, []string{good.ID}, prunedOf(rep), "a quarantined session is never pruned")
	require.NoError(t, s.Close())
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, raw, after, "a damaged journal is never rewritten")
}

func TestTornTailIsRepairedOnOpen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openStore(t, dir, Options{})
	ctx := context.Background()
	sess := newSession(t, s)
	require.NoError(t, s.Close())
	f, err := os.OpenFile(journalPath(dir, sess.ID), os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString(`{"seq":2,"ts":"2026-`)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	s = openStore(t, dir, Options{})
	got, err := s.Session(ctx, sess.ID)
	require.NoError(t, err)
	require.Equal(t, belay.SessionIdle, got.State)
	seqs, err := s.Append(ctx, sess.ID, belay.Sync, belay.Event{Type: "note"})
	require.NoError(t, err)
	require.Equal(t, []uint64{2}, seqs)
	broken, _ := filepath.Glob(journalPath(dir, sess.ID) + ".broken-*")
	require.Len(t, broken, 1)
}

func TestInterruptedCreateAndPruneAreCleaned(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openStore(t, dir, Options{})
	sess := newSession(t, s)
	require.NoError(t, s.Close())
	root := filepath.Join(dir, SessionsName)
	for _, name := range []string{".new-" + ids.New(ids.Session), ".trash-" + ids.New(ids.Session) + "-1"} {
		require.NoError(t, os.MkdirAll(filepath.Join(root, name), 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(root, name, journal.FileName), []byte("x"), 0o600))
	}
	require.NoError(t, os.MkdirAll(filepath.Join(root, "not-a-session"), 0o700))

	s = openStore(t, dir, Options{})
	list, err := s.Sessions(context.Background(), belay.SessionFilter{})
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, sess.ID, list[0].ID)
	entries, err := os.ReadDir(root)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	require.ElementsMatch(t, []string{sess.ID, "not-a-session"}, names, "foreign entries are left alone")
}

func TestSnapshotIsUsedOnReopen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openStore(t, dir, Options{SnapshotEvery: 10})
	ctx := context.Background()
	sess := newSession(t, s)
	for i := 0; i < 25; i++ {
		_, _, err := s.PostDelivery(ctx, belay.DeliveryInput{Session: sess.ID, Type: "t"})
		require.NoError(t, err)
	}
	require.NoError(t, s.Close())
	s = openStore(t, dir, Options{})
	ss, err := s.session(sess.ID)
	require.NoError(t, err)
	j, err := ss.acquire()
	require.NoError(t, err)
	require.Equal(t, "trusted", j.Recovery().Snapshot)
	ss.release(j)
	ds, err := s.Deliveries(ctx, belay.DeliveryFilter{Session: sess.ID})
	require.NoError(t, err)
	require.Len(t, ds, 25)
}

func TestLostLockMakesStoreReadOnly(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	lost := make(chan error, 1)
	s := openStore(t, dir, Options{LockTTL: 300 * time.Millisecond, OnLockLost: func(err error) { lost <- err }})
	// Another process judged us dead and took the lock.
	lockPath := filepath.Join(dir, LockName)
	require.NoError(t, os.Remove(lockPath))
	other := lock.New(lockPath, lock.Options{TTL: time.Minute})
	require.NoError(t, other.TryAcquire(context.Background()))
	defer other.Release()
	select {
	case err := <-lost:
		require.ErrorIs(t, err, belay.ErrReadOnly)
	case <-time.After(30 * time.Second):
		t.Fatal("lock loss was not reported")
	}
	_, err := s.CreateSession(context.Background(), belay.SessionInput{Provider: "fake"})
	require.ErrorIs(t, err, belay.ErrReadOnly)
	require.NoError(t, s.Close())
	st, err := lock.Inspect(lockPath, lock.Options{})
	require.NoError(t, err)
	require.False(t, st.Stale, "closing a store that lost its lock leaves the new holder's lock alone")
}

func storePolicyNow() store.PrunePolicy {
	return store.PrunePolicy{KeepComplete: time.Nanosecond, KeepFailed: time.Nanosecond, Grace: time.Nanosecond}
}

func prunedOf(r belay.PruneReport) []string {
	var out []string
	for _, p := range r.Pruned {
		out = append(out, p.ID)
	}
	return out
}

func TestUnreadableSessionDoesNotBlockTheOthers(t *testing.T) {
	t.Parallel()
	// A journal that is a directory cannot be opened as a file, even by root.
	// Of 40 sessions (loaded in parallel at open), every seventh is damaged.
	dir := t.TempDir()
	s := openStore(t, dir, Options{})
	var all []belay.Session
	for range 40 {
		all = append(all, newSession(t, s))
	}
	require.NoError(t, s.Close())
	bad := map[string]bool{}
	for i := 0; i < len(all); i += 7 {
		path := journalPath(dir, all[i].ID)
		require.NoError(t, os.Remove(path))
		require.NoError(t, os.Mkdir(path, 0o700))
		bad[all[i].ID] = true
	}

	s = openStore(t, dir, Options{})
	ctx := context.Background()
	listed, err := s.Sessions(ctx, belay.SessionFilter{Limit: 100})
	require.NoError(t, err)
	require.Len(t, listed, len(all))
	for _, sess := range all {
		got, err := s.Session(ctx, sess.ID)
		require.NoError(t, err)
		_, err = s.Append(ctx, sess.ID, belay.Sync, belay.Event{Type: "note"})
		if !bad[sess.ID] {
			require.NoError(t, err, "the other sessions work")
			continue
		}
		require.Equal(t, belay.SessionQuarantined, got.State)
		require.NotEmpty(t, got.Problem)
		require.ErrorIs(t, err, belay.ErrReadOnly)
		fi, err := os.Stat(journalPath(dir, sess.ID))
		require.NoError(t, err)
		require.True(t, fi.IsDir(), "nothing was changed")
	}
}
