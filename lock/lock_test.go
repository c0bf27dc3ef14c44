package lock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/belayhq/belay/internal/atomicfile"
	"github.com/belayhq/belay/internal/vfs"
	"github.com/stretchr/testify/require"
)

func TestAcquireRelease(t *testing.T) {
	t.Parallel()
	s := setup(t)
	l := New(s.path, Options{Purpose: "daemon", Incarnation: "inc_a"})
	require.NoError(t, l.TryAcquire(s.ctx))
	require.ErrorIs(t, l.TryAcquire(s.ctx), ErrAlreadyHeld)

	o, ok := l.Owner()
	require.True(t, ok)
	require.Equal(t, os.Getpid(), o.PID)
	require.Equal(t, hostname(), o.Host)
	require.Equal(t, "inc_a", o.Incarnation)
	require.Equal(t, "daemon", o.Purpose)
	require.Len(t, o.Nonce, 32)
	require.NotEmpty(t, o.StartTime, "linux and darwin know start times")
	_, reclaimed := l.Reclaimed()
	require.False(t, reclaimed)

	st, err := Inspect(s.path, Options{})
	require.NoError(t, err)
	require.Equal(t, ReasonHeld, st.Reason)
	require.True(t, st.Alive)
	require.True(t, st.Local)
	require.False(t, st.Stale)
	requireSameOwner(t, o, *st.Holder)

	require.NoError(t, l.Release())
	require.NoFileExists(t, s.path)
	require.ErrorIs(t, l.Release(), ErrNotHeld)
	require.ErrorIs(t, l.Heartbeat(s.ctx), ErrNotHeld)
	_, ok = l.Owner()
	require.False(t, ok)

	// Reacquire gets a new nonce.
	require.NoError(t, l.TryAcquire(s.ctx))
	o2, _ := l.Owner()
	require.NotEqual(t, o.Nonce, o2.Nonce)
	require.NoError(t, l.Release())

	// Nothing remains: no temp files, no guard files.
	entries, err := os.ReadDir(s.dir)
	require.NoError(t, err)
	require.Empty(t, entries)
}

func TestSecondLockIsRefused(t *testing.T) {
	t.Parallel()
	s := setup(t)
	a := New(s.path, Options{Purpose: "daemon"})
	require.NoError(t, a.TryAcquire(s.ctx))
	b := New(s.path, Options{})
	err := b.TryAcquire(s.ctx)
	require.ErrorIs(t, err, ErrHeld)
	var held *HeldError
	require.ErrorAs(t, err, &held)
	require.Equal(t, ReasonHeld, held.Reason)
	require.Equal(t, os.Getpid(), held.Holder.PID)
	require.Contains(t, err.Error(), "is held by pid")
	require.Contains(t, err.Error(), "daemon, since")
	require.NoError(t, a.Release())
	require.NoError(t, b.TryAcquire(s.ctx))
	require.NoError(t, b.Release())
}

func TestHeldErrorMessage(t *testing.T) {
	t.Parallel()
	o := sampleOwner()
	e := &HeldError{Path: "/data/belay.lock", Holder: &o, Reason: ReasonHeld, Now: o.HeartbeatAt.Add(3 * time.Second)}
	require.Equal(t, "lock: /data/belay.lock is held by pid 1234 on host h1 (daemon, since 2026-03-01T12:00:00Z, heartbeat 3s ago)", e.Error())
	o.Purpose = ""
	require.Equal(t, "lock: /data/belay.lock is held by pid 1234 on host h1 (since 2026-03-01T12:00:00Z, heartbeat 3s ago)", e.Error())

	e = &HeldError{Path: "/p", Reason: ReasonMetadataInGrace, Age: 450 * time.Millisecond}
	require.Equal(t, "lock: /p is held (lock file has no readable owner record yet, 450ms old)", e.Error())

	var err error = e
	require.ErrorIs(t, err, ErrHeld)
	require.NotErrorIs(t, err, ErrLost)
}

// TestPublishIsAtomic reads the lock file continuously while another Lock
// acquires, heartbeats and releases it: whenever the path exists, it holds
// a complete record.
func TestPublishIsAtomic(t *testing.T) {
	t.Parallel()
	s := setup(t)
	var stop atomic.Bool
	var reads, seen atomic.Int64
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for !stop.Load() {
				st, err := Inspect(s.path, Options{})
				if err != nil {
					t.Errorf("inspect: %v", err)
					return
				}
				if st.Free() {
					reads.Add(1)
					continue
				}
				if st.Holder == nil {
					t.Errorf("lock file exists without a complete record: %s", st.Detail)
					return
				}
				seen.Add(1)
				reads.Add(1)
			}
		})
	}
	l := New(s.path, Options{})
	for i := 0; i < 200 || seen.Load() < 10; i++ {
		require.NoError(t, l.TryAcquire(s.ctx))
		require.NoError(t, l.Heartbeat(s.ctx))
		require.NoError(t, l.Release())
		if i > 100000 {
			break
		}
	}
	stop.Store(true)
	wg.Wait()
	require.Positive(t, seen.Load())
}

