package proc

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// helperEnv makes the test binary act as a child that waits for stdin to
// close, so tests have a live process other than themselves.
const helperEnv = "BELAY_PROC_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "wait" {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// startChild starts a helper process that lives until the returned stdin is
// closed or it is killed.
func startChild(t *testing.T) (*exec.Cmd, io.WriteCloser) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=wait", "GORACE=atexit_sleep_ms=0")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd, stdin
}

func TestParseStat(t *testing.T) {
	t.Parallel()
	tail := " 1 7 9 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 100 18446744073709551615"
	tests := []struct {
		name    string
		line    string
		want    stat
		wantErr bool
	}{
		{name: "plain", line: "42 (sleep) S" + tail + "\n", want: stat{State: 'S', PGrp: 7, Session: 9, StartTime: 987654}},
		{name: "comm with spaces", line: "42 (my prog) R" + tail, want: stat{State: 'R', PGrp: 7, Session: 9, StartTime: 987654}},
		{name: "comm with parens", line: "42 (a) b) (c) Z" + tail, want: stat{State: 'Z', PGrp: 7, Session: 9, StartTime: 987654}},
		{name: "comm is a close paren", line: "42 ()) S" + tail, want: stat{State: 'S', PGrp: 7, Session: 9, StartTime: 987654}},
		{name: "comm looks like fields", line: "42 (x) S 1 1 1 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 5 1 1) D" + tail, want: stat{State: 'D', PGrp: 7, Session: 9, StartTime: 987654}},
		{name: "empty", line: "", wantErr: true},
		{name: "no comm", line: "42 sleep S" + tail, wantErr: true},
		{name: "truncated", line: "42 (sleep) S 1 1 1", wantErr: true},
		{name: "bad starttime", line: "42 (sleep) S 1 1 1 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 x 1000", wantErr: true},
		{name: "bad state", line: "42 (sleep) SS" + tail, wantErr: true},
		{name: "bad pgrp", line: "42 (sleep) S 1 x 9 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000", wantErr: true},
		{name: "reversed parens", line: ")42 ( S" + tail, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseStat(tt.line)
			if tt.wantErr {
				require.ErrorIs(t, err, errBadStat)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func FuzzParseStat(f *testing.F) {
	f.Add("42 (sleep) S 1 1 1 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 100")
	f.Add("42 (a) b) Z 1 1 1 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 1 1 1")
	f.Add("(")
	f.Add(")(")
	f.Fuzz(func(t *testing.T, line string) {
		st, err := parseStat(line)
		if err == nil && st.State == 0 && len(line) == 0 {
			t.Fatalf("empty line parsed: %+v", st)
		}
	})
}

func TestAlive(t *testing.T) {
	t.Parallel()
	if runtime.GOOS == "windows" || runtime.GOOS == "plan9" {
		t.Skip("no kill(2)")
	}
	alive, err := Alive(os.Getpid())
	require.NoError(t, err)
	require.True(t, alive, "self")

	alive, err = Alive(1)
	require.NoError(t, err, "pid 1 exists; EPERM must read as alive")
	require.True(t, alive, "pid 1")

	for _, pid := range []int{0, -1, -42} {
		_, err := Alive(pid)
		require.Error(t, err, "pid %d would address a process group", pid)
	}
}

func TestChildLifecycle(t *testing.T) {
	t.Parallel()
	if runtime.GOOS == "windows" || runtime.GOOS == "plan9" {
		t.Skip("no kill(2)")
	}
	cmd, _ := startChild(t)
	pid := cmd.Process.Pid

	alive, err := Alive(pid)
	require.NoError(t, err)
	require.True(t, alive)

	if runtime.GOOS == "linux" || runtime.GOOS == "darwin" {
		self, err := StartTime(os.Getpid())
		require.NoError(t, err)
		again, err := StartTime(os.Getpid())
		require.NoError(t, err)
		require.Equal(t, self, again, "token is stable")
		child, err := StartTime(pid)
		require.NoError(t, err)
		require.NotEmpty(t, child)
		// The child is younger than this process; on Linux ticks are
		// 10ms, so require only that the tokens are well-formed, and
		// that the child's is stable too.
		again, err = StartTime(pid)
		require.NoError(t, err)
		require.Equal(t, child, again)
	}

	require.NoError(t, cmd.Process.Kill())
	if runtime.GOOS == "linux" || runtime.GOOS == "darwin" {
		// Killed but not reaped: a zombie, which is dead for our purposes.
		require.Eventually(t, func() bool {
			alive, err := Alive(pid)
			return err == nil && !alive
		}, 30*time.Second, 5*time.Millisecond, "zombie must read as dead")
	}
	_ = cmd.Wait()

	alive, err = Alive(pid)
	require.NoError(t, err)
	require.False(t, alive, "reaped")
	if runtime.GOOS == "linux" || runtime.GOOS == "darwin" {
		_, err = StartTime(pid)
		require.ErrorIs(t, err, ErrNoProcess)
	}
}

func TestStartTimeInvalidPID(t *testing.T) {
	t.Parallel()
	_, err := StartTime(0)
	require.Error(t, err)
	require.False(t, errors.Is(err, ErrNoProcess))
}

// TestMembers finds a child in its own process group and session, and
// no longer once it exited.
func TestMembers(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("process listing is Linux-only")
	}
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	require.NoError(t, cmd.Start())
	pid := cmd.Process.Pid
	byGroup, err := Members(pid, 0)
	require.NoError(t, err)
	require.Equal(t, []int{pid}, byGroup)
	bySession, err := Members(0, pid)
	require.NoError(t, err)
	require.Equal(t, []int{pid}, bySession)
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	gone, err := Members(pid, pid)
	require.NoError(t, err)
	require.Empty(t, gone)
}
