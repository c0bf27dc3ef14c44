package bench

import (
	"context"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/testpg"
)

// TestRunsBenchOnPostgres runs the runs benchmark through pgstore at toy
// sizes: every run completes, and the measurement is reported (with the
// database's CPU time when the bench is given a way to read it).
func TestRunsBenchOnPostgres(t *testing.T) {
	pg := testpg.Start(t, testpg.Options{})
	url := pg.Database(t)
	cfg := RunsConfig{Dir: t.TempDir(), Store: url, Runs: 300, Sessions: 30, Submitters: 4, IdleSessions: 300}
	if runtime.GOOS == "linux" {
		cfg.DatabaseCPU = pg.CPU // the peer bench's
	}
	res, err := Runs(context.Background(), cfg)
	require.NoError(t, err)
	if cfg.DatabaseCPU != nil {
		require.Positive(t, res.DatabaseCPUMicrosPerRun, "300 runs take the server some CPU")
	}
	require.Positive(t, res.RunsPerSec)
	require.LessOrEqual(t, res.P50Millis, res.P99Millis)
	require.Greater(t, res.SyncsPerRun, 3.0)
	require.Zero(t, res.IdleSessions, "the idle-memory part measures the file store only")
	require.Equal(t, 1, res.Nodes)
	require.Contains(t, res.Store, "postgres://")
}

// TestRunsBenchNodesAndBatch: --nodes runs several runtimes over one
// database and --batch submits through SubmitBatch; every run completes
// either way, once.
func TestRunsBenchNodesAndBatch(t *testing.T) {
	pg := testpg.Start(t, testpg.Options{})
	for _, c := range []struct{ nodes, batch int }{{2, 0}, {1, 25}, {3, 40}} {
		res, err := Runs(context.Background(), RunsConfig{Dir: t.TempDir(), Store: pg.Database(t), Runs: 200, Sessions: 40, Submitters: 4, Nodes: c.nodes, Batch: c.batch})
		require.NoError(t, err)
		require.Equal(t, c.nodes, res.Nodes)
		require.Equal(t, c.batch, res.Batch)
		require.Positive(t, res.RunsPerSec)
		require.Greater(t, res.SyncsPerRun, 3.0)
	}
	_, err := Runs(context.Background(), RunsConfig{Dir: t.TempDir(), Runs: 10, Nodes: 2})
	require.ErrorIs(t, err, belay.ErrInvalid, "several nodes need PostgreSQL")
}
