package runtime

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/clock"
)

var t0 = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

type fired struct {
	mu sync.Mutex
	e  []expiry
}

func (f *fired) fire(e expiry) { f.mu.Lock(); f.e = append(f.e, e); f.mu.Unlock() }
func (f *fired) get() []expiry {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]expiry(nil), f.e...)
}

func TestWatchdogTiers(t *testing.T) {
	t.Parallel()
	tiers := Tiers{AwaitingFirst: 120 * time.Second, Streaming: 60 * time.Second, ToolRunning: 600 * time.Second, AfterTurnEnd: 30 * time.Second}
	cases := []struct {
		name  string
		steps func(c *clock.Fake, w *watchdog)
		want  expiry
		at    time.Duration // when it must have fired
	}{
		{"no first token", func(c *clock.Fake, w *watchdog) {}, expiry{belay.TierAwaitingFirst, 120 * time.Second}, 120 * time.Second},
		{"stream then silence", func(c *clock.Fake, w *watchdog) {
			c.Advance(100 * time.Second)
			w.progress(belay.TierStreaming)
		}, expiry{belay.TierStreaming, 60 * time.Second}, 160 * time.Second},
		{"long tool", func(c *clock.Fake, w *watchdog) {
			c.Advance(10 * time.Second)
			w.progress(belay.TierToolRunning)
			c.Advance(500 * time.Second) // longer than streaming: still alive
		}, expiry{belay.TierToolRunning, 600 * time.Second}, 610 * time.Second},
		{"after turn end", func(c *clock.Fake, w *watchdog) {
			c.Advance(5 * time.Second)
			w.progress(belay.TierAfterTurnEnd)
		}, expiry{belay.TierAfterTurnEnd, 30 * time.Second}, 35 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := clock.NewFake(t0)
			var f fired
			w := newWatchdog(c, tiers, f.fire)
			tc.steps(c, w)
			require.Empty(t, f.get())
			c.Advance(tc.at - c.Now().Sub(t0) - time.Millisecond)
			require.Empty(t, f.get(), "fired early")
			c.Advance(time.Millisecond)
			require.Equal(t, []expiry{tc.want}, f.get())
			c.Advance(time.Hour)
			require.Len(t, f.get(), 1, "fires once")
		})
	}
}

func TestWatchdogProgressKeepsItAlive(t *testing.T) {
	t.Parallel()
	c := clock.NewFake(t0)
	var f fired
	w := newWatchdog(c, Tiers{AwaitingFirst: time.Minute}, f.fire)
	for i := 0; i < 600; i++ { // ten hours of a token every minute minus a second
		c.Advance(59 * time.Second)
		w.progress(belay.TierStreaming)
	}
	require.Empty(t, f.get(), "a live stream is never timed out, however long it runs")
	require.LessOrEqual(t, c.Pending(), 1, "progress does not pile up timers")
	last, tier := w.lastActivity()
	require.Equal(t, c.Now(), last)
	require.Equal(t, belay.TierStreaming, tier)
	w.stop()
	c.Advance(time.Hour)
	require.Empty(t, f.get(), "a stopped watchdog never fires")
}

func TestFailureWindow(t *testing.T) {
	t.Parallel()
	w := newFailureWindow(WindowPolicy{})
	// Denial, OK, denial, OK, denial: a consecutive counter would never
	// reach 3; the window does.
	require.False(t, w.record(true))
	require.False(t, w.record(false))
	require.False(t, w.record(true))
	require.False(t, w.record(false))
	require.True(t, w.record(true))
	w.reset()
	require.False(t, w.record(true))
	// Old failures slide out.
	w = newFailureWindow(WindowPolicy{Size: 3, Threshold: 2})
	require.False(t, w.record(true))
	require.False(t, w.record(false))
	require.False(t, w.record(false))
	require.False(t, w.record(true), "the first failure slid out")
	require.True(t, w.record(true))
}
