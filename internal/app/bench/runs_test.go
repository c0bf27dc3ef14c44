package bench

import (
	"context"
	"runtime"
	"testing"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/gotune"
	"github.com/stretchr/testify/require"
)

// TestRunsBenchRuns runs the runs benchmark at toy sizes: it checks the
// measurement end to end, not any speed.
func TestRunsBenchRuns(t *testing.T) {
	t.Parallel()
	res, err := Runs(context.Background(), RunsConfig{Dir: t.TempDir(), Runs: 300, Sessions: 30, Submitters: 4, IdleSessions: 300, InFlight: 30})
	require.NoError(t, err)
	require.Positive(t, res.RunsPerSec)
	require.Positive(t, res.FsyncPerSec, "the raw baseline is measured in the same run")
	require.Positive(t, res.ParallelFsyncPerSec)
	require.InDelta(t, res.RunsPerSec/res.FsyncPerSec, res.RunsPerFsync, 1e-9)
	require.Positive(t, res.P50Millis)
	require.LessOrEqual(t, res.P50Millis, res.P99Millis)
	require.Greater(t, res.SyncsPerRun, 3.0)
	require.Positive(t, res.SchedWaitP99Millis, "goroutines waited for a P at some point in 300 runs")
	require.Equal(t, runtime.GOMAXPROCS(0), res.GOMAXPROCS)
	require.Equal(t, runtime.NumCPU(), res.CPUs)
	require.Equal(t, gotune.Current().GCPercent, res.GOGC)
	require.Equal(t, 300, res.IdleSessions)
	require.Positive(t, res.IdleLoadSeconds)
	require.Equal(t, 300, res.IdleIndexed, "a restart after a clean stop opens no journal")
	require.Equal(t, 30, res.IdleKillOpened, "after a kill, the changed sessions are opened")
	require.Positive(t, res.IdleColdLoadSeconds)
}

// TestRunsBenchRefusesUnknownStores: a store setting that is neither
// file: nor a PostgreSQL URL is refused before any work, with the accepted
// forms, as the daemon refuses it.
func TestRunsBenchRefusesUnknownStores(t *testing.T) {
	t.Parallel()
	for _, url := range []string{"mysql://u@h/db", "file:/elsewhere", "sessions"} {
		_, err := Runs(context.Background(), RunsConfig{Dir: t.TempDir(), Runs: 1, Sessions: 1, Submitters: 1, Store: url})
		require.ErrorIs(t, err, belay.ErrInvalid, url)
		require.Contains(t, err.Error(), url)
	}
}