// TestSilentLiveHolderIsHung: a live holder on this host that stopped
// heartbeating (SIGSTOP, suspend, a wedged process) is reported as hung with
// the command to end it, and never replaced, however long it stays silent.
func TestSilentLiveHolderIsHung(t *testing.T) {
	t.Parallel()
	s := setup(t)
	clk := newFakeClock()
	opts := Options{TTL: 30 * time.Second, Clock: clk.Now}
	a := New(s.path, opts)
	require.NoError(t, a.TryAcquire(s.ctx))
	b := New(s.path, opts)
	require.ErrorIs(t, b.TryAcquire(s.ctx), ErrHeld)

	clk.Advance(time.Hour)
	st, err := Inspect(s.path, opts)
	require.NoError(t, err)
	require.Equal(t, ReasonHung, st.Reason)
	require.False(t, st.Stale)
	require.True(t, st.Alive)
	require.Equal(t, fmt.Sprintf("kill %d", os.Getpid()), st.Action)

	err = b.TryAcquire(s.ctx)
	var held *HeldError
	require.ErrorAs(t, err, &held)
	require.Equal(t, ReasonHung, held.Reason)
	require.ErrorContains(t, err, fmt.Sprintf("end it with `kill %d`", os.Getpid()))

	// The holder wakes up, proves its hold and goes on.
	require.NoError(t, a.Heartbeat(s.ctx))
	require.NoError(t, a.Release())
	require.NoError(t, b.TryAcquire(s.ctx))
	require.NoError(t, b.Release())
}

// TestExpiredRemoteHolderIsReclaimed: a record from another host (whose
// process cannot be probed, and whose kernel lock this host may not see)
// is replaced once it expired; the old holder finds out at its next
// heartbeat, and is fenced.
func TestExpiredRemoteHolderIsReclaimed(t *testing.T) {
	t.Parallel()
	s := setup(t)
	clk := newFakeClock()
	opts := Options{TTL: 30 * time.Second, Clock: clk.Now}
	remote := foreignOwner(12345, "")
	remote.Host = "elsewhere.example"
	remote.HeartbeatAt, remote.ExpiresAt = clk.Now(), clk.Now().Add(30*time.Second)
	putRecord(t, s.path, remote)
	b := New(s.path, opts)
	require.ErrorIs(t, b.TryAcquire(s.ctx), ErrHeld)

	clk.Advance(30 * time.Second) // exactly at expiresAt: still valid
	require.ErrorIs(t, b.TryAcquire(s.ctx), ErrHeld)

	clk.Advance(time.Nanosecond)
	st, err := Inspect(s.path, opts)
	require.NoError(t, err)
	require.Equal(t, ReasonExpired, st.Reason)
	require.True(t, st.Stale)
	require.False(t, st.Local)

	require.NoError(t, b.TryAcquire(s.ctx))
	rec, ok := b.Reclaimed()
	require.True(t, ok)
	require.Equal(t, ReasonExpired, rec.Reason)
	require.Equal(t, remote.Nonce, rec.Holder.Nonce)
	require.NoError(t, b.Release())
}

// TestHeartbeatKeepsHolder: a holder that heartbeats within the TTL is never
// reclaimed, however long it holds (here 200 heartbeats, over 96 minutes
// of clock time with a 30s TTL).
func TestHeartbeatKeepsHolder(t *testing.T) {
	t.Parallel()
	s := setup(t)
	clk := newFakeClock()
	opts := Options{TTL: 30 * time.Second, Clock: clk.Now}
	a := New(s.path, opts)
	require.NoError(t, a.TryAcquire(s.ctx))
	start := clk.Now()
	b := New(s.path, opts)
	for range 200 {
		clk.Advance(29 * time.Second)
		require.ErrorIs(t, b.TryAcquire(s.ctx), ErrHeld)
		require.NoError(t, a.Heartbeat(s.ctx))
	}
	o, _ := a.Owner()
	require.True(t, o.AcquiredAt.Equal(start))
	require.True(t, o.HeartbeatAt.Equal(start.Add(200*29*time.Second)))
	require.True(t, o.ExpiresAt.Equal(o.HeartbeatAt.Add(30*time.Second)))
	st, err := Inspect(s.path, opts)
	require.NoError(t, err)
	requireSameOwner(t, o, *st.Holder)
	require.NoError(t, a.Release())
}

