package bench

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestListBench runs the listing benchmark at a toy size: it checks the
// measurement end to end, not any speed.
func TestListBench(t *testing.T) {
	t.Parallel()
	res, err := List(context.Background(), ListConfig{Dir: t.TempDir(), Runs: 500, Sessions: 50, Requests: 3})
	require.NoError(t, err)
	require.Len(t, res.Queries, 6)
	want := map[string]int{"newest page": 100, "by tag (1/10)": 50, "failed only": 50, "one session": 10, "deep page by cursor": 100, "last change first": 100}
	for _, q := range res.Queries {
		require.Equal(t, want[q.Name], q.Returned, q.Name)
		require.Positive(t, q.P50Millis, q.Name)
		require.LessOrEqual(t, q.P50Millis, q.P99Millis)
	}
}
