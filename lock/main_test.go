package lock

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// The test binary doubles as the helper process for cross-process tests:
// with helperEnv set, TestMain runs a helper mode instead of the tests.
const (
	helperEnv   = "BELAY_LOCK_TEST_HELPER"
	envPath     = "BELAY_LOCK_TEST_PATH"
	envTTL      = "BELAY_LOCK_TEST_TTL"
	envInterval = "BELAY_LOCK_TEST_INTERVAL"
	envHow      = "BELAY_LOCK_TEST_HOW"
	envTimeout  = "BELAY_LOCK_TEST_TIMEOUT"
)

// childTimeout bounds every wait on a child. It is generous: the machine
// may be loaded, and it only matters when a test is already failing.
const childTimeout = 60 * time.Second

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(runHelper(mode))
	}
	goleak.VerifyTestMain(m)
}

// runHelper is the child side. Protocol: lines on stdout; the parent closes
// stdin to make the child release and exit.
func runHelper(mode string) int {
	path := os.Getenv(envPath)
	ttl, _ := time.ParseDuration(os.Getenv(envTTL))
	l := New(path, Options{TTL: ttl, Purpose: "test-" + mode})
	ctx := context.Background()
	stdin := bufio.NewReader(os.Stdin)
	switch mode {
	case "exit":
		return 0
	case "hold":
		actx, cancel := context.WithTimeout(ctx, childTimeout)
		err := l.Acquire(actx)
		cancel()
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		var hb *Heartbeater
		if iv, _ := time.ParseDuration(os.Getenv(envInterval)); iv > 0 {
			hb, err = l.StartHeartbeat(ctx, HeartbeatOptions{
				Interval: iv,
				OnLost:   func(err error) { fmt.Println("lost", err) },
				OnError:  func(err error) { fmt.Fprintln(os.Stderr, "heartbeat:", err) },
			})
			if err != nil {
				fmt.Println("error", err)
				return 1
			}
		}
		fmt.Println("acquired", os.Getpid())
		_, _ = io.Copy(io.Discard, stdin)
		if hb != nil {
			_ = hb.Stop(ctx)
		}
		if err := l.Release(); err != nil {
			fmt.Println("error", err)
			return 1
		}
		fmt.Println("released")
		return 0
	case "nofd":
		// Hold the lock, use up every file descriptor, then heartbeat:
		// the heartbeat must not need a new descriptor.
		if err := l.TryAcquire(ctx); err != nil {
			fmt.Println("error", err)
			return 1
		}
		var files []*os.File
		for {
			f, err := os.Open(os.DevNull)
			if err != nil {
				fmt.Println("exhausted", len(files), errors.Is(err, syscall.EMFILE))
				break
			}
			files = append(files, f)
		}
		if err := l.Heartbeat(ctx); err != nil {
			fmt.Println("heartbeat", err)
		} else {
			fmt.Println("heartbeat ok")
		}
		if err := l.Check(ctx); err != nil {
			fmt.Println("check", err)
		} else {
			fmt.Println("check ok")
		}
		for _, f := range files {
			_ = f.Close()
		}
		_, _ = io.Copy(io.Discard, stdin)
		if err := l.Release(); err != nil {
			fmt.Println("error", err)
			return 1
		}
		fmt.Println("released")
		return 0
	case "race":
		fmt.Println("ready")
		if _, err := stdin.ReadString('\n'); err != nil {
			return 1
		}
		var err error
		switch os.Getenv(envHow) {
		case "acquire":
			timeout, _ := time.ParseDuration(os.Getenv(envTimeout))
			actx, cancel := context.WithTimeout(ctx, timeout)
			err = l.Acquire(actx)
			cancel()
		default:
			err = l.TryAcquire(ctx)
		}
		var held *HeldError
		switch {
		case err == nil:
			fmt.Println("won", os.Getpid())
		case errors.As(err, &held) && held.Holder != nil:
			fmt.Println("held", held.Holder.PID, errors.Is(err, context.DeadlineExceeded))
		default:
			fmt.Println("error", err)
		}
		_, _ = io.Copy(io.Discard, stdin)
		if err == nil {
			if err := l.Release(); err != nil {
				fmt.Fprintln(os.Stderr, "release:", err)
				return 1
			}
		}
		return 0
	}
	fmt.Fprintln(os.Stderr, "unknown helper mode", mode)
	return 2
}

