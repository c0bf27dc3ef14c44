package journal

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

var errNotOwner = errors.New("test: not the owner")

// TestFenceStopsEveryWrite: once the fence refuses, no byte reaches the
// journal or its snapshot, the journal turns read-only with an error that
// names the cause, and what was acknowledged before is intact.
func TestFenceStopsEveryWrite(t *testing.T) {
	t.Parallel()
	var fenced atomic.Bool
	fence := func() error {
		if fenced.Load() {
			return errNotOwner
		}
		return nil
	}
	b := setup(t, Options{Fence: fence})
	appendN(t, b.j, 3)
	require.NoError(t, b.j.WriteSnapshot([]byte(`{}`), 3))
	path := filepath.Join(b.dir, FileName)
	before, err := os.ReadFile(path)
	require.NoError(t, err)
	snapBefore, err := os.ReadFile(filepath.Join(b.dir, SnapshotName))
	require.NoError(t, err)

	fenced.Store(true)
	_, err = b.j.Append(context.Background(), Sync, ev("late", `1`))
	require.ErrorIs(t, err, ErrReadOnly)
	require.ErrorIs(t, err, errNotOwner)
	_, err = b.j.Append(context.Background(), Buffered, ev("later", `1`))
	require.ErrorIs(t, err, errNotOwner, "read-only for good")
	require.ErrorIs(t, b.j.WriteSnapshot([]byte(`{"x":1}`), 3), ErrReadOnly)

	after, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, before, after, "a fenced writer wrote nothing")
	snapAfter, err := os.ReadFile(filepath.Join(b.dir, SnapshotName))
	require.NoError(t, err)
	require.Equal(t, snapBefore, snapAfter)
	requireGapFree(t, readAll(t, b.j), 3)

	fenced.Store(false)
	j, err := reopen(t, b, Options{Fence: fence})
	require.NoError(t, err)
	requireGapFree(t, readAll(t, j), 3)
}

// TestQuarantineFoundByReadSurvivesRestart: Open trusted the snapshot and
// skipped the damaged range; a later read finds the damage. The quarantine
// is recorded and the next Open (which again skips the range) still
// reports it. A repaired journal (another size) makes the record stale.
func TestQuarantineFoundByReadSurvivesRestart(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{})
	appendN(t, b.j, 10)
	require.NoError(t, b.j.WriteSnapshot([]byte(`{}`), 10))
	require.NoError(t, b.j.Close())
	good := journalBytes(t, b.dir)
	offs := lineOffsets(good)
	bad := bytes.Clone(good)
	bad[offs[4]+30] ^= 0x10 // inside seq 5, covered by the snapshot
	writeJournal(t, b.dir, bad)

	j, err := Open(b.dir, Options{})
	require.NoError(t, err, "the snapshot is trusted: the damage is not seen at open")
	require.Equal(t, "trusted", j.Recovery().Snapshot)
	_, err = j.Read(0, 0)
	var q *QuarantineError
	require.ErrorAs(t, err, &q)
	require.EqualValues(t, 4, q.LastSeq)
	require.NoError(t, j.Close())
	require.FileExists(t, filepath.Join(b.dir, QuarantineName))

	j, err = Open(b.dir, Options{})
	require.ErrorAs(t, err, &q, "still quarantined after a restart")
	require.EqualValues(t, 4, q.LastSeq)
	require.Equal(t, int64(offs[4]), q.Offset)
	_, err = j.Append(context.Background(), Sync, ev("x", `1`))
	require.ErrorIs(t, err, ErrQuarantined)
	evs, rerr := j.Read(0, 0)
	require.ErrorIs(t, rerr, ErrQuarantined)
	requireGapFree(t, evs, 4)
	require.NoError(t, j.Close())
	require.Equal(t, bad, journalBytes(t, b.dir), "never rewritten")

	// A repair rewrites the journal: the record no longer applies.
	writeJournal(t, b.dir, good[:offs[4]])
	require.NoError(t, os.Remove(filepath.Join(b.dir, SnapshotName)))
	j, err = Open(b.dir, Options{})
	require.NoError(t, err)
	defer j.Close()
	requireGapFree(t, readAll(t, j), 4)
	require.NoFileExists(t, filepath.Join(b.dir, QuarantineName))
}

// TestCommitterStartsWithTheFirstAppend: a journal opened and read (as a
// store opens every session at start) starts no committer and closes
// without one; the first append starts it, and what it appended, synced
// or buffered, is durable after Close.
func TestCommitterStartsWithTheFirstAppend(t *testing.T) {
	dir := t.TempDir()
	j, err := Open(dir, Options{})
	require.NoError(t, err)
	_, err = j.Append(context.Background(), Sync, Event{Type: "first"})
	require.NoError(t, err)
	require.NoError(t, j.Close())

	j, err = Open(dir, Options{})
	require.NoError(t, err)
	evs, err := j.Read(0, 10)
	require.NoError(t, err)
	require.Len(t, evs, 1)
	j.mu.Lock()
	started := j.committing
	j.mu.Unlock()
	require.False(t, started, "reading started a committer")
	require.NoError(t, j.Close())

	j, err = Open(dir, Options{})
	require.NoError(t, err)
	_, err = j.Append(context.Background(), Buffered, Event{Type: "second"})
	require.NoError(t, err)
	j.mu.Lock()
	started = j.committing
	j.mu.Unlock()
	require.True(t, started)
	require.NoError(t, j.Close())

	j, err = Open(dir, Options{})
	require.NoError(t, err)
	defer j.Close()
	evs, err = j.Read(0, 10)
	require.NoError(t, err)
	require.Len(t, evs, 2, "the buffered append was committed by Close")
	_, err = j.Append(context.Background(), Sync, Event{Type: "after"})
	require.NoError(t, err)
	require.NoError(t, j.Close())
	_, err = j.Append(context.Background(), Sync, Event{Type: "closed"})
	require.ErrorIs(t, err, ErrClosed)
}
