package main

// The descriptor limit of a running process is set with prlimit(2), and
// its descriptors are counted in /proc: Linux only.

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/belayhq/belay/lock"
	"github.com/belayhq/belay/store/fsstore"
)

// TestDaemonOutOfDescriptorsKeepsItsLock: the daemon runs out of file
// descriptors mid-answer. It keeps heartbeating (a heartbeat needs no new
// descriptor), so a second daemon is refused; once descriptors are free
// again it answers and finishes every run, and the journals verify.
func TestDaemonOutOfDescriptorsKeepsItsLock(t *testing.T) {
	if testing.Short() {
		t.Skip("child-process fault test")
	}
	t.Parallel()
	w := startOneWriter(t, "600ms", 4)
	pid := w.daemon.Process.Pid
	var old unix.Rlimit
	require.NoError(t, unix.Prlimit(pid, unix.RLIMIT_NOFILE, nil, &old))
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	require.NoError(t, err)
	tight := unix.Rlimit{Cur: uint64(len(fds) + 4), Max: old.Max}
	require.NoError(t, unix.Prlimit(pid, unix.RLIMIT_NOFILE, &tight, nil))
	restored := false
	restore := func() {
		if !restored {
			restored = true
			require.NoError(t, unix.Prlimit(pid, unix.RLIMIT_NOFILE, &old, nil))
		}
	}
	defer restore()

	// Idle connections take the last descriptors.
	var conns []*os.File
	for range 16 {
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
		require.NoError(t, err)
		f := os.NewFile(uintptr(fd), "conn")
		conns = append(conns, f)
		_ = unix.Connect(fd, &unix.SockaddrUnix{Name: filepath.Join(w.dir, "belay.sock")})
	}
	defer func() {
		for _, f := range conns {
			_ = f.Close()
		}
	}()
	require.Eventually(t, func() bool {
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		return err == nil && uint64(len(fds)) >= tight.Cur
	}, time.Minute, 10*time.Millisecond, "the daemon's descriptors are used up")
	// Longer than the TTL passes with the daemon out of descriptors.
	lockPath := filepath.Join(w.dir, fsstore.LockName)
	st0, err := lock.Inspect(lockPath, lock.Options{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		st, err := lock.Inspect(lockPath, lock.Options{})
		return err == nil && st.Holder != nil && st.Holder.HeartbeatAt.Sub(st0.Holder.HeartbeatAt) > 700*time.Millisecond
	}, time.Minute, 20*time.Millisecond, "heartbeats go on without new descriptors")

	err, out := w.secondServe()
	require.Error(t, err, "a second daemon must not start: %s", out)
	require.Contains(t, out, fmt.Sprintf("pid %d", pid))

	restore()
	for _, f := range conns {
		_ = f.Close()
	}
	conns = nil
	h, err := w.c.Health(t.Context())
	require.NoError(t, err, "the owner answers again")
	require.Equal(t, pid, h.PID)
	w.finish()
}
