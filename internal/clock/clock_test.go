package clock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestFakeRunsTimersInOrder(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := NewFake(start)
	var got []time.Duration
	c.AfterFunc(3*time.Second, func() { got = append(got, c.Now().Sub(start)) })
	c.AfterFunc(1*time.Second, func() {
		got = append(got, c.Now().Sub(start))
		c.AfterFunc(time.Second, func() { got = append(got, c.Now().Sub(start)) })
	})
	stopped := c.AfterFunc(2500*time.Millisecond, func() { t.Error("stopped timer ran") })
	require.True(t, stopped.Stop())
	require.False(t, stopped.Stop())
	c.Advance(5 * time.Second)
	require.Equal(t, []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}, got)
	require.Equal(t, start.Add(5*time.Second), c.Now())
	require.Zero(t, c.Pending())
}
