package lock

import (
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// fakeElapsed is a settable suspend-aware monotonic clock.
type fakeElapsed struct{ d atomic.Int64 }

func (f *fakeElapsed) now() time.Duration      { return time.Duration(f.d.Load()) }
func (f *fakeElapsed) advance(d time.Duration) { f.d.Add(int64(d)) }

// TestCheckFastPathAndReconfirm: within TTL-margin of the last confirmed
// heartbeat Check proves nothing on disk; past it, Check proves ownership
// again by a heartbeat, as a holder waking from SIGSTOP or suspend does.
func TestCheckFastPathAndReconfirm(t *testing.T) {
	t.Parallel()
	s := setup(t)
	var el fakeElapsed
	l := New(s.path, Options{TTL: 40 * time.Second, Elapsed: el.now})
	require.NoError(t, l.TryAcquire(s.ctx))
	before, _ := l.Owner()

	el.advance(29 * time.Second) // fence line is 40s - 10s
	require.NoError(t, l.Check(s.ctx))
	o, _ := l.Owner()
	require.Equal(t, before.HeartbeatAt, o.HeartbeatAt, "fast path: no heartbeat")

	el.advance(time.Hour) // asleep far past the TTL; nobody took the lock
	require.NoError(t, l.Check(s.ctx), "ownership proven again")
	o, _ = l.Owner()
	require.True(t, o.HeartbeatAt.After(before.HeartbeatAt), "re-confirmation renews the heartbeat")
	require.NoError(t, l.Release())
	require.ErrorIs(t, l.Check(s.ctx), ErrFenced, "a released lock writes nothing")
}

// TestCheckFencesAfterTakeover: a holder on a host that does not share
// kernel locks slept past its TTL and another host replaced its record. At
// the next write it cannot prove ownership: Check fences, for good, and the
// other holder's record is left alone.
func TestCheckFencesAfterTakeover(t *testing.T) {
	t.Parallel()
	s := setup(t)
	var el fakeElapsed
	l := New(s.path, Options{TTL: 40 * time.Second, Elapsed: el.now})
	require.NoError(t, l.TryAcquire(s.ctx))

	thief := foreignOwner(12345, "")
	thief.Host = "elsewhere.example"
	putRecord(t, s.path, thief) // in place, as a host without our kernel lock would
	require.NoError(t, l.Check(s.ctx), "before the fence line nothing is read")

	el.advance(31 * time.Second)
	err := l.Check(s.ctx)
	require.ErrorIs(t, err, ErrFenced)
	require.ErrorIs(t, err, ErrLost)
	require.ErrorContains(t, err, "held by pid 12345 on host elsewhere.example")
	require.ErrorIs(t, l.Check(s.ctx), ErrFenced, "fenced for good")
	require.ErrorIs(t, l.Release(), ErrNotHeld)
	st, err := Inspect(s.path, Options{})
	require.NoError(t, err)
	require.Equal(t, thief.Nonce, st.Holder.Nonce, "the other holder's record is untouched")
}

// TestHeartbeaterFencesAfterFailures: heartbeats that keep failing (here:
// the file cannot be written) fence the holder once TTL-margin passed
// without a confirmed one, and OnLost says so.
func TestHeartbeaterFencesAfterFailures(t *testing.T) {
	t.Parallel()
	s := setup(t)
	var el fakeElapsed
	l := New(s.path, Options{TTL: 40 * time.Second, Elapsed: el.now})
	require.NoError(t, l.TryAcquire(s.ctx))
	// Make every heartbeat fail with an I/O error: swap the held file for
	// a read-only descriptor of the same inode.
	ro, err := os.Open(s.path)
	require.NoError(t, err)
	l.mu.Lock()
	rw := l.f
	l.f = ro
	l.mu.Unlock()
	t.Cleanup(func() { _ = rw.Close() })

	lost := make(chan error, 1)
	var failures atomic.Int64
	hb, err := l.StartHeartbeat(s.ctx, HeartbeatOptions{
		Interval: time.Millisecond,
		OnError: func(error) {
			if failures.Add(1) == 3 {
				el.advance(31 * time.Second)
			}
		},
		OnLost: func(err error) { lost <- err },
	})
	require.NoError(t, err)
	select {
	case err := <-lost:
		require.ErrorIs(t, err, ErrFenced)
	case <-time.After(childTimeout):
		t.Fatal("failing heartbeats never fenced the holder")
	}
	require.NoError(t, hb.Stop(s.ctx))
	require.ErrorIs(t, hb.Err(), ErrFenced)
	require.ErrorIs(t, l.Check(s.ctx), ErrFenced)
}

// TestStoppedHolderIsNeverReplaced: a child holds the lock with a short TTL
// and heartbeats; SIGSTOP it past its TTL. An acquirer is refused with
// "stopped" and the command that resumes it; after SIGCONT the child
// heartbeats again and still holds the lock.
func TestStoppedHolderIsNeverReplaced(t *testing.T) {
	t.Parallel()
	s := setup(t)
	holder := startChild(t, "hold", envs(envPath, s.path, envTTL, "300ms", envInterval, "50ms")...)
	require.Equal(t, "acquired "+itoa(holder.pid), holder.next())
	require.NoError(t, syscall.Kill(holder.pid, syscall.SIGSTOP))
	defer func() { _ = syscall.Kill(holder.pid, syscall.SIGCONT) }()

	var st Status
	require.Eventually(t, func() bool {
		var err error
		st, err = Inspect(s.path, Options{})
		return err == nil && st.Reason == ReasonHung
	}, childTimeout, 10*time.Millisecond, "the stopped holder is judged hung once its TTL passed")
	require.True(t, st.Alive)
	require.False(t, st.Stale)
	if st.Stopped { // Linux tells a stopped process apart
		require.Equal(t, "kill -CONT "+itoa(holder.pid), st.Action)
	}

	l := New(s.path, Options{})
	err := l.TryAcquire(s.ctx)
	var held *HeldError
	require.ErrorAs(t, err, &held)
	require.Equal(t, ReasonHung, held.Reason)
	require.Equal(t, holder.pid, held.Holder.PID)

	require.NoError(t, syscall.Kill(holder.pid, syscall.SIGCONT))
	require.Eventually(t, func() bool {
		st, err := Inspect(s.path, Options{})
		return err == nil && st.Reason == ReasonHeld
	}, childTimeout, 10*time.Millisecond, "the resumed holder heartbeats again")
	require.Equal(t, []string{"released"}, holder.wait(), "the holder never lost the lock")
	st, err = Inspect(s.path, Options{})
	require.NoError(t, err)
	require.True(t, st.Free())
}

// TestHeartbeatNeedsNoDescriptor: a holder out of file descriptors still
// heartbeats and proves ownership (a heartbeat that needed a new file made
// a second daemon take over a live one).
func TestHeartbeatNeedsNoDescriptor(t *testing.T) {
	t.Parallel()
	s := setup(t)
	var lim unix.Rlimit
	require.NoError(t, unix.Getrlimit(unix.RLIMIT_NOFILE, &lim))
	if lim.Cur > 1<<16 {
		t.Skipf("RLIMIT_NOFILE soft limit %d is too high to exhaust quickly", lim.Cur)
	}
	c := startChild(t, "nofd", envs(envPath, s.path, envTTL, "1h")...)
	line := c.next()
	require.Regexp(t, `^exhausted \d+ true$`, line)
	require.Equal(t, "heartbeat ok", c.next())
	require.Equal(t, "check ok", c.next())
	require.Equal(t, []string{"released"}, c.wait())
}

// TestRecentProofNeedsBothClocks: the fast path of Check trusts time.Now
// only when its monotonic and wall readings agree that the line is not
// reached; a suspend shows as wall time running ahead, a step back of the
// wall clock as wall time running behind, and both send Check to the exact
// clock.
func TestRecentProofNeedsBothClocks(t *testing.T) {
	t.Parallel()
	const line = 30 * time.Second
	for _, tt := range []struct {
		name       string
		mono, wall time.Duration
		want       bool
	}{
		{"fresh", time.Second, time.Second, true},
		{"past the line", 31 * time.Second, 31 * time.Second, false},
		{"suspended: wall ran ahead", time.Second, time.Hour, false},
		{"wall stepped back", 20 * time.Second, 2 * time.Second, false},
		{"small wall adjustment", 5 * time.Second, 4500 * time.Millisecond, true},
		{"negative monotonic", -time.Second, time.Second, false},
	} {
		require.Equal(t, tt.want, recentBy(tt.mono, tt.wall, line), tt.name)
	}
}
