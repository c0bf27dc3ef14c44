package fsstore

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/clock"
	"github.com/belayhq/belay/store"
	"github.com/belayhq/belay/store/storetest"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		crashChild(dir)
		return
	}
	if dir := os.Getenv(bufferedCrashChildEnv); dir != "" {
		bufferedCrashChild(dir)
		return
	}
	goleak.VerifyTestMain(m)
}

func harness(sync string) storetest.Harness {
	return storetest.Harness{
		New: func(t *testing.T, clk *clock.Fake) store.Store {
			s, err := Open(context.Background(), t.TempDir(), Options{Clock: clk, SnapshotEvery: 3, Sync: sync})
			require.NoError(t, err)
			return s
		},
		Reopen: func(t *testing.T, s store.Store) store.Store {
			fs := s.(*Store)
			require.NoError(t, fs.Close())
			s2, err := Open(context.Background(), fs.dir, fs.opts)
			require.NoError(t, err)
			return s2
		},
	}
}

// TestConformance runs the suite with the default: commits made durable
// in the store's commit log.
func TestConformance(t *testing.T) { storetest.Run(t, harness("")) }

// TestConformanceFileSync runs the suite with one fdatasync per journal
// commit.
func TestConformanceFileSync(t *testing.T) { storetest.Run(t, harness(SyncFile)) }

// TestConformanceSharedSync runs the suite with commits made durable by
// shared filesystem syncs.
func TestConformanceSharedSync(t *testing.T) { storetest.Run(t, harness(SyncFilesystem)) }

func TestBadSyncMode(t *testing.T) {
	_, err := Open(context.Background(), t.TempDir(), Options{Sync: "sometimes"})
	require.ErrorIs(t, err, belay.ErrInvalid)
}

// TestPeers runs the peer suite on one store shared by runtime instances
// in one process: fsstore serves one process per data directory (a second
// process is refused by its lock, see TestSecondOpenNamesTheHolder).
func TestPeers(t *testing.T) {
	storetest.RunPeers(t, storetest.PeerHarness{New: func(t *testing.T, clk *clock.Fake, n int) []store.Store {
		s, err := Open(context.Background(), t.TempDir(), Options{Clock: clk})
		require.NoError(t, err)
		out := make([]store.Store, n)
		for i := range out {
			out[i] = s
		}
		return out
	}})
}
