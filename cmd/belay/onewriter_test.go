package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/client"
	"github.com/belayhq/belay/journal"
	"github.com/belayhq/belay/lock"
	"github.com/belayhq/belay/store/fsstore"
)

// oneWriter is a data directory with a daemon running as a child process,
// runs streaming in it, and a watcher per run recording every event it was
// shown (an event a watcher saw is acknowledged: it was durable).
type oneWriter struct {
	t      *testing.T
	dir    string
	bin    string
	daemon *exec.Cmd
	c      *client.Client
	runs   []apitype.Run

	mu   sync.Mutex
	seen map[string][]belay.Event // session -> events seen, in order
	wg   sync.WaitGroup
}

// startOneWriter starts a daemon with a short lock TTL and n fake runs that
// stream for a few seconds, each followed by a watcher.
func startOneWriter(t *testing.T, ttl string, n int) *oneWriter {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.toml"), []byte("[store]\nlock_ttl = \""+ttl+"\"\n"), 0o600))
	bin := filepath.Join(t.TempDir(), "belay")
	require.NoError(t, os.Symlink(os.Args[0], bin))
	w := &oneWriter{t: t, dir: dir, bin: bin, seen: map[string][]belay.Event{}}
	w.daemon = startServe(t, bin, dir)
	t.Cleanup(func() {
		_ = w.daemon.Process.Signal(syscall.SIGCONT)
		_ = w.daemon.Process.Kill()
		_ = w.daemon.Wait()
	})
	w.c = client.New(client.Options{Socket: filepath.Join(dir, "belay.sock")})
	ctx := t.Context()
	for i := range n {
		script := json.RawMessage(fmt.Sprintf(`{"reply":"run %d: one two three four five six seven eight nine ten eleven twelve","tokens":24,"rate":8}`, i))
		r, err := w.c.CreateRun(ctx, apitype.CreateRunRequest{Provider: "fake", Prompt: "p", Script: script}, fmt.Sprintf("k%d", i))
		require.NoError(t, err)
		w.runs = append(w.runs, r)
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			err := w.c.Follow(ctx, r.Session, 0, client.FollowOptions{MaxBackoff: 100 * time.Millisecond}, func(ev belay.Event) error {
				w.mu.Lock()
				w.seen[r.Session] = append(w.seen[r.Session], ev)
				w.mu.Unlock()
				if ev.Type == belay.EventRunUpdated && ev.Run == r.ID {
					var d struct{ Phase belay.RunPhase }
					_ = json.Unmarshal(ev.Data, &d)
					if d.Phase.Status().Terminal() {
						return client.ErrStop
					}
				}
				return nil
			})
			if err != nil && ctx.Err() == nil {
				t.Errorf("watcher of %s: %v", r.ID, err)
			}
		}()
	}
	// Wait until every run streams, so the faults hit writers mid-answer.
	require.Eventually(t, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, r := range w.runs {
			if !hasText(w.seen[r.Session]) {
				return false
			}
		}
		return true
	}, time.Minute, 10*time.Millisecond)
	return w
}

func hasText(evs []belay.Event) bool {
	for _, e := range evs {
		if e.Type == "run.text" {
			return true
		}
	}
	return false
}

// stopUntilHung SIGSTOPs the daemon and waits until its lock's TTL passed
// without a heartbeat, so that it is judged hung. It returns its PID.
func (w *oneWriter) stopUntilHung() int {
	w.t.Helper()
	require.NoError(w.t, w.daemon.Process.Signal(syscall.SIGSTOP))
	lockPath := filepath.Join(w.dir, fsstore.LockName)
	require.Eventually(w.t, func() bool {
		st, err := lock.Inspect(lockPath, lock.Options{})
		return err == nil && st.Reason == lock.ReasonHung
	}, time.Minute, 20*time.Millisecond, "the stopped daemon is judged hung once its TTL passed")
	return w.daemon.Process.Pid
}

// secondServe runs another `belay serve` on the same directory and returns
// its exit error and output: it must refuse to start.
func (w *oneWriter) secondServe() (error, string) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(w.t.Context(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, w.bin, "serve", "--data", w.dir).CombinedOutput()
	return err, string(out)
}

