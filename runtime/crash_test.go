package runtime

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/crashtest"
	"github.com/belayhq/belay/provider"
	"github.com/belayhq/belay/provider/fake"
	"github.com/belayhq/belay/store/fsstore"
)

var runtimeCrashCycles = flag.Int("runtime.crash.cycles", 30, "SIGKILL cycles in TestRuntimeCrashRecovery")

const crashChildEnv = "BELAY_RUNTIME_CRASH_CHILD"

// crashScripts are the behaviours the crash test mixes: plain streams,
// side-effecting tool calls, transient errors, crashes mid-stream, and a
// side effect followed by a crash.
var crashScripts = []string{
	`{"reply":"alpha beta gamma delta","tokens":20,"rate":400}`,
	`{"tokens":10,"rate":200,"steps":[{"kind":"tool","tool":"write","sideEffect":true,"at":5,"duration":"20ms"}]}`,
	`{"tokens":6,"rate":200,"steps":[{"kind":"error","class":"transient","attempts":"1","at":2}]}`,
	`{"tokens":10,"rate":200,"steps":[{"kind":"crash","attempts":"1","at":5}]}`,
	`{"tokens":10,"rate":200,"steps":[{"kind":"tool","tool":"deploy","sideEffect":true,"at":3},{"kind":"crash","attempts":"1","at":6}]}`,
}

func crashProviders(dir string) provider.Registry {
	effects := filepath.Join(dir, "effects")
	return provider.Registry{
		"fake":  fake.New(fake.Options{Name: "fake", Resume: true, EffectsDir: effects}),
		"plain": fake.New(fake.Options{Name: "plain", EffectsDir: effects}),
	}
}

