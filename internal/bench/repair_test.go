package bench

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRepairBenchRuns runs the repair benchmark at toy sizes: it checks the
// measurement end to end, not any speed.
func TestRepairBenchRuns(t *testing.T) {
	t.Parallel()
	res, err := Repair(context.Background(), RepairConfig{Dir: t.TempDir(), Size: 1 << 20, Messages: 300})
	require.NoError(t, err)
	require.Len(t, res.Files, 2)
	for _, f := range res.Files {
		require.Positive(t, f.Dropped)
		require.Positive(t, f.MBPerSec)
		require.Positive(t, f.PeakHeapBytes)
	}
	require.Len(t, res.Pairing, 2)
	require.Equal(t, 3000, res.Pairing[1].Messages)
	require.Positive(t, res.Pairing[1].Changes)
	require.Positive(t, res.PairingScale)
}