// finish waits for every run and watcher, stops the daemon, and checks the
// journals: each verifies (no torn tail, no damage), and every event a
// watcher saw is on disk with the same seq, type and data.
func (w *oneWriter) finish() {
	t := w.t
	ctx := t.Context()
	for _, r := range w.runs {
		got, err := w.c.WaitRun(ctx, r.ID, time.Minute)
		require.NoError(t, err)
		require.Equal(t, belay.RunComplete, got.Status, "run %s: %s", r.ID, got.Reason)
	}
	w.wg.Wait()
	require.NoError(t, w.daemon.Process.Signal(syscall.SIGTERM))
	require.NoError(t, w.daemon.Wait())
	require.NoFileExists(t, filepath.Join(w.dir, "belay.sock"), "the daemon removed its own socket")

	for _, r := range w.runs {
		j, err := journal.Open(filepath.Join(w.dir, fsstore.SessionsName, r.Session), journal.Options{ReadOnly: true})
		require.NoError(t, err, "session %s verifies", r.Session)
		require.EqualValues(t, -1, j.Recovery().TornAt, "no torn tail in %s", r.Session)
		evs, err := j.Read(0, 0)
		require.NoError(t, err)
		require.NoError(t, j.Close())
		seen := w.seen[r.Session]
		require.NotEmpty(t, seen)
		for i, e := range evs {
			require.Equal(t, uint64(i+1), e.Seq, "gap-free")
		}
		for _, s := range seen {
			require.LessOrEqual(t, s.Seq, uint64(len(evs)))
			d := evs[s.Seq-1]
			require.Equal(t, s.Type, d.Type, "acknowledged seq %d intact", s.Seq)
			require.JSONEq(t, string(s.Data), string(d.Data), "acknowledged seq %d intact", s.Seq)
		}
	}
}

// TestStoppedDaemonIsNeverReplaced: SIGSTOP the daemon mid-answer for
// longer than its lock TTL while a second daemon starts. The second one
// refuses, naming the stopped holder and how to resume it; after SIGCONT
// the first one proves its hold again, finishes every run, and the journals
// verify with every acknowledged event intact.
func TestStoppedDaemonIsNeverReplaced(t *testing.T) {
	if testing.Short() {
		t.Skip("child-process fault test")
	}
	t.Parallel()
	w := startOneWriter(t, "600ms", 8)
	pid := w.stopUntilHung()

	err, out := w.secondServe()
	require.Error(t, err, "a second daemon must not start: %s", out)
	require.Contains(t, out, fmt.Sprintf("pid %d", pid))
	require.Contains(t, out, fmt.Sprintf("kill -CONT %d", pid))
	sock, serr := os.Lstat(filepath.Join(w.dir, "belay.sock"))
	require.NoError(t, serr, "the refused daemon left the owner's socket alone")

	require.NoError(t, w.daemon.Process.Signal(syscall.SIGCONT))
	h, herr := w.c.Health(t.Context())
	require.NoError(t, herr, "the owner is reachable again")
	require.Equal(t, pid, h.PID)
	now, _ := os.Lstat(filepath.Join(w.dir, "belay.sock"))
	require.True(t, os.SameFile(sock, now))
	w.finish()
}

// TestStopHungDaemon: `belay daemon status` names a stopped daemon and the
// way out; `belay daemon stop` (what doctor suggests) ends it gracefully;
// the next daemon resumes every run.
func TestStopHungDaemon(t *testing.T) {
	if testing.Short() {
		t.Skip("child-process fault test")
	}
	t.Parallel()
	w := startOneWriter(t, "600ms", 2)
	pid := w.stopUntilHung()

	status := exec.Command(w.bin, "daemon", "status", "--data", w.dir)
	out, err := status.CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "%s", out)
	require.Equal(t, 6, ee.ExitCode(), "%s", out)
	require.Contains(t, string(out), fmt.Sprintf("kill -CONT %d (resume it), or belay daemon stop", pid))

	stop := exec.Command(w.bin, "daemon", "stop", "--data", w.dir)
	out, err = stop.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), fmt.Sprintf("daemon stopped (pid %d)", pid))
	require.NoError(t, w.daemon.Wait(), "a graceful stop")

	w.daemon = startServe(t, w.bin, w.dir)
	w.finish()
}

// TestRacingAutostartsNameTheRunningDaemon: two commands that find no
// daemon start one each at the same moment; one daemon wins, and both
// commands name the PID of the daemon that actually runs.
func TestRacingAutostartsNameTheRunningDaemon(t *testing.T) {
	if testing.Short() {
		t.Skip("child-process test")
	}
	t.Parallel()
	dir := t.TempDir()
	bin := filepath.Join(t.TempDir(), "belay")
	require.NoError(t, os.Symlink(os.Args[0], bin))
	t.Cleanup(func() { stopDaemon(dir) })
	outs := make([]string, 2)
	var wg sync.WaitGroup
	for i := range outs {
		wg.Go(func() {
			cmd := exec.Command(bin, "send", "--provider", "fake", "--json", "--data", dir, "hi")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Errorf("command %d: %v: %s", i, err, out)
			}
			outs[i] = string(out)
		})
	}
	wg.Wait()
	pid := daemonPID(dir)
	require.NotZero(t, pid)
	for i, out := range outs {
		// Each says it started the daemon or uses the one another started;
		// either way the PID is the one that holds the lock.
		if strings.Contains(out, "daemon") {
			require.Contains(t, out, fmt.Sprintf("(pid %d", pid), "command %d: %s", i, out)
		}
	}
	require.NoFileExists(t, filepath.Join(dir, "belay.lock.reclaim"))
}