// crashChild runs the runtime under load until killed: it submits runs
// into a few sessions and consumes their deliveries. With DRAIN set it
// submits nothing and exits once every run and delivery is finished.
func crashChild(dir string) {
	ctx := context.Background()
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	st, err := fsstore.Open(ctx, dir, fsstore.Options{LockTTL: 2 * time.Second})
	if err != nil {
		fail(err)
	}
	rt, err := New(Options{
		Store: st, Providers: crashProviders(dir), Limits: Limits{Global: 16},
		Retry:    RetryPolicy{MaxRetries: 3, Base: 5 * time.Millisecond, Max: 20 * time.Millisecond},
		Tiers:    Tiers{AwaitingFirst: 3 * time.Second, Streaming: 3 * time.Second, ToolRunning: 3 * time.Second, AfterTurnEnd: time.Second},
		LeaseTTL: 10 * time.Second, PruneEvery: -1,
	})
	if err != nil {
		fail(err)
	}
	if err := rt.Start(ctx); err != nil {
		fail(err)
	}
	out := bufio.NewWriter(os.Stdout)
	var mu = make(chan struct{}, 1)
	say := func(format string, args ...any) {
		mu <- struct{}{}
		fmt.Fprintf(out, format+"\n", args...)
		_ = out.Flush()
		<-mu
	}
	say("started")
	var exiting atomic.Bool
	go func() { // the agent consuming the inbox
		for {
			got, err := rt.Lease(ctx, "", "agent", 500*time.Millisecond, 10, 50*time.Millisecond)
			if exiting.Load() {
				return
			}
			if err != nil {
				fail(err)
			}
			for _, d := range got {
				_, err := rt.Settle(ctx, d.ID, belay.Settlement{Kind: belay.SettleDone, Epoch: d.Epoch})
				switch {
				case errors.Is(err, belay.ErrLeaseExpired):
					// A slow agent (a loaded machine) lost its lease: the
					// item is redelivered and settled then, still once.
					continue
				case err != nil:
					fail(fmt.Errorf("settle %s: %w", d.ID, err))
				}
				say("settled %s", d.ID)
			}
		}
	}()
	if os.Getenv("DRAIN") != "" {
		for {
			time.Sleep(20 * time.Millisecond)
			runs, err := st.Runs(ctx, belay.RunFilter{})
			if err != nil {
				fail(err)
			}
			ds, err := st.Deliveries(ctx, belay.DeliveryFilter{})
			if err != nil {
				fail(err)
			}
			done := true
			for _, r := range runs {
				done = done && r.Status.Terminal()
			}
			for _, d := range ds {
				done = done && d.Status.Settled()
			}
			if done && rt.Stats().Active == 0 {
				exiting.Store(true)
				_ = rt.Stop(ctx)
				_ = st.Close()
				os.Exit(0)
			}
		}
	}
	cycle := os.Getenv("CYCLE")
	for i := 0; ; i++ {
		prov := "fake"
		if i%2 == 1 {
			prov = "plain"
		}
		sess, err := st.CreateSession(ctx, belay.SessionInput{Provider: prov, IdempotencyKey: fmt.Sprintf("s%d-%s", i%4, prov)})
		if err != nil {
			fail(err)
		}
		run, err := rt.Submit(ctx, SubmitRequest{
			Session: sess.ID, Prompt: "p", Script: json.RawMessage(crashScripts[i%len(crashScripts)]),
			IdempotencyKey: fmt.Sprintf("c%s-%d", cycle, i),
		})
		if err != nil {
			fail(err)
		}
		say("submitted %s", run.ID)
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRuntimeCrashRecovery SIGKILLs a runtime under load at random points
// and restarts it. Finally a run to completion checks that every run
// reached a terminal state, every delivery was settled exactly once, and no
// side-effecting tool call ran twice.
func TestRuntimeCrashRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test")
	}
	t.Parallel()
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 5))
	submitted := map[string]bool{}
	for cycle := 0; cycle < *runtimeCrashCycles; cycle++ {
		child := crashtest.Start(t, crashChildEnv+"="+dir, fmt.Sprintf("CYCLE=%d", cycle))
		if l := child.First(t, fmt.Sprintf("it started (cycle %d)", cycle)); l != "started" {
			child.Kill(t)
			t.Fatalf("cycle %d: child did not start: %q: %s", cycle, l, child.Stderr())
		}
		time.Sleep(time.Duration(30+rng.IntN(250)) * time.Millisecond)
		for _, l := range child.Kill(t) {
			if id, ok := strings.CutPrefix(l, "submitted "); ok {
				submitted[id] = true
			}
		}
		require.NotContains(t, child.Stderr(), "settle", "cycle %d", cycle)
	}
	child := crashtest.Start(t, crashChildEnv+"="+dir, "DRAIN=1")
	done := make(chan error, 1)
	go func() { done <- child.Wait(nil) }()
	select {
	case err := <-done:
		require.NoError(t, err, "drain: %s", child.Stderr())
	case <-time.After(120 * time.Second):
		_ = child.Process().Kill()
		<-done
		t.Fatalf("the runtime did not finish every run: %s", child.Stderr())
	}

	ctx := context.Background()
	st, err := fsstore.Open(ctx, dir, fsstore.Options{})
	require.NoError(t, err)
	defer st.Close()
	runs, err := st.Runs(ctx, belay.RunFilter{})
	require.NoError(t, err)
	byID := map[string]belay.Run{}
	for _, r := range runs {
		byID[r.ID] = r
		require.True(t, r.Status.Terminal(), "run %s is %s/%s", r.ID, r.Status, r.Phase)
		if r.Status == belay.RunFailed {
			require.NotEqual(t, belay.ClassInternal, r.Error.Class, "run %s: %s", r.ID, r.Reason)
		}
	}
	for id := range submitted {
		require.Contains(t, byID, id, "an acknowledged submit was lost")
	}
	// Every delivery settled exactly once.
	sessions, err := st.Sessions(ctx, belay.SessionFilter{})
	require.NoError(t, err)
	settled := map[string]int{}
	for _, sess := range sessions {
		require.NotEqual(t, belay.SessionQuarantined, sess.State, sess.Problem)
		evs, err := st.Events(ctx, sess.ID, 0, 0)
		require.NoError(t, err)
		for _, e := range evs {
			if e.Type == belay.EventDeliverySettled {
				var p struct{ ID, Kind string }
				require.NoError(t, json.Unmarshal(e.Data, &p))
				if p.Kind == "done" {
					settled[p.ID]++
				}
			}
		}
	}
	ds, err := st.Deliveries(ctx, belay.DeliveryFilter{})
	require.NoError(t, err)
	for _, d := range ds {
		require.Equal(t, belay.DeliveryDone, d.Status)
		require.Equal(t, 1, settled[d.ID], "delivery %s settled %d times", d.ID, settled[d.ID])
	}
	// No side effect ran twice.
	effects, err := fake.ReadEffects(filepath.Join(dir, "effects"))
	require.NoError(t, err)
	seen := map[string]int{}
	for _, e := range effects {
		seen[e.Run+"/"+e.Call]++
	}
	for k, n := range seen {
		require.Equal(t, 1, n, "side effect %s ran %d times", k, n)
	}
	var complete, stranded int
	for _, r := range runs {
		switch r.Status {
		case belay.RunComplete:
			complete++
		case belay.RunStranded:
			stranded++
		}
	}
	t.Logf("%d cycles: %d runs (%d complete, %d stranded), %d deliveries, %d side effects", *runtimeCrashCycles, len(runs), complete, stranded, len(ds), len(effects))
}
