package bench

import (
	"bytes"
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestFanoutFloorDeliversEveryEventToEveryStream(t *testing.T) {
	cfg := FanoutConfig{Subscribers: 12, Posts: 7, Interval: time.Millisecond}
	before := time.Now()
	lat, err := fanoutFloor(t.Context(), t.TempDir(), cfg, 199)
	require.NoError(t, err)
	require.Len(t, lat, 12*7)
	for _, d := range lat {
		require.GreaterOrEqual(t, d, time.Duration(0))
		require.Less(t, d, time.Since(before))
	}
}

func TestFanoutFloorStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := fanoutFloor(ctx, t.TempDir(), FanoutConfig{Subscribers: 3, Posts: 2, Interval: time.Millisecond}, 64)
	require.ErrorIs(t, err, context.Canceled)
	// goleak (TestMain) checks that no stream's goroutine is left.
}

func TestFloorFrame(t *testing.T) {
	at := time.Unix(1700000000, 123456789)
	for _, size := range []int{0, 10, 21, 199, 4096} {
		b := floorFrame(at, size)
		require.Equal(t, byte('\n'), b[len(b)-1])
		require.Equal(t, max(size, 21), len(b), "size %d", size)
		ns, err := strconv.ParseInt(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
		require.NoError(t, err)
		require.Equal(t, at.UnixNano(), ns)
	}
}
