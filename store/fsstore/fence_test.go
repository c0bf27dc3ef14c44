package fsstore

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/lock"
)

// TestStoreFencesItselfBeforeWriting: another host (one that does not share
// kernel locks) took the data directory over while this process slept.
// Before its heartbeat notices, the next write proves ownership, fails, and
// nothing reaches the journal; the store is read-only for good and says why.
func TestStoreFencesItselfBeforeWriting(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var elapsed atomic.Int64
	lost := make(chan error, 1)
	s := openStore(t, dir, Options{
		LockTTL:     time.Hour, // no background heartbeat during the test
		LockElapsed: func() time.Duration { return time.Duration(elapsed.Load()) },
		OnLockLost:  func(err error) { lost <- err },
	})
	ctx := context.Background()
	sess := newSession(t, s)
	_, err := s.Append(ctx, sess.ID, belay.Sync, belay.Event{Type: "note"})
	require.NoError(t, err)
	jpath := journalPath(dir, sess.ID)
	before, err := os.ReadFile(jpath)
	require.NoError(t, err)

	lockPath := filepath.Join(dir, LockName)
	now := time.Now()
	other := lock.Owner{Host: "elsewhere.example", PID: 777, Nonce: "0123456789abcdef0123456789abcdef",
		AcquiredAt: now, HeartbeatAt: now, ExpiresAt: now.Add(time.Hour)}
	data, err := other.Encode()
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(lockPath, data, 0o644)) // in place: same inode

	elapsed.Add(int64(46 * time.Minute)) // past TTL - TTL/4 since the last proof
	_, err = s.Append(ctx, sess.ID, belay.Sync, belay.Event{Type: "late"})
	require.ErrorIs(t, err, belay.ErrReadOnly)
	require.ErrorIs(t, err, lock.ErrFenced)
	select {
	case err := <-lost:
		require.ErrorIs(t, err, lock.ErrFenced)
	default:
		t.Fatal("OnLockLost was not told")
	}
	_, err = s.CreateSession(ctx, belay.SessionInput{Provider: "fake"})
	require.ErrorIs(t, err, belay.ErrReadOnly)
	after, err := os.ReadFile(jpath)
	require.NoError(t, err)
	require.Equal(t, before, after, "a fenced store wrote nothing")

	require.NoError(t, s.Close())
	got, err := os.ReadFile(lockPath)
	require.NoError(t, err)
	require.Equal(t, data, got, "the other holder's record is left alone")
	require.NoFileExists(t, filepath.Join(dir, IndexName), "nor does it write the store index")
}
