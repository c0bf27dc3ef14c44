package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/client"
	"github.com/belayhq/belay/store/fsstore"
)

// startServe starts `belay serve` as a child process (the test binary
// under the name belay) and waits until it answers.
func startServe(t *testing.T, bin, dir string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--data", dir)
	logf, err := os.OpenFile(filepath.Join(dir, "serve.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	require.NoError(t, err)
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	require.NoError(t, cmd.Start())
	c := client.New(client.Options{Socket: filepath.Join(dir, "belay.sock")})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := c.Health(context.Background()); err == nil {
			return cmd
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatal("the daemon did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestDaemonCrashWithWatchers starts 50 concurrent fake runs lasting
// seconds with a watcher each, SIGKILLs the daemon mid-way and restarts it,
// and checks that every run ends, every watcher saw every event of its
// session exactly once and in order, and no delivery was settled twice.
func TestDaemonCrashWithWatchers(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test")
	}
	t.Parallel()
	dir := t.TempDir()
	bin := filepath.Join(t.TempDir(), "belay")
	require.NoError(t, os.Symlink(os.Args[0], bin))
	daemon := startServe(t, bin, dir)
	defer func() { _ = daemon.Process.Kill(); _ = daemon.Wait() }()

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := client.New(client.Options{Socket: filepath.Join(dir, "belay.sock")})
	const n = 50
	runs := make([]apitype.Run, n)
	for i := range runs {
		script := json.RawMessage(fmt.Sprintf(`{"reply":"run %d says one two three four five six seven eight","tokens":16,"rate":%d}`, i, 6+i%5))
		r, err := c.CreateRun(ctx, apitype.CreateRunRequest{Provider: "fake", Prompt: "p", Script: script}, fmt.Sprintf("k%d", i))
		require.NoError(t, err)
		runs[i] = r
	}

	// A watcher per run, following its session from the start.
	seen := make([][]uint64, n)
	var wg sync.WaitGroup
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := c.Follow(ctx, runs[i].Session, 0, client.FollowOptions{MaxBackoff: 200 * time.Millisecond}, func(ev belay.Event) error {
				seen[i] = append(seen[i], ev.Seq)
				if ev.Type == belay.EventRunUpdated && ev.Run == runs[i].ID {
					var d struct{ Phase belay.RunPhase }
					_ = json.Unmarshal(ev.Data, &d)
					if d.Phase.Status().Terminal() {
						return client.ErrStop
					}
				}
				return nil
			})
			if err != nil {
				t.Errorf("watcher %d: %v", i, err)
			}
		}()
	}
	// An agent settling the deliveries.
	agentCtx, stopAgent := context.WithCancel(ctx)
	var agent sync.WaitGroup
	agent.Add(1)
	go func() {
		defer agent.Done()
		for agentCtx.Err() == nil {
			ds, err := c.Lease(agentCtx, apitype.LeaseRequest{Owner: "agent", TTL: apitype.Duration(2 * time.Second), Max: 10, Wait: apitype.Duration(200 * time.Millisecond)})
			if err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			for _, d := range ds {
				_, _ = c.Settle(agentCtx, d.ID, apitype.SettleRequest{Kind: belay.SettleDone, Epoch: d.Epoch})
			}
		}
	}()

	time.Sleep(800 * time.Millisecond)
	require.NoError(t, daemon.Process.Signal(syscall.SIGKILL))
	_ = daemon.Wait()
	time.Sleep(200 * time.Millisecond)
	daemon = startServe(t, bin, dir)

	wg.Wait()
	for i := range runs {
		r, err := c.WaitRun(ctx, runs[i].ID, 30*time.Second)
		require.NoError(t, err)
		require.Equal(t, belay.RunComplete, r.Status, "run %d: %s", i, r.Reason)
	}
	// Let the agent drain the inbox, then stop it.
	require.Eventually(t, func() bool {
		ds, err := c.Inbox(ctx, runs[0].Session, belay.DeliveryPending)
		return err == nil && len(ds) == 0
	}, 30*time.Second, 50*time.Millisecond)
	time.Sleep(500 * time.Millisecond)
	stopAgent()
	agent.Wait()
	require.NoError(t, daemon.Process.Signal(syscall.SIGTERM))
	require.NoError(t, daemon.Wait())

	st, err := fsstore.Open(context.Background(), dir, fsstore.Options{ReadOnly: true})
	require.NoError(t, err)
	defer st.Close()
	for i, r := range runs {
		evs, err := st.Events(context.Background(), r.Session, 0, 0)
		require.NoError(t, err)
		// The watcher saw 1, 2, 3, ... up to the run's end: each once, in order.
		for k, seq := range seen[i] {
			require.Equal(t, uint64(k+1), seq, "watcher %d", i)
		}
		require.Equal(t, evs[len(seen[i])-1].Seq, seen[i][len(seen[i])-1])
		settled := map[string]int{}
		for _, e := range evs {
			if e.Type == belay.EventDeliverySettled {
				var d struct{ ID string }
				require.NoError(t, json.Unmarshal(e.Data, &d))
				settled[d.ID]++
			}
		}
		for id, k := range settled {
			require.Equal(t, 1, k, "delivery %s settled %d times", id, k)
		}
	}
}

// TestSIGKILLAtPeakThroughput SIGKILLs the daemon while 16 submitters push
// no-op runs as fast as it takes them, restarts it, and checks that no
// acknowledged submit is lost, no completion a client saw is taken back
// (same end time), and no idempotency key made two runs (issue 15).
func TestSIGKILLAtPeakThroughput(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test")
	}
	t.Parallel()
	dir := t.TempDir()
	bin := filepath.Join(t.TempDir(), "belay")
	require.NoError(t, os.Symlink(os.Args[0], bin))
	daemon := startServe(t, bin, dir)
	defer func() { _ = daemon.Process.Kill(); _ = daemon.Wait() }()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := client.New(client.Options{Socket: filepath.Join(dir, "belay.sock")})

	const sessions, submitters = 100, 16
	sess := make([]string, sessions)
	for i := range sess {
		s, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Provider: "fake"}, "")
		require.NoError(t, err)
		sess[i] = s.ID
	}
	loadCtx, stopLoad := context.WithCancel(ctx)
	var (
		mu    sync.Mutex
		acked = map[string]string{} // idempotency key -> run
		ended = map[string]time.Time{}
		next  atomic.Int64
		peak  = make(chan struct{})
		once  sync.Once
	)
	var wg sync.WaitGroup
	for range submitters {
		wg.Go(func() {
			for loadCtx.Err() == nil {
				i := next.Add(1)
				key := fmt.Sprintf("peak-%d", i)
				r, err := c.CreateRun(loadCtx, apitype.CreateRunRequest{Session: sess[i%sessions], Prompt: "ok", Script: json.RawMessage(`{"reply":"ok","tokens":1}`)}, key)
				if err != nil {
					return // the daemon is gone: this submit was never acknowledged
				}
				mu.Lock()
				acked[key] = r.ID
				mu.Unlock()
			}
		})
	}
	// A client watching completions as they happen.
	wg.Go(func() {
		for loadCtx.Err() == nil {
			page, err := c.ListRuns(loadCtx, apitype.RunQuery{RunFilter: belay.RunFilter{Status: belay.RunComplete}, Limit: 1000})
			if err != nil {
				return
			}
			mu.Lock()
			for _, r := range page.Runs {
				ended[r.ID] = r.EndedAt
			}
			if len(acked) >= 400 && len(ended) >= 150 {
				once.Do(func() { close(peak) })
			}
			mu.Unlock()
		}
	})
	select {
	case <-peak:
	case <-ctx.Done():
		t.Fatal("the load never reached its peak")
	}
	require.NoError(t, daemon.Process.Signal(syscall.SIGKILL))
	_ = daemon.Wait()
	stopLoad()
	wg.Wait()
	daemon = startServe(t, bin, dir)

	mu.Lock()
	defer mu.Unlock()
	t.Logf("killed at %d acknowledged submits, %d completions seen", len(acked), len(ended))
	for key, id := range acked {
		r, err := c.WaitRun(ctx, id, time.Minute)
		require.NoError(t, err, "acknowledged run %s (key %s)", id, key)
		require.Equal(t, belay.RunComplete, r.Status, "run %s: %s", id, r.Reason)
		require.Equal(t, key, r.IdempotencyKey)
	}
	for id, at := range ended {
		r, err := c.Run(ctx, id)
		require.NoError(t, err)
		require.Equal(t, belay.RunComplete, r.Status)
		require.True(t, at.Equal(r.EndedAt), "run %s: the completion a client saw at %s was taken back (now %s)", id, at, r.EndedAt)
	}
	byKey := map[string]int{}
	for _, s := range sess {
		runs, err := c.Runs(ctx, s)
		require.NoError(t, err)
		for _, r := range runs {
			byKey[r.IdempotencyKey]++
		}
	}
	for key, n := range byKey {
		require.Equal(t, 1, n, "idempotency key %s made %d runs", key, n)
	}
	require.NoError(t, daemon.Process.Signal(syscall.SIGTERM))
	require.NoError(t, daemon.Wait())
}
