package lock

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Tests with real child processes (the test binary in helper mode; see
// runHelper in main_test.go).

// TestDeadHolderIsReclaimedAtOnce: a holder that is SIGKILLed leaves its
// record behind with an hour to run; the next acquirer reclaims it at once.
func TestDeadHolderIsReclaimedAtOnce(t *testing.T) {
	t.Parallel()
	s := setup(t)
	c := startChild(t, "hold", envs(envPath, s.path, envTTL, "1h")...)
	require.Equal(t, "acquired "+itoa(c.pid), c.next())

	st, err := Inspect(s.path, Options{})
	require.NoError(t, err)
	require.Equal(t, ReasonHeld, st.Reason)
	require.True(t, st.Alive)
	require.Equal(t, c.pid, st.Holder.PID)
	l := New(s.path, Options{TTL: time.Hour})
	require.ErrorIs(t, l.TryAcquire(s.ctx), ErrHeld)

	c.kill()
	st, err = Inspect(s.path, Options{})
	require.NoError(t, err)
	require.Equal(t, ReasonProcessGone, st.Reason, st.Detail)
	require.True(t, st.Stale)
	require.True(t, time.Now().Before(st.Holder.ExpiresAt), "not expired: reclaim is by liveness, not TTL")

	require.NoError(t, l.TryAcquire(s.ctx))
	rec, ok := l.Reclaimed()
	require.True(t, ok)
	require.Equal(t, ReasonProcessGone, rec.Reason)
	require.Equal(t, c.pid, rec.Holder.PID)
	require.NoError(t, l.Release())
}

// TestLiveHolderSurvivesTenTTLs: a child holds with a short TTL and
// heartbeats every TTL/4; for 10 TTLs every attempt to take the lock fails
// with HeldError naming the child. After it exits cleanly the lock is free.
func TestLiveHolderSurvivesTenTTLs(t *testing.T) {
	t.Parallel()
	const ttl = 800 * time.Millisecond // generous: the machine may be loaded
	s := setup(t)
	c := startChild(t, "hold", envs(envPath, s.path, envTTL, ttl.String(), envInterval, (ttl/4).String())...)
	require.Equal(t, "acquired "+itoa(c.pid), c.next())

	first, err := Inspect(s.path, Options{})
	require.NoError(t, err)
	l := New(s.path, Options{TTL: ttl})
	deadline := time.Now().Add(10 * ttl)
	attempts := 0
	for time.Now().Before(deadline) {
		err := l.TryAcquire(s.ctx)
		var held *HeldError
		require.ErrorAs(t, err, &held, "attempt %d: a live, heartbeating holder was reclaimed", attempts)
		require.Equal(t, c.pid, held.Holder.PID)
		require.Equal(t, first.Holder.Nonce, held.Holder.Nonce, "same acquisition throughout")
		attempts++
		time.Sleep(ttl / 20)
	}
	last, err := Inspect(s.path, Options{})
	require.NoError(t, err)
	require.True(t, last.Holder.AcquiredAt.Equal(first.Holder.AcquiredAt))
	require.True(t, last.Holder.ExpiresAt.After(first.Holder.ExpiresAt.Add(5*ttl)), "heartbeats renewed expiresAt")
	t.Logf("%d attempts refused over %s", attempts, 10*ttl)

	require.Equal(t, []string{"released"}, c.wait())
	require.NoError(t, l.TryAcquire(s.ctx))
	_, reclaimed := l.Reclaimed()
	require.False(t, reclaimed, "released cleanly, nothing to reclaim")
	require.NoError(t, l.Release())
}

// TestProcessRacers: N child processes released at once race for one lock;
// exactly one wins and every other names the winner.
func TestProcessRacers(t *testing.T) {
	t.Parallel()
	const n = 8
	tests := []struct {
		name  string
		stale bool
		how   string
	}{
		{name: "free lock, TryAcquire", how: "try"},
		{name: "stale lock of a killed holder, TryAcquire", stale: true, how: "try"},
		{name: "stale lock of a killed holder, Acquire with timeout", stale: true, how: "acquire"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := setup(t)
			if tt.stale {
				holder := startChild(t, "hold", envs(envPath, s.path, envTTL, "1h")...)
				require.Equal(t, "acquired "+itoa(holder.pid), holder.next())
				holder.kill()
				st, err := Inspect(s.path, Options{})
				require.NoError(t, err)
				require.Equal(t, ReasonProcessGone, st.Reason)
			}
			racers := make([]*child, n)
			for i := range racers {
				racers[i] = startChild(t, "race", envs(envPath, s.path, envTTL, "1h", envHow, tt.how, envTimeout, "1s")...)
			}
			for _, r := range racers {
				require.Equal(t, "ready", r.next())
			}
			for _, r := range racers {
				r.send("go")
			}
			winner := 0
			var losers []string
			for _, r := range racers {
				line := r.next()
				switch {
				case line == "won "+itoa(r.pid):
					require.Zero(t, winner, "two winners: %d and %d", winner, r.pid)
					winner = r.pid
				case strings.HasPrefix(line, "held "):
					losers = append(losers, line)
				default:
					require.FailNow(t, "unexpected racer output", "%d: %q", r.pid, line)
				}
			}
			require.NotZero(t, winner, "nobody won")
			require.Len(t, losers, n-1)
			timedOut := tt.how == "acquire"
			for _, line := range losers {
				require.Equal(t, "held "+itoa(winner)+" "+boolString(timedOut), line, "losers name the winner")
			}
			for _, r := range racers {
				r.wait()
			}
			st, err := Inspect(s.path, Options{})
			require.NoError(t, err)
			require.True(t, st.Free(), "the winner released on exit")
		})
	}
}

// TestAcquireFromAnotherProcessWaits: Acquire waits for a live child holder
// until ctx ends and reports it; once the child releases, Acquire succeeds.
func TestAcquireFromAnotherProcessWaits(t *testing.T) {
	t.Parallel()
	s := setup(t)
	c := startChild(t, "hold", envs(envPath, s.path, envTTL, "1h")...)
	require.Equal(t, "acquired "+itoa(c.pid), c.next())

	l := New(s.path, Options{})
	ctx, cancel := context.WithTimeout(s.ctx, 300*time.Millisecond)
	err := l.Acquire(ctx)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	var held *HeldError
	require.True(t, errors.As(err, &held))
	require.Equal(t, c.pid, held.Holder.PID)
	require.Equal(t, "test-hold", held.Holder.Purpose)

	require.Equal(t, []string{"released"}, c.wait())
	ctx, cancel = context.WithTimeout(s.ctx, childTimeout)
	defer cancel()
	require.NoError(t, l.Acquire(ctx))
	require.NoError(t, l.Release())
}

func itoa(n int) string { return strconv.Itoa(n) }

func boolString(b bool) string {
	if b {
		return "true"
	}
	return "false"
}
