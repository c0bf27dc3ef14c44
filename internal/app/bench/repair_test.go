package bench

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay/transcript"
)

// TestRepairBenchRuns runs the repair benchmark at toy sizes: it checks the
// measurement end to end (every damage found, every mode run), not any
// speed.
func TestRepairBenchRuns(t *testing.T) {
	t.Parallel()
	res, err := Repair(context.Background(), RepairConfig{Dir: t.TempDir(), Size: 4 << 20, Messages: 300})
	require.NoError(t, err)
	require.Len(t, res.Formats, 2)
	for _, rf := range res.Formats {
		require.Len(t, rf.Files, 2)
		for _, f := range rf.Files {
			require.Positive(t, f.Torn)
			require.Positive(t, f.Lost)
			require.Positive(t, f.Orphan, rf.Format)
			require.False(t, f.LinesOnly.MessageLevel)
			require.Equal(t, f.Torn, f.LinesOnly.Changes)
			require.True(t, f.Default.MessageLevel)
			require.Equal(t, f.Default.Changes, f.Check.Changes)
			require.Equal(t, f.Torn, f.Default.Kinds[transcript.ChangeDropLine])
			require.GreaterOrEqual(t, f.Default.Kinds[transcript.ChangeRelink], f.Lost)
			require.GreaterOrEqual(t, f.Default.Kinds[transcript.ChangeDropOrphan], f.Orphan, rf.Format)
			for _, r := range []RepairRun{f.LinesOnly, f.Check, f.Default} {
				require.Positive(t, r.MBPerSec)
				require.Positive(t, r.PeakHeapBytes)
			}
		}
		require.Positive(t, rf.Scale)
	}
	require.Len(t, res.Pairing, 2)
	require.Equal(t, 3000, res.Pairing[1].Messages)
	require.Positive(t, res.Pairing[1].Changes)
	require.Positive(t, res.PairingScale)
}
