package journal

import (
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
