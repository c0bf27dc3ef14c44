package lock

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/belayhq/belay/internal/atomicfile"
	"github.com/belayhq/belay/internal/vfs"
	"github.com/stretchr/testify/require"
)

func TestHeartbeaterLifecycle(t *testing.T) {
	t.Parallel()
	s := setup(t)
	l := New(s.path, Options{})

	h := NewHeartbeater(l, HeartbeatOptions{Interval: 5 * time.Millisecond})
	require.ErrorIs(t, h.Start(s.ctx), ErrNotHeld)

	idle := NewHeartbeater(l, HeartbeatOptions{})
	require.NoError(t, idle.Stop(s.ctx), "stop before start")
	require.NoError(t, idle.Stop(s.ctx), "stop twice")
	require.ErrorIs(t, idle.Start(s.ctx), ErrStopped)

	require.NoError(t, l.TryAcquire(s.ctx))
	first, _ := l.Owner()
	h, err := l.StartHeartbeat(s.ctx, HeartbeatOptions{Interval: 5 * time.Millisecond})
	require.NoError(t, err)
	require.Error(t, h.Start(s.ctx), "start twice")
	require.NoError(t, h.Err(), "running")
	require.Eventually(t, func() bool {
		o, _ := l.Owner()
		return o.HeartbeatAt.After(first.HeartbeatAt)
	}, childTimeout, time.Millisecond)

	require.NoError(t, h.Stop(s.ctx))
	require.NoError(t, h.Stop(s.ctx))
	require.ErrorIs(t, h.Err(), ErrStopped)
	select {
	case <-h.Lost():
		t.Fatal("not lost")
	default:
	}
	require.NoError(t, l.Release(), "Stop does not release")
}

func TestHeartbeaterReportsLoss(t *testing.T) {
	t.Parallel()
	s := setup(t)
	l := New(s.path, Options{})
	require.NoError(t, l.TryAcquire(s.ctx))
	lost := make(chan error, 1)
	h, err := l.StartHeartbeat(s.ctx, HeartbeatOptions{
		Interval: 5 * time.Millisecond,
		OnLost:   func(err error) { lost <- err },
	})
	require.NoError(t, err)

	thief := foreignOwner(os.Getpid(), selfStartTime())
	data, err := thief.Encode()
	require.NoError(t, err)
	require.NoError(t, atomicfile.WriteFile(vfs.OS, s.path, data, 0o644))

	select {
	case err := <-lost:
		require.ErrorIs(t, err, ErrLost)
	case <-time.After(childTimeout):
		t.Fatal("loss was not reported")
	}
	<-h.Lost()
	require.ErrorIs(t, h.Err(), ErrLost)
	require.NoError(t, h.Stop(s.ctx))
	require.ErrorIs(t, h.Err(), ErrLost, "the loss stays the reason after Stop")
	_, ok := l.Owner()
	require.False(t, ok)
	got, err := os.ReadFile(s.path)
	require.NoError(t, err)
	require.Equal(t, data, got, "the thief's record is untouched")
}

func TestHeartbeaterStopsWithContext(t *testing.T) {
	t.Parallel()
	s := setup(t)
	l := New(s.path, Options{})
	require.NoError(t, l.TryAcquire(s.ctx))
	cause := errors.New("daemon shutting down")
	ctx, cancel := context.WithCancelCause(s.ctx)
	h, err := l.StartHeartbeat(ctx, HeartbeatOptions{Interval: time.Hour})
	require.NoError(t, err)
	cancel(cause)
	select {
	case <-h.Done():
	case <-time.After(childTimeout):
		t.Fatal("heartbeater did not stop")
	}
	require.ErrorIs(t, h.Err(), cause)
	require.NoError(t, h.Stop(s.ctx))
	require.NoError(t, l.Release())
}

func TestHeartbeaterEndsWhenReleased(t *testing.T) {
	t.Parallel()
	// Each heartbeat on time, and each one timed out before it starts (as
	// one that waited too long for the CPU): a release during a failing
	// heartbeat is no loss either.
	for _, timeout := range []time.Duration{0, time.Nanosecond} {
		t.Run(timeout.String(), func(t *testing.T) {
			t.Parallel()
			heartbeaterEndsWhenReleased(t, timeout)
		})
	}
}

func heartbeaterEndsWhenReleased(t *testing.T, timeout time.Duration) {
	s := setup(t)
	l := New(s.path, Options{})
	require.NoError(t, l.TryAcquire(s.ctx))
	h, err := l.StartHeartbeat(s.ctx, HeartbeatOptions{Interval: 5 * time.Millisecond, Timeout: timeout})
	require.NoError(t, err)
	require.NoError(t, l.Release())
	select {
	case <-h.Done():
	case <-time.After(childTimeout):
		t.Fatal("heartbeater kept running")
	}
	require.ErrorIs(t, h.Err(), ErrNotHeld)
	select {
	case <-h.Lost():
		t.Fatal("a release is not a loss")
	default:
	}
	require.NoError(t, h.Stop(s.ctx))
}