// helperEnviron is the environment of a helper child. Under -race the
// runtime sleeps a second at exit (GORACE atexit_sleep_ms); helpers skip it.
func helperEnviron(mode string) []string {
	return append(os.Environ(), helperEnv+"="+mode,
		"GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
}

// child is a running helper process.
type child struct {
	t     *testing.T
	cmd   *exec.Cmd
	pid   int
	stdin io.WriteCloser
	lines chan string
	once  sync.Once
}

// startChild runs the test binary in helper mode with extra env entries.
func startChild(t *testing.T, mode string, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(helperEnviron(mode), env...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	c := &child{t: t, cmd: cmd, pid: cmd.Process.Pid, stdin: stdin, lines: make(chan string, 64)}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() { c.wait() })
	return c
}

// next returns the child's next stdout line.
func (c *child) next() string {
	c.t.Helper()
	select {
	case line, ok := <-c.lines:
		require.True(c.t, ok, "child %d exited early", c.pid)
		return line
	case <-time.After(childTimeout):
		require.FailNow(c.t, "timeout", "no output from child %d", c.pid)
		return ""
	}
}

func (c *child) send(line string) {
	c.t.Helper()
	_, err := io.WriteString(c.stdin, line+"\n")
	require.NoError(c.t, err)
}

// wait closes stdin, drains stdout to EOF and reaps the child, killing it
// if it does not exit in time. It returns the remaining output lines.
func (c *child) wait() []string {
	var rest []string
	c.once.Do(func() {
		_ = c.stdin.Close()
		timeout := time.After(childTimeout)
	drain:
		for {
			select {
			case line, ok := <-c.lines:
				if !ok {
					break drain
				}
				rest = append(rest, line)
			case <-timeout:
				c.t.Errorf("child %d did not exit; killing it", c.pid)
				_ = c.cmd.Process.Kill()
				timeout = nil
			}
		}
		_ = c.cmd.Wait()
	})
	return rest
}

// kill SIGKILLs the child and reaps it.
func (c *child) kill() {
	c.t.Helper()
	require.NoError(c.t, c.cmd.Process.Kill())
	c.wait()
}

// deadPID returns the PID of a child that has exited and been reaped.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = helperEnviron("exit")
	require.NoError(t, cmd.Run())
	return cmd.Process.Pid
}

// bundle is the per-test setup.
type bundle struct {
	dir  string
	path string
	ctx  context.Context
}

func setup(t *testing.T) *bundle {
	t.Helper()
	dir := t.TempDir()
	return &bundle{dir: dir, path: filepath.Join(dir, "belay.lock"), ctx: t.Context()}
}

// fakeClock is a settable clock for expiry tests.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// putRecord writes o to path directly, as another process would.
func putRecord(t *testing.T, path string, o Owner) {
	t.Helper()
	data, err := o.Encode()
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, data, 0o644))
}

// foreignOwner is a record for pid on this host, live for an hour.
func foreignOwner(pid int, startTime string) Owner {
	now := time.Now()
	return Owner{
		Host: hostname(), PID: pid, StartTime: startTime, Nonce: newNonce(),
		Incarnation: "inc_test", Purpose: "test",
		AcquiredAt: now, HeartbeatAt: now, ExpiresAt: now.Add(time.Hour),
	}
}

func envs(kv ...string) []string {
	var out []string
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, kv[i]+"="+kv[i+1])
	}
	return out
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	require.NoError(t, err)
	return n
}