func TestHeartbeatDetectsLoss(t *testing.T) {
	t.Parallel()
	other := func(path string) Owner {
		o := foreignOwner(os.Getpid(), selfStartTime())
		o.Purpose = "thief"
		return o
	}
	tests := []struct {
		name      string
		steal     func(t *testing.T, path string)
		wantOther bool
	}{
		{name: "replaced by another nonce", wantOther: true, steal: func(t *testing.T, path string) {
			data, err := other(path).Encode()
			require.NoError(t, err)
			require.NoError(t, atomicfile.WriteFile(vfs.OS, path, data, 0o644))
		}},
		{name: "removed", steal: func(t *testing.T, path string) {
			require.NoError(t, os.Remove(path))
		}},
		{name: "replaced by garbage", steal: func(t *testing.T, path string) {
			require.NoError(t, atomicfile.WriteFile(vfs.OS, path, []byte("garbage"), 0o644))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name+"/heartbeat", func(t *testing.T) {
			t.Parallel()
			s := setup(t)
			l := New(s.path, Options{})
			require.NoError(t, l.TryAcquire(s.ctx))
			tt.steal(t, s.path)
			before, _ := os.ReadFile(s.path)

			err := l.Heartbeat(s.ctx)
			require.ErrorIs(t, err, ErrLost)
			if tt.wantOther {
				require.ErrorContains(t, err, "now held by pid")
			}
			_, ok := l.Owner()
			require.False(t, ok, "a lost lock is forgotten")
			require.ErrorIs(t, l.Heartbeat(s.ctx), ErrNotHeld)
			require.ErrorIs(t, l.Release(), ErrNotHeld)
			after, _ := os.ReadFile(s.path)
			require.Equal(t, before, after, "the other owner's file is untouched")
		})
		t.Run(tt.name+"/release", func(t *testing.T) {
			t.Parallel()
			s := setup(t)
			l := New(s.path, Options{})
			require.NoError(t, l.TryAcquire(s.ctx))
			tt.steal(t, s.path)
			before, _ := os.ReadFile(s.path)
			require.ErrorIs(t, l.Release(), ErrLost)
			after, _ := os.ReadFile(s.path)
			require.Equal(t, before, after, "release removes only our own file")
		})
	}
}

func TestAcquireRespectsDeadline(t *testing.T) {
	t.Parallel()
	s := setup(t)
	holder := New(s.path, Options{Purpose: "daemon"})
	require.NoError(t, holder.TryAcquire(s.ctx))
	defer func() { require.NoError(t, holder.Release()) }()

	// A goroutine that must keep making progress while Acquire waits.
	var ticks atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
				ticks.Add(1)
			}
		}
	})

	const timeout = 500 * time.Millisecond
	waiter := New(s.path, Options{BackoffMin: time.Millisecond, BackoffMax: 20 * time.Millisecond})
	// Started before the deadline is set, so that the deadline is at least
	// timeout after start.
	start := time.Now()
	ctx, cancel := context.WithTimeout(s.ctx, timeout)
	defer cancel()
	err := waiter.Acquire(ctx)
	elapsed := time.Since(start)
	close(done)
	wg.Wait()

	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, ErrHeld)
	var held *HeldError
	require.ErrorAs(t, err, &held)
	require.Equal(t, os.Getpid(), held.Holder.PID)
	require.Contains(t, err.Error(), "gave up waiting for "+s.path)
	require.Contains(t, err.Error(), "is held by pid")
	require.GreaterOrEqual(t, elapsed, timeout)
	require.Less(t, elapsed, timeout+10*time.Second, "Acquire overslept its deadline")
	require.Positive(t, ticks.Load(), "another goroutine made no progress while Acquire waited")
	_, ok := waiter.Owner()
	require.False(t, ok)
}

func TestAcquireAlreadyCancelled(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx, cancel := context.WithCancel(s.ctx)
	cancel()
	err := New(s.path, Options{}).Acquire(ctx)
	require.ErrorIs(t, err, context.Canceled)
	require.NoFileExists(t, s.path)
}

func TestAcquireWaitsForRelease(t *testing.T) {
	t.Parallel()
	s := setup(t)
	holder := New(s.path, Options{})
	require.NoError(t, holder.TryAcquire(s.ctx))
	var wg sync.WaitGroup
	wg.Go(func() {
		time.Sleep(100 * time.Millisecond)
		require.NoError(t, holder.Release())
	})
	ctx, cancel := context.WithTimeout(s.ctx, childTimeout)
	defer cancel()
	waiter := New(s.path, Options{})
	require.NoError(t, waiter.Acquire(ctx))
	wg.Wait()
	require.NoError(t, waiter.Release())
}

// TestGoroutineRacersOnStaleLock: many Locks in one process race for a lock
// left by a dead process; exactly one wins each round.
func TestGoroutineRacersOnStaleLock(t *testing.T) {
	t.Parallel()
	s := setup(t)
	dead := deadPID(t)
	for round := range 20 {
		putRecord(t, s.path, foreignOwner(dead, "boot:1"))
		const n = 8
		var wg sync.WaitGroup
		var winners atomic.Int64
		locks := make([]*Lock, n)
		start := make(chan struct{})
		for i := range n {
			locks[i] = New(s.path, Options{})
			wg.Go(func() {
				<-start
				err := locks[i].TryAcquire(s.ctx)
				switch {
				case err == nil:
					winners.Add(1)
				case errors.Is(err, ErrHeld):
				default:
					t.Errorf("round %d: racer %d: %v", round, i, err)
				}
			})
		}
		close(start)
		wg.Wait()
		require.EqualValues(t, 1, winners.Load(), "round %d", round)
		for _, l := range locks {
			if _, ok := l.Owner(); ok {
				require.NoError(t, l.Release())
			}
		}
	}
}
