package bench

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestJournalBenchRuns runs the benchmark at toy sizes: it checks that the
// measurement works end to end, not any speed.
func TestJournalBenchRuns(t *testing.T) {
	t.Parallel()
	res, err := Journal(context.Background(), JournalConfig{
		Dir:       t.TempDir(),
		Scenarios: []Scenario{{Writers: 4, Sessions: 2}},
		Duration:  100 * time.Millisecond,
		OpenSize:  2 << 20,
	})
	require.NoError(t, err)
	require.Len(t, res.Scenarios, 1)
	sc := res.Scenarios[0]
	require.Positive(t, sc.SyncEventsPerSec)
	require.Positive(t, sc.RawEventsPerSec)
	require.Positive(t, sc.RatioVsRaw)
	require.Positive(t, sc.BufferedEventsPerSec)
	require.GreaterOrEqual(t, sc.EventsPerCommit, 1.0)
	require.LessOrEqual(t, sc.SyncP50Micros, sc.SyncP99Micros)
	require.Len(t, res.Open.Sizes, 2)
	for _, o := range res.Open.Sizes {
		require.Positive(t, o.Events)
		require.GreaterOrEqual(t, o.Bytes, int64(200<<10))
	}
}
