package bench

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay/internal/testpg"
)

// TestRunsBenchOnPostgres runs the runs benchmark through pgstore at toy
// sizes: every run completes, and the measurement is reported.
func TestRunsBenchOnPostgres(t *testing.T) {
	pg := testpg.Start(t, testpg.Options{})
	url := pg.Database(t)
	res, err := Runs(context.Background(), RunsConfig{Dir: t.TempDir(), Store: url, Runs: 300, Sessions: 30, Submitters: 4, IdleSessions: 300})
	require.NoError(t, err)
	require.Positive(t, res.RunsPerSec)
	require.LessOrEqual(t, res.P50Millis, res.P99Millis)
	require.Greater(t, res.SyncsPerRun, 3.0)
	require.Zero(t, res.IdleSessions, "the idle-memory part measures the file store only")
	require.Equal(t, 1, res.Nodes)
	require.Contains(t, res.Store, "postgres://")
}
