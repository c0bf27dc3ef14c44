package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/clock"
	"github.com/belayhq/belay/provider"
	"github.com/belayhq/belay/store/fsstore"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		crashChild(dir)
		return
	}
	goleak.VerifyTestMain(m)
}

// funcProvider is a provider whose behaviour is a Go function.
type funcProvider struct {
	name  string
	caps  provider.Capabilities
	run   func(ctx context.Context, req provider.Request, emit func(provider.Event) error) error
	calls atomic.Int32
}

func (p *funcProvider) Name() string                        { return p.name }
func (p *funcProvider) Capabilities() provider.Capabilities { return p.caps }
func (p *funcProvider) Run(ctx context.Context, req provider.Request, emit func(provider.Event) error) error {
	p.calls.Add(1)
	return p.run(ctx, req, emit)
}

func echo(ctx context.Context, req provider.Request, emit func(provider.Event) error) error {
	if err := emit(provider.Event{Kind: provider.TextDelta, Text: req.Prompt}); err != nil {
		return err
	}
	return emit(provider.Event{Kind: provider.TurnEnd, StopReason: "end_turn"})
}

func hang(ctx context.Context, _ provider.Request, _ func(provider.Event) error) error {
	<-ctx.Done()
	return ctx.Err()
}

type bundle struct {
	sleeps chan time.Duration
	t      *testing.T
	dir    string
	clk    *clock.Fake
	st     *fsstore.Store
	rt     *Runtime
	opts   Options
	provs  provider.Registry
}

func setup(t *testing.T, opts Options, provs ...provider.Provider) *bundle {
	t.Helper()
	b := &bundle{t: t, dir: t.TempDir(), clk: clock.NewFake(t0), provs: provider.Registry{}, sleeps: make(chan time.Duration, 16)}
	for _, p := range provs {
		b.provs[p.Name()] = p
	}
	opts.Providers = b.provs
	opts.Clock = b.clk
	opts.PruneEvery = -1
	b.opts = opts
	b.start()
	t.Cleanup(func() { b.stop() })
	return b
}

func (b *bundle) start() {
	b.t.Helper()
	st, err := fsstore.Open(context.Background(), b.dir, fsstore.Options{Clock: b.clk})
	require.NoError(b.t, err)
	b.st = st
	opts := b.opts
	opts.Store = st
	opts.Incarnation = ""
	rt, err := New(opts)
	require.NoError(b.t, err)
	rt.sleepHook = func(_ string, d time.Duration) { b.sleeps <- d }
	b.rt = rt
	require.NoError(b.t, rt.Start(context.Background()))
}

// stop stops the runtime as a daemon would on SIGTERM.
func (b *bundle) stop() {
	if b.rt == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(b.t, b.rt.Stop(ctx))
	require.NoError(b.t, b.st.Close())
	b.rt = nil
}

func (b *bundle) restart() {
	b.stop()
	b.start()
}

func (b *bundle) submit(req SubmitRequest) belay.Run {
	b.t.Helper()
	run, err := b.rt.Submit(context.Background(), req)
	require.NoError(b.t, err)
	return run
}

// waitRun waits (in real time) until the run satisfies cond.
func (b *bundle) waitRun(id string, cond func(belay.Run) bool) belay.Run {
	b.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		run, err := b.st.Run(context.Background(), id)
		require.NoError(b.t, err)
		if cond(run) {
			return run
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("run %s stuck in %s/%s (%s)", id, run.Status, run.Phase, run.Reason)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (b *bundle) waitStatus(id string, st belay.RunStatus) belay.Run {
	b.t.Helper()
	return b.waitRun(id, func(r belay.Run) bool { return r.Status == st })
}

// waitIdle waits until the runner of run id is blocked (a timer pending or
// the provider waiting), then advances the clock by d.
func (b *bundle) advanceWhen(d time.Duration, ready func() bool) {
	b.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !ready() {
		if time.Now().After(deadline) {
			b.t.Fatal("condition before advancing the clock never held")
		}
		time.Sleep(time.Millisecond)
	}
	b.clk.Advance(d)
}

// waitDelivery waits for the first delivery of a session.
func (b *bundle) waitDelivery(session string) belay.Delivery {
	b.t.Helper()
	var ds []belay.Delivery
	waitFor(b.t, func() bool {
		var err error
		ds, err = b.st.Deliveries(context.Background(), belay.DeliveryFilter{Session: session})
		require.NoError(b.t, err)
		return len(ds) > 0
	})
	return ds[0]
}

// sleeping waits until a runner started a backoff wait and returns its length.
func (b *bundle) sleeping() time.Duration {
	b.t.Helper()
	select {
	case d := <-b.sleeps:
		return d
	case <-time.After(20 * time.Second):
		b.t.Fatal("no backoff wait started")
		return 0
	}
}

func (b *bundle) events(session string) []belay.Event {
	b.t.Helper()
	evs, err := b.st.Events(context.Background(), session, 0, 0)
	require.NoError(b.t, err)
	return evs
}

func types(evs []belay.Event, run string) []string {
	var out []string
	for _, e := range evs {
		if e.Run == run && e.Type != belay.EventRunRenewed {
			out = append(out, e.Type)
		}
	}
	return out
}

func countType(evs []belay.Event, typ string) int {
	n := 0
	for _, e := range evs {
		if e.Type == typ {
			n++
		}
	}
	return n
}

func TestRunCompletesAndPostsItsDelivery(t *testing.T) {
	t.Parallel()
	p := &funcProvider{name: "echo", run: echo}
	b := setup(t, Options{}, p)
	run := b.submit(SubmitRequest{Provider: "echo", Prompt: "hello"})
	run = b.waitStatus(run.ID, belay.RunComplete)
	require.Equal(t, belay.PhaseComplete, run.Phase)
	require.Equal(t, 1, run.Attempt)
	require.Nil(t, run.Lease)
	evs := b.events(run.Session)
	require.Equal(t, []string{
		belay.EventRunCreated, belay.EventRunLeased, belay.EventRunUpdated,
		belay.EventRunUpdated, belay.EventRunText, belay.EventRunUpdated, belay.EventRunUpdated,
	}, types(evs, run.ID))
	last := evs[len(evs)-1]
	require.Equal(t, belay.EventDeliveryPosted, last.Type, "the delivery is posted with the end, in one write")
	require.Equal(t, run.ID, evs[len(evs)-2].Run)
	var text belay.TextData
	for _, e := range evs {
		if e.Type == belay.EventRunText {
			require.NoError(t, json.Unmarshal(e.Data, &text))
		}
	}
	require.Equal(t, "hello", text.Text)
	d := b.waitDelivery(run.Session)
	require.Equal(t, belay.DeliveryRunCompleted, d.Type)
	require.Equal(t, run.ID, d.Key)
}

// TestPostRefusesTheOutcomeTypes: only the runtime posts the notices of a
// run's end; retention tells them apart by type.
func TestPostRefusesTheOutcomeTypes(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{}, &funcProvider{name: "echo", run: echo})
	run := b.submit(SubmitRequest{Provider: "echo", Prompt: "hello"})
	for _, typ := range []string{belay.DeliveryRunCompleted, belay.DeliveryRunFailed, belay.DeliveryRunStranded} {
		_, _, err := b.rt.Post(context.Background(), belay.DeliveryInput{Session: run.Session, Type: typ, Key: "mine"})
		require.ErrorIs(t, err, belay.ErrInvalid, typ)
	}
	_, created, err := b.rt.Post(context.Background(), belay.DeliveryInput{Session: run.Session, Type: "review.request", Key: "mine"})
	require.NoError(t, err)
	require.True(t, created)
}

// TestSubmitLeasesWhenNothingWaits: a follow-up submitted while nothing
// waits comes back leased to this runtime and running (one durable write,
// store.SubmitInput.Claim); one submitted while the cap is full comes
// back queued and is claimed once the cap frees.
func TestSubmitLeasesWhenNothingWaits(t *testing.T) {
	t.Parallel()
	g := newGate("slow")
	b := setup(t, Options{Limits: Limits{Global: 1}}, &funcProvider{name: "echo", run: echo}, g)
	first := b.waitStatus(b.submit(SubmitRequest{Provider: "echo", Prompt: "a"}).ID, belay.RunComplete)
	next := b.submit(SubmitRequest{Session: first.Session, Prompt: "b"})
	require.Equal(t, belay.RunRunning, next.Status, "leased as it was submitted")
	require.NotNil(t, next.Lease)
	require.Equal(t, b.rt.Incarnation(), next.Lease.Owner)
	next = b.waitStatus(next.ID, belay.RunComplete)
	require.Equal(t, []string{
		belay.EventRunCreated, belay.EventRunLeased, belay.EventRunUpdated,
		belay.EventRunUpdated, belay.EventRunText, belay.EventRunUpdated, belay.EventRunUpdated,
	}, types(b.events(next.Session), next.ID))

	slow := b.submit(SubmitRequest{Provider: "slow", Prompt: "c"})
	waitFor(t, func() bool { return len(g.running()) == 1 })
	capped := b.submit(SubmitRequest{Session: first.Session, Prompt: "d"})
	require.Equal(t, belay.RunQueued, capped.Status, "the global cap of 1 is taken")
	g.release(slow.ID)
	b.waitStatus(capped.ID, belay.RunComplete)
}

func TestSubmitIsIdempotent(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{}, &funcProvider{name: "echo", run: echo})
	req := SubmitRequest{Provider: "echo", Prompt: "x", IdempotencyKey: "k"}
	a := b.submit(req)
	b.waitStatus(a.ID, belay.RunComplete)
	again := b.submit(req)
	require.Equal(t, a.ID, again.ID)
	require.Equal(t, a.Session, again.Session)
	sessions, err := b.st.Sessions(context.Background(), belay.SessionFilter{})
	require.NoError(t, err)
	require.Len(t, sessions, 1)
}

// TestSubmitToADeletedSession: a submit reads a session it knows from
// memory (what it needs never changes), but a session deleted since is
// still refused, by the store's submit, and so is its batch.
func TestSubmitToADeletedSession(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{}, &funcProvider{name: "echo", run: echo}, &funcProvider{name: "echo2", run: echo})
	first := b.submit(SubmitRequest{Provider: "echo", Prompt: "one"})
	b.waitStatus(first.ID, belay.RunComplete)
	second := b.submit(SubmitRequest{Session: first.Session, Prompt: "two"})
	b.waitStatus(second.ID, belay.RunComplete)
	require.NoError(t, b.st.DeleteSession(context.Background(), first.Session, true))
	_, err := b.rt.Submit(context.Background(), SubmitRequest{Session: first.Session, Prompt: "three"})
	require.ErrorIs(t, err, belay.ErrNotFound)
	_, errs := b.rt.SubmitBatch(context.Background(), []SubmitRequest{{Session: first.Session, Prompt: "four"}})
	require.ErrorIs(t, errs[0], belay.ErrNotFound)

	// A session deleted through the runtime is forgotten: the store lets
	// a caller create one with the same id again, for another provider.
	third := b.submit(SubmitRequest{Provider: "echo", Prompt: "five"})
	b.waitStatus(third.ID, belay.RunComplete)
	require.NoError(t, b.rt.DeleteSession(context.Background(), third.Session, true))
	_, err = b.st.CreateSession(context.Background(), belay.SessionInput{ID: third.Session, Provider: "echo2"})
	require.NoError(t, err)
	again := b.submit(SubmitRequest{Session: third.Session, Prompt: "six"})
	require.Equal(t, "echo2", again.Provider)
	b.waitStatus(again.ID, belay.RunComplete)
}

func TestSubmitErrors(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{}, &funcProvider{name: "echo", run: echo})
	_, err := b.rt.Submit(context.Background(), SubmitRequest{Provider: "nope"})
	require.ErrorIs(t, err, belay.ErrInvalid)
	_, err = b.rt.Submit(context.Background(), SubmitRequest{Provider: "echo", Policy: "sometimes"})
	require.ErrorIs(t, err, belay.ErrInvalid)
	_, err = b.rt.Submit(context.Background(), SubmitRequest{Session: "ses_nope"})
	require.ErrorIs(t, err, belay.ErrInvalid)
}

// gate is a provider that blocks each run until released.
type gate struct {
	funcProvider
	mu      sync.Mutex
	active  map[string]chan struct{}
	maxSeen int
}

func newGate(name string) *gate {
	g := &gate{active: map[string]chan struct{}{}}
	g.name = name
	g.run = func(ctx context.Context, req provider.Request, emit func(provider.Event) error) error {
		ch := make(chan struct{})
		g.mu.Lock()
		g.active[req.Run] = ch
		g.maxSeen = max(g.maxSeen, len(g.active))
		g.mu.Unlock()
		defer func() { g.mu.Lock(); delete(g.active, req.Run); g.mu.Unlock() }()
		if err := emit(provider.Event{Kind: provider.TextDelta, Text: "working"}); err != nil {
			return err
		}
		select {
		case <-ch:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return g
}

func (g *gate) running() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var ids []string
	for id := range g.active {
		ids = append(ids, id)
	}
	return ids
}

func (g *gate) release(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if ch, ok := g.active[id]; ok {
		close(ch)
		delete(g.active, id)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition never held")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestAdmissionCapsAndPromotion(t *testing.T) {
	t.Parallel()
	g := newGate("slow")
	b := setup(t, Options{Limits: Limits{Global: 2}}, g)
	var runs []belay.Run
	for i := 0; i < 5; i++ {
		runs = append(runs, b.submit(SubmitRequest{Provider: "slow", Prompt: fmt.Sprint(i)}))
	}
	waitFor(t, func() bool { return len(g.running()) == 2 })
	require.Equal(t, Stats{Active: 2, Queued: 3}, b.rt.Stats())
	for done := 0; done < 5; done++ {
		waitFor(t, func() bool { return len(g.running()) == min(2, 5-done) })
		g.release(g.running()[0])
	}
	for _, r := range runs {
		b.waitStatus(r.ID, belay.RunComplete)
	}
	require.Equal(t, 2, g.maxSeen, "the global cap is never exceeded")
}

func TestFollowUpPolicies(t *testing.T) {
	t.Parallel()
	g := newGate("slow")
	b := setup(t, Options{}, g)
	first := b.submit(SubmitRequest{Provider: "slow", Prompt: "1"})
	waitFor(t, func() bool { return len(g.running()) == 1 })
	queued := b.submit(SubmitRequest{Session: first.Session, Prompt: "2"})
	require.Equal(t, belay.RunQueued, queued.Status, "one active run per conversation")

	_, err := b.rt.Submit(context.Background(), SubmitRequest{Session: first.Session, Prompt: "3", Policy: belay.PolicyReject})
	require.ErrorIs(t, err, ErrConversationBusy)

	replacing := b.submit(SubmitRequest{Session: first.Session, Prompt: "4", Policy: belay.PolicyReplace})
	b.waitStatus(queued.ID, belay.RunCancelled)

	interrupting := b.submit(SubmitRequest{Session: first.Session, Prompt: "5", Policy: belay.PolicyInterrupt})
	cancelled := b.waitStatus(first.ID, belay.RunCancelled)
	require.Contains(t, cancelled.Reason, interrupting.ID)
	waitFor(t, func() bool { r := g.running(); return len(r) == 1 && r[0] == interrupting.ID })
	g.release(interrupting.ID)
	b.waitStatus(interrupting.ID, belay.RunComplete)
	waitFor(t, func() bool { r := g.running(); return len(r) == 1 && r[0] == replacing.ID })
	g.release(replacing.ID)
	b.waitStatus(replacing.ID, belay.RunComplete)
}

func TestCancel(t *testing.T) {
	t.Parallel()
	g := newGate("slow")
	b := setup(t, Options{}, g)
	active := b.submit(SubmitRequest{Provider: "slow", Prompt: "1"})
	waitFor(t, func() bool { return len(g.running()) == 1 })
	queued := b.submit(SubmitRequest{Session: active.Session, Prompt: "2"})
	got, err := b.rt.Cancel(context.Background(), queued.ID, "")
	require.NoError(t, err)
	require.Equal(t, belay.RunCancelled, got.Status)
	got, err = b.rt.Cancel(context.Background(), active.ID, "user pressed stop")
	require.NoError(t, err)
	require.Equal(t, belay.RunCancelled, got.Status)
	require.Equal(t, belay.ClassCancelled, got.Error.Class)
	require.Equal(t, "user pressed stop", got.Reason)
	_, err = b.rt.Cancel(context.Background(), active.ID, "")
	require.NoError(t, err, "cancelling a cancelled run is a no-op")
	done := b.submit(SubmitRequest{Session: active.Session, Prompt: "3"})
	waitFor(t, func() bool { return len(g.running()) == 1 })
	g.release(done.ID)
	b.waitStatus(done.ID, belay.RunComplete)
	_, err = b.rt.Cancel(context.Background(), done.ID, "")
	require.ErrorIs(t, err, belay.ErrTerminal)
}

func pendingTimers(b *bundle, n int) func() bool {
	return func() bool { return b.clk.Pending() >= n }
}

func TestDeadlineFailsTheRun(t *testing.T) {
	t.Parallel()
	var emitted atomic.Int64
	p := &funcProvider{name: "hang", run: func(ctx context.Context, req provider.Request, emit func(provider.Event) error) error {
		// Stream forever: the watchdog never fires, only the deadline.
		for {
			if err := emit(provider.Event{Kind: provider.TextDelta, Text: "."}); err != nil {
				return err
			}
			emitted.Add(1)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Millisecond):
			}
		}
	}}
	b := setup(t, Options{}, p)
	run := b.submit(SubmitRequest{Provider: "hang", Deadline: 10 * time.Minute})
	b.waitRun(run.ID, func(r belay.Run) bool { return r.Phase == belay.PhaseStreaming })
	for i := 0; i < 11; i++ {
		n := emitted.Load()
		b.clk.Advance(time.Minute)
		// A token after each minute keeps the watchdog happy, until the
		// deadline ends the run.
		waitFor(t, func() bool {
			if emitted.Load() > n {
				return true
			}
			r, err := b.st.Run(context.Background(), run.ID)
			return err == nil && r.Status.Terminal()
		})
	}
	run = b.waitStatus(run.ID, belay.RunFailed)
	require.Equal(t, belay.ClassTimeout, run.Error.Class)
	require.Contains(t, run.Reason, "deadline")
}

func TestWatchdogResendsThenFails(t *testing.T) {
	t.Parallel()
	p := &funcProvider{name: "hang", run: hang}
	b := setup(t, Options{Tiers: Tiers{AwaitingFirst: time.Minute}}, p)
	run := b.submit(SubmitRequest{Provider: "hang"})
	for attempt := 1; attempt <= 3; attempt++ {
		b.waitRun(run.ID, func(r belay.Run) bool { return r.Attempt == attempt && r.Phase == belay.PhaseAwaitingResponse })
		b.clk.Advance(time.Minute)
	}
	run = b.waitStatus(run.ID, belay.RunFailed)
	require.Equal(t, belay.ClassTimeout, run.Error.Class)
	require.Contains(t, run.Reason, "recovery attempts exhausted")
	require.Equal(t, int32(3), p.calls.Load(), "the first attempt and two recoveries")
	evs := b.events(run.Session)
	require.Equal(t, 3, countType(evs, belay.EventRunWatchdog))
	require.Equal(t, 2, countType(evs, belay.EventRunRecovery))
}

func TestWatchdogResumesAResumableProvider(t *testing.T) {
	t.Parallel()
	var resumed atomic.Bool
	p := &funcProvider{name: "bg", caps: provider.Capabilities{Resume: true}, run: func(ctx context.Context, req provider.Request, emit func(provider.Event) error) error {
		if req.Resume {
			if req.Ref.ID != "resp_1" || req.Ref.Cursor != "7" {
				return provider.Errorf(belay.ClassInvalidRequest, "bad resume ref %+v", req.Ref)
			}
			resumed.Store(true)
			return echo(ctx, req, emit)
		}
		if err := emit(provider.Event{Kind: provider.RefUpdate, Ref: &belay.ConversationRef{Kind: "response", ID: "resp_1", Cursor: "7"}}); err != nil {
			return err
		}
		return hang(ctx, req, emit) // then the stream stalls
	}}
	b := setup(t, Options{}, p)
	run := b.submit(SubmitRequest{Provider: "bg", Prompt: "deep research"})
	b.waitRun(run.ID, func(r belay.Run) bool { return r.Ref.Cursor == "7" })
	b.clk.Advance(DefaultTiers.Streaming)
	run = b.waitStatus(run.ID, belay.RunComplete)
	require.True(t, resumed.Load())
	require.Equal(t, 2, run.Attempt)
}

func TestProviderPanicFailsItsRunOnly(t *testing.T) {
	t.Parallel()
	boom := &funcProvider{name: "boom", run: func(ctx context.Context, req provider.Request, emit func(provider.Event) error) error {
		if err := emit(provider.Event{Kind: provider.TextDelta, Text: "about to"}); err != nil {
			return err
		}
		var m map[string]int
		m["x"]++ // a provider bug: assignment to a nil map
		return nil
	}}
	b := setup(t, Options{}, boom, &funcProvider{name: "echo", run: echo})
	run := b.submit(SubmitRequest{Provider: "boom", Prompt: "x"})
	run = b.waitStatus(run.ID, belay.RunFailed)
	require.Equal(t, belay.ClassInternal, run.Error.Class)
	require.Contains(t, run.Error.Message, "the boom provider panicked: assignment to entry in nil map")
	require.Equal(t, 1, run.Attempt, "a panic is a bug, not a transient failure: not retried")
	// The runtime goes on.
	next := b.submit(SubmitRequest{Provider: "echo", Prompt: "still here"})
	b.waitStatus(next.ID, belay.RunComplete)
}

// A panic in belay's own code under emit is not taken for the provider's:
// it goes on up (the state it left cannot be trusted).
func TestPanicUnderEmitIsNotRecovered(t *testing.T) {
	t.Parallel()
	p := &funcProvider{name: "p", run: func(ctx context.Context, req provider.Request, emit func(provider.Event) error) error {
		return emit(provider.Event{Kind: provider.TextDelta, Text: "x"})
	}}
	b := setup(t, Options{}, p)
	rn := &runner{r: b.rt, id: "run_x", prov: p, run: belay.Run{Provider: "p"}}
	require.PanicsWithValue(t, "belay bug", func() {
		_ = rn.callProvider(context.Background(), provider.Request{}, func(provider.Event) error { panic("belay bug") })
	})
	err := rn.callProvider(context.Background(), provider.Request{}, func(provider.Event) error { return nil })
	require.NoError(t, err)
}

func TestRetryableErrorsBackOffHonouringRetryAfter(t *testing.T) {
	t.Parallel()
	p := &funcProvider{name: "flaky", run: func(ctx context.Context, req provider.Request, emit func(provider.Event) error) error {
		if req.Attempt == 1 {
			return &provider.Error{Class: belay.ClassRateLimited, Message: "429", RetryAfter: 90 * time.Second}
		}
		return echo(ctx, req, emit)
	}}
	b := setup(t, Options{}, p)
	run := b.submit(SubmitRequest{Provider: "flaky", Prompt: "x"})
	require.GreaterOrEqual(t, b.sleeping(), 90*time.Second)
	// The backoff timer is the only one due within 90 s; the fake clock
	// runs due timers inside Advance, so a retry that ignored retry-after
	// would have started by the time it returns.
	b.clk.Advance(89 * time.Second)
	got, err := b.st.Run(context.Background(), run.ID)
	require.NoError(t, err)
	require.Equal(t, belay.PhaseRetryWait, got.Phase, "retry-after is honoured")
	b.clk.Advance(time.Second)
	run = b.waitStatus(run.ID, belay.RunComplete)
	require.Equal(t, 2, run.Attempt)
}

func TestRetriesRunOut(t *testing.T) {
	t.Parallel()
	p := &funcProvider{name: "down", run: func(ctx context.Context, req provider.Request, emit func(provider.Event) error) error {
		return provider.Errorf(belay.ClassTransient, "500")
	}}
	b := setup(t, Options{Retry: RetryPolicy{MaxRetries: 3, Base: time.Second, Max: 4 * time.Second}}, p)
	run := b.submit(SubmitRequest{Provider: "down"})
	for i := 0; i < 3; i++ {
		require.LessOrEqual(t, b.sleeping(), 4*time.Second, "backoff is capped")
		b.clk.Advance(4 * time.Second)
	}
	run = b.waitStatus(run.ID, belay.RunFailed)
	require.Equal(t, belay.ClassTransient, run.Error.Class)
	require.Contains(t, run.Reason, "3 retries exhausted")
	require.Equal(t, int32(4), p.calls.Load())
}

func TestNonRetryableFailsAtOnce(t *testing.T) {
	t.Parallel()
	p := &funcProvider{name: "auth", run: func(ctx context.Context, req provider.Request, emit func(provider.Event) error) error {
		return provider.Errorf(belay.ClassAuth, "401")
	}}
	b := setup(t, Options{}, p)
	run := b.submit(SubmitRequest{Provider: "auth"})
	run = b.waitStatus(run.ID, belay.RunFailed)
	require.Equal(t, belay.ClassAuth, run.Error.Class)
	require.Equal(t, int32(1), p.calls.Load())
	require.Equal(t, belay.DeliveryRunFailed, b.waitDelivery(run.Session).Type)
}

// TestNoResendAfterSideEffects is the seed chain "auto-resend after tool
// calls already ran re-executed side effects": the stream breaks after a
// side-effecting tool call settled, and the run is stranded, not resent.
func TestNoResendAfterSideEffects(t *testing.T) {
	t.Parallel()
	var effects atomic.Int32
	p := &funcProvider{name: "agent", run: func(ctx context.Context, req provider.Request, emit func(provider.Event) error) error {
		if err := emit(provider.Event{Kind: provider.ToolCall, Call: &provider.Call{ID: "c1", Name: "send_email", SideEffect: true}}); err != nil {
			return err
		}
		effects.Add(1)
		if err := emit(provider.Event{Kind: provider.ToolResult, Result: &provider.Result{CallID: "c1", Content: "sent"}}); err != nil {
			return err
		}
		return provider.Errorf(belay.ClassTransient, "connection reset")
	}}
	b := setup(t, Options{}, p)
	run := b.submit(SubmitRequest{Provider: "agent"})
	run = b.waitStatus(run.ID, belay.RunStranded)
	require.Contains(t, run.Reason, `tool "send_email" (call c1) had side effects and settled`)
	require.Equal(t, int32(1), effects.Load(), "the side effect ran once")
	require.Equal(t, belay.DeliveryRunStranded, b.waitDelivery(run.Session).Type)
}

func TestResendWhenNoSideEffectRan(t *testing.T) {
	t.Parallel()
	p := &funcProvider{name: "agent", run: func(ctx context.Context, req provider.Request, emit func(provider.Event) error) error {
		if req.Attempt == 1 {
			// A read-only tool, and a side-effecting one that was denied.
			for _, c := range []provider.Call{{ID: "r", Name: "read_file"}, {ID: "w", Name: "write_file", SideEffect: true}} {
				if err := emit(provider.Event{Kind: provider.ToolCall, Call: &c}); err != nil {
					return err
				}
			}
			_ = emit(provider.Event{Kind: provider.ToolResult, Result: &provider.Result{CallID: "r", Content: "data"}})
			_ = emit(provider.Event{Kind: provider.ToolResult, Result: &provider.Result{CallID: "w", IsError: true, Class: belay.ClassPermissionDenied}})
			return provider.Errorf(belay.ClassTransient, "connection reset")
		}
		return echo(ctx, req, emit)
	}}
	b := setup(t, Options{Retry: RetryPolicy{Base: time.Millisecond, Max: time.Millisecond}}, p)
	run := b.submit(SubmitRequest{Provider: "agent", Prompt: "p"})
	b.sleeping()
	b.clk.Advance(time.Millisecond)
	run = b.waitStatus(run.ID, belay.RunComplete)
	require.Equal(t, 2, run.Attempt)
}

// TestPermissionWindow is the seed chain "3 permission denials with an OK
// between them": a consecutive counter would never fire; the window does.
func TestPermissionWindow(t *testing.T) {
	t.Parallel()
	p := &funcProvider{name: "agent", caps: provider.Capabilities{Resume: true}, run: func(ctx context.Context, req provider.Request, emit func(provider.Event) error) error {
		if req.Resume {
			return echo(ctx, req, emit)
		}
		_ = emit(provider.Event{Kind: provider.RefUpdate, Ref: &belay.ConversationRef{ID: "conv"}})
		for i, denied := range []bool{true, false, true, false, true} {
			id := fmt.Sprint("c", i)
			if err := emit(provider.Event{Kind: provider.ToolCall, Call: &provider.Call{ID: id, Name: "bash"}}); err != nil {
				return err
			}
			res := &provider.Result{CallID: id, Content: "ok"}
			if denied {
				res = &provider.Result{CallID: id, IsError: true, Class: belay.ClassPermissionDenied}
			}
			if err := emit(provider.Event{Kind: provider.ToolResult, Result: res}); err != nil {
				return err
			}
		}
		return hang(ctx, req, emit)
	}}
	b := setup(t, Options{}, p)
	run := b.submit(SubmitRequest{Provider: "agent"})
	run = b.waitStatus(run.ID, belay.RunComplete)
	require.Equal(t, 2, run.Attempt, "the detector tripped and the run resumed")
	evs := b.events(run.Session)
	var rec belay.RecoveryData
	for _, e := range evs {
		if e.Type == belay.EventRunRecovery {
			require.NoError(t, json.Unmarshal(e.Data, &rec))
		}
	}
	require.Equal(t, belay.DecisionResume, rec.Decision)
	require.Contains(t, rec.Reason, "3 of the last 5 tool results failed")
}

func TestActivityIsExposed(t *testing.T) {
	t.Parallel()
	g := newGate("slow")
	b := setup(t, Options{}, g)
	run := b.submit(SubmitRequest{Provider: "slow"})
	waitFor(t, func() bool { return len(g.running()) == 1 })
	b.waitRun(run.ID, func(r belay.Run) bool { return r.Phase == belay.PhaseStreaming })
	a, ok := b.rt.Activity(run.ID)
	require.True(t, ok)
	require.Equal(t, belay.PhaseStreaming, a.Phase)
	require.Equal(t, t0, a.LastProgress)
	require.Equal(t, belay.TierStreaming, a.Tier)
	g.release(run.ID)
	b.waitStatus(run.ID, belay.RunComplete)
	waitFor(t, func() bool { _, ok := b.rt.Activity(run.ID); return !ok })
}

func TestStopSuspendsAndRestartReclaims(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		caps   provider.Capabilities
		effect bool
		want   belay.RunStatus
	}{
		{"resumable resumes", provider.Capabilities{Resume: true}, true, belay.RunComplete},
		{"safe resends", provider.Capabilities{}, false, belay.RunComplete},
		{"unsafe strands", provider.Capabilities{}, true, belay.RunStranded},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var effects atomic.Int32
			p := &funcProvider{name: "agent", caps: tc.caps, run: func(ctx context.Context, req provider.Request, emit func(provider.Event) error) error {
				if req.Attempt > 1 || req.Resume {
					return echo(ctx, req, emit)
				}
				_ = emit(provider.Event{Kind: provider.RefUpdate, Ref: &belay.ConversationRef{ID: "conv", Cursor: "3"}})
				if err := emit(provider.Event{Kind: provider.ToolCall, Call: &provider.Call{ID: "c1", Name: "write", SideEffect: tc.effect}}); err != nil {
					return err
				}
				effects.Add(1)
				if err := emit(provider.Event{Kind: provider.ToolResult, Result: &provider.Result{CallID: "c1"}}); err != nil {
					return err
				}
				return hang(ctx, req, emit)
			}}
			b := setup(t, Options{}, p)
			run := b.submit(SubmitRequest{Provider: "agent", Prompt: "p"})
			b.waitRun(run.ID, func(r belay.Run) bool { return r.Phase == belay.PhaseStreaming && r.Ref.Cursor == "3" })
			waitFor(t, func() bool { return effects.Load() == 1 })
			b.restart()
			run = b.waitStatus(run.ID, tc.want)
			require.Equal(t, int32(1), effects.Load(), "no side effect ran twice")
			evs := b.events(run.Session)
			require.Equal(t, 1, countType(evs, belay.EventRunSuspended), "the stop is journaled")
			require.Equal(t, 2, countType(evs, belay.EventRunLeased), "the new incarnation took the lease over")
		})
	}
}

func TestQueuedRunsSurviveRestart(t *testing.T) {
	t.Parallel()
	g := newGate("slow")
	b := setup(t, Options{}, g)
	first := b.submit(SubmitRequest{Provider: "slow"})
	second := b.submit(SubmitRequest{Session: first.Session})
	waitFor(t, func() bool { return len(g.running()) == 1 })
	b.restart()
	waitFor(t, func() bool { r := g.running(); return len(r) == 1 && r[0] == first.ID })
	g.release(first.ID)
	b.waitStatus(first.ID, belay.RunComplete)
	waitFor(t, func() bool { r := g.running(); return len(r) == 1 && r[0] == second.ID })
	g.release(second.ID)
	b.waitStatus(second.ID, belay.RunComplete)
}

func TestDeliveryLeasesExpireByTimerAcrossRestart(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{}, &funcProvider{name: "echo", run: echo})
	sess, err := b.st.CreateSession(context.Background(), belay.SessionInput{Provider: "echo"})
	require.NoError(t, err)
	ctx := context.Background()
	d, _, err := b.rt.Post(ctx, belay.DeliveryInput{Session: sess.ID, Type: "ui.accept", Key: "a1"})
	require.NoError(t, err)
	got, err := b.rt.Lease(ctx, sess.ID, "agent", time.Minute, 1, 0)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, t0.Add(time.Minute), got[0].Lease.ExpiresAt)
	// The agent dies without acking; the daemon restarts.
	b.restart()
	b.clk.Advance(59 * time.Second)
	again, err := b.st.Deliveries(ctx, belay.DeliveryFilter{Session: sess.ID})
	require.NoError(t, err)
	require.Equal(t, belay.DeliveryLeased, again[0].Status, "not redelivered at once after a restart")
	b.clk.Advance(time.Second)
	waitFor(t, func() bool {
		ds, _ := b.st.Deliveries(ctx, belay.DeliveryFilter{Session: sess.ID})
		return ds[0].Status == belay.DeliveryPending
	})
	got, err = b.rt.Lease(ctx, sess.ID, "agent2", time.Minute, 1, 0)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, d.ID, got[0].ID)
	_, err = b.rt.Settle(ctx, d.ID, belay.Settlement{Kind: belay.SettleDone, Epoch: got[0].Epoch})
	require.NoError(t, err)
}

func TestLeaseWaitsForAPost(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{}, &funcProvider{name: "echo", run: echo})
	sess, err := b.st.CreateSession(context.Background(), belay.SessionInput{Provider: "echo"})
	require.NoError(t, err)
	res := make(chan []belay.Delivery, 1)
	base := b.clk.Pending()
	go func() {
		got, err := b.rt.Lease(context.Background(), sess.ID, "agent", time.Hour, 1, time.Hour)
		if err != nil {
			t.Error(err)
		}
		res <- got
	}()
	// Its timeout timer is armed once it found nothing and waits.
	waitFor(t, pendingTimers(b, base+1))
	_, _, err = b.rt.Post(context.Background(), belay.DeliveryInput{Session: sess.ID, Type: "ui.click"})
	require.NoError(t, err)
	select {
	case got := <-res:
		require.Len(t, got, 1)
	case <-time.After(10 * time.Second):
		t.Fatal("a waiting consumer was not woken by a post")
	}
	// With nothing to lease, the wait ends at its timeout on the clock:
	// advance once its timer is armed, beside the runtime's own.
	base = b.clk.Pending()
	go func() {
		got, _ := b.rt.Lease(context.Background(), sess.ID, "agent", time.Minute, 1, time.Minute)
		res <- got
	}()
	b.advanceWhen(time.Minute, pendingTimers(b, base+1))
	select {
	case got := <-res:
		require.Empty(t, got)
	case <-time.After(10 * time.Second):
		t.Fatal("the wait did not time out")
	}
}

var _ = errors.New

func TestDoctor(t *testing.T) {
	t.Parallel()
	g := newGate("slow")
	b := setup(t, Options{}, g, &funcProvider{name: "agent", run: func(ctx context.Context, req provider.Request, emit func(provider.Event) error) error {
		_ = emit(provider.Event{Kind: provider.ToolCall, Call: &provider.Call{ID: "c1", Name: "deploy", SideEffect: true}})
		_ = emit(provider.Event{Kind: provider.ToolResult, Result: &provider.Result{CallID: "c1", Content: "secret answer text"}})
		return provider.Errorf(belay.ClassTransient, "reset")
	}})
	ctx := context.Background()
	run := b.submit(SubmitRequest{Provider: "slow", Prompt: "secret prompt text"})
	b.waitRun(run.ID, func(r belay.Run) bool { return r.Phase == belay.PhaseStreaming })
	rep, err := b.rt.Doctor(ctx, run.Session)
	require.NoError(t, err)
	require.Equal(t, "watch", string(rep.NextAction))
	require.Equal(t, "belay watch "+run.ID, rep.Command)
	g.release(run.ID)
	b.waitStatus(run.ID, belay.RunComplete)
	b.waitDelivery(run.Session)
	rep, err = b.rt.Doctor(ctx, run.Session)
	require.NoError(t, err)
	require.Equal(t, "read_result", string(rep.NextAction), "belay's own completion notice is not the next action")
	require.Equal(t, "belay read "+run.ID, rep.Command)

	stranded := b.submit(SubmitRequest{Provider: "agent", Prompt: "secret prompt text"})
	b.waitStatus(stranded.ID, belay.RunStranded)
	rep, err = b.rt.Doctor(ctx, stranded.Session)
	require.NoError(t, err)
	require.Equal(t, "resolve_manually", string(rep.NextAction))
	require.Contains(t, rep.Reason, "deploy")
	raw, err := json.Marshal(rep)
	require.NoError(t, err)
	require.NotContains(t, string(raw), "secret", "doctor never shows prompt or answer text")
}

// TestLocalWaitTimeoutIsNotTerminal is the seed chain "a local poll timeout
// marked the session timeout and watch treated it as terminal while the
// provider kept streaming".
func TestLocalWaitTimeoutIsNotTerminal(t *testing.T) {
	t.Parallel()
	g := newGate("slow")
	b := setup(t, Options{}, g)
	run := b.submit(SubmitRequest{Provider: "slow"})
	waitFor(t, func() bool { return len(g.running()) == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	got, err := b.rt.Wait(ctx, run.ID)
	require.ErrorIs(t, err, belay.ErrStillRunning)
	require.Equal(t, belay.RunRunning, got.Status)
	require.Len(t, g.running(), 1, "the run goes on")
	done := make(chan belay.Run, 1)
	go func() {
		r, err := b.rt.Wait(context.Background(), run.ID)
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	g.release(run.ID)
	select {
	case r := <-done:
		require.Equal(t, belay.RunComplete, r.Status)
	case <-time.After(20 * time.Second):
		t.Fatal("wait did not return when the run ended")
	}
}

// TestAcceptPostedWhileNoAgentPolls is the seed chain "an accept posted
// while no agent polls, then a restart": the item waits, durably, and is
// delivered once.
func TestAcceptPostedWhileNoAgentPolls(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{}, &funcProvider{name: "echo", run: echo})
	ctx := context.Background()
	sess, err := b.st.CreateSession(ctx, belay.SessionInput{Provider: "echo"})
	require.NoError(t, err)
	posted, created, err := b.rt.Post(ctx, belay.DeliveryInput{Session: sess.ID, Type: "ui.accept", Key: "click-1", Priority: 1, Data: json.RawMessage(`{"choice":"yes"}`)})
	require.NoError(t, err)
	require.True(t, created)
	b.restart()
	_, created, err = b.rt.Post(ctx, belay.DeliveryInput{Session: sess.ID, Type: "ui.accept", Key: "click-1"})
	require.NoError(t, err)
	require.False(t, created, "the browser's retry of the post is dropped")
	got, err := b.rt.Lease(ctx, sess.ID, "agent", time.Minute, 10, 0)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, posted.ID, got[0].ID)
	require.JSONEq(t, `{"choice":"yes"}`, string(got[0].Data))
	_, err = b.rt.Settle(ctx, posted.ID, belay.Settlement{Kind: belay.SettleDone, Epoch: got[0].Epoch})
	require.NoError(t, err)
	got, err = b.rt.Lease(ctx, sess.ID, "agent", time.Minute, 10, 0)
	require.NoError(t, err)
	require.Empty(t, got)
}

// TestConcurrentFollowUps is the seed chain "a concurrent follow-up on the
// same conversation": follow-ups sent at once run one at a time, all of
// them, none lost.
func TestConcurrentFollowUps(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	active, maxActive := 0, 0
	var order []string
	p := &funcProvider{name: "conv", run: func(ctx context.Context, req provider.Request, emit func(provider.Event) error) error {
		mu.Lock()
		active++
		maxActive = max(maxActive, active)
		order = append(order, req.Run)
		mu.Unlock()
		defer func() { mu.Lock(); active--; mu.Unlock() }()
		time.Sleep(time.Millisecond)
		return echo(ctx, req, emit)
	}}
	b := setup(t, Options{}, p)
	first := b.submit(SubmitRequest{Provider: "conv", Prompt: "0"})
	var wg sync.WaitGroup
	ids := make([]string, 8)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run, err := b.rt.Submit(context.Background(), SubmitRequest{Session: first.Session, Prompt: fmt.Sprint(i + 1)})
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = run.ID
		}()
	}
	wg.Wait()
	for _, id := range append(ids, first.ID) {
		b.waitStatus(id, belay.RunComplete)
	}
	require.Equal(t, 1, maxActive, "one active run per conversation")
	// They ran in the order the journal accepted them.
	runs, err := b.st.Runs(context.Background(), belay.RunFilter{Session: first.Session})
	require.NoError(t, err)
	var created []string
	for _, r := range runs {
		created = append(created, r.ID)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, created, order)
}

// TestNoiseDoesNotResetTheWatchdog checks that keepalives and usage are not
// progress (G8): a provider that only sends them is judged stalled.
func TestNoiseDoesNotResetTheWatchdog(t *testing.T) {
	t.Parallel()
	noise := make(chan struct{})
	p := &funcProvider{name: "noisy", run: func(ctx context.Context, req provider.Request, emit func(provider.Event) error) error {
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-noise:
				_ = emit(provider.Event{Kind: provider.Keepalive})
				_ = emit(provider.Event{Kind: provider.Usage, Tokens: &provider.Tokens{Input: 1}})
			}
		}
	}}
	b := setup(t, Options{Tiers: Tiers{AwaitingFirst: 2 * time.Minute}, Recovery: RecoveryPolicy{MaxAttempts: 1}}, p)
	run := b.submit(SubmitRequest{Provider: "noisy"})
	b.waitRun(run.ID, func(r belay.Run) bool { return r.Phase == belay.PhaseAwaitingResponse })
	for i := 0; i < 3; i++ {
		b.clk.Advance(30 * time.Second)
		noise <- struct{}{}
	}
	b.clk.Advance(30 * time.Second) // two minutes of noise, no progress
	evs := func() []belay.Event { return b.events(run.Session) }
	waitFor(t, func() bool { return countType(evs(), belay.EventRunWatchdog) == 1 })
	var wd belay.WatchdogData
	for _, e := range evs() {
		if e.Type == belay.EventRunWatchdog {
			require.NoError(t, json.Unmarshal(e.Data, &wd))
		}
	}
	require.Equal(t, belay.TierAwaitingFirst, wd.Tier)
	require.Equal(t, 120.0, wd.IdleSeconds)
}

func TestSessionOptionsReachTheProvider(t *testing.T) {
	t.Parallel()
	got := make(chan provider.Request, 1)
	p := &funcProvider{name: "opt", run: func(ctx context.Context, req provider.Request, emit func(provider.Event) error) error {
		got <- req
		return echo(ctx, req, emit)
	}}
	b := setup(t, Options{}, p)
	sess, err := b.st.CreateSession(context.Background(), belay.SessionInput{Provider: "opt", Options: json.RawMessage(`{"temperature":0.2}`)})
	require.NoError(t, err)
	run := b.submit(SubmitRequest{Session: sess.ID, Prompt: "x", Options: json.RawMessage(`{"max_tokens":5}`)})
	req := <-got
	require.JSONEq(t, `{"temperature":0.2}`, string(req.Options))
	require.Contains(t, string(req.Input), `"max_tokens":5`)
	b.waitStatus(run.ID, belay.RunComplete)
}

// TestBarrenResumeFallsBackToResend: a provider whose resume only repeats
// its failure is resent (no side effect ran) instead of resumed until the
// retries run out.
func TestBarrenResumeFallsBackToResend(t *testing.T) {
	t.Parallel()
	p := &funcProvider{name: "bg", caps: provider.Capabilities{Resume: true}, run: func(ctx context.Context, req provider.Request, emit func(provider.Event) error) error {
		switch {
		case req.Resume:
			return provider.Errorf(belay.ClassTransient, "the response had failed")
		case req.Attempt == 1:
			_ = emit(provider.Event{Kind: provider.RefUpdate, Ref: &belay.ConversationRef{ID: "resp_1", Cursor: "3"}})
			return provider.Errorf(belay.ClassTransient, "stream broke")
		}
		return echo(ctx, req, emit)
	}}
	b := setup(t, Options{Retry: RetryPolicy{MaxRetries: 3, Base: time.Millisecond, Max: time.Millisecond}}, p)
	run := b.submit(SubmitRequest{Provider: "bg", Prompt: "again"})
	for i := 0; i < 2; i++ {
		b.sleeping()
		b.clk.Advance(time.Millisecond)
	}
	run = b.waitStatus(run.ID, belay.RunComplete)
	require.Equal(t, 3, run.Attempt, "resume once, then resend")
	var decisions []string
	for _, e := range b.events(run.Session) {
		if e.Type == belay.EventRunRecovery {
			var d belay.RecoveryData
			require.NoError(t, json.Unmarshal(e.Data, &d))
			decisions = append(decisions, d.Decision)
		}
	}
	require.Equal(t, []string{belay.DecisionResume, belay.DecisionResend}, decisions)
}

// TestResumeDropsTextJournaledPastTheRef: text journaled after the ref's
// last update (a crash or stop fell between the text and the next ref)
// is what a resumed provider emits again from that ref; it is journaled
// once, and the provider is told the offset of the ref.
func TestResumeDropsTextJournaledPastTheRef(t *testing.T) {
	t.Parallel()
	offsets := make(chan int, 1)
	p := &funcProvider{name: "agent", caps: provider.Capabilities{Resume: true}, run: func(ctx context.Context, req provider.Request, emit func(provider.Event) error) error {
		text := func(s string) error { return emit(provider.Event{Kind: provider.TextDelta, Text: s}) }
		ref := func(c string) error {
			return emit(provider.Event{Kind: provider.RefUpdate, Ref: &belay.ConversationRef{ID: "conv", Cursor: c}})
		}
		if !req.Resume {
			for _, err := range []error{ref("0"), text("ab"), ref("2"), text("cd")} {
				if err != nil {
					return err
				}
			}
			return hang(ctx, req, emit)
		}
		offsets <- req.TextOffset
		if req.Ref.Cursor != "2" {
			return provider.Errorf(belay.ClassInvalidRequest, "resumed at %q, want 2", req.Ref.Cursor)
		}
		// From the cursor: "cd" again, in other pieces, then the rest.
		for _, err := range []error{text("c"), ref("3"), text("d"), text("ef"), ref("6")} {
			if err != nil {
				return err
			}
		}
		return emit(provider.Event{Kind: provider.TurnEnd, StopReason: "end_turn"})
	}}
	b := setup(t, Options{}, p)
	run := b.submit(SubmitRequest{Provider: "agent", Prompt: "p"})
	answer := func() string {
		s := ""
		for _, e := range b.events(run.Session) {
			if e.Type == belay.EventRunText && e.Run == run.ID {
				s += textOf(t, e)
			}
		}
		return s
	}
	waitFor(t, func() bool { return answer() == "abcd" })
	b.restart()
	run = b.waitStatus(run.ID, belay.RunComplete)
	require.Equal(t, 2, <-offsets, "the offset of the ref the provider resumes from")
	require.Equal(t, "abcdef", answer(), "the replayed text is journaled once")
}

// TestResumeDropsThinkingJournaledPastTheRef: thinking text is streamed
// and replayed like the answer, so a resume journals it once too.
func TestResumeDropsThinkingJournaledPastTheRef(t *testing.T) {
	t.Parallel()
	offsets := make(chan [2]int, 1)
	p := &funcProvider{name: "agent", caps: provider.Capabilities{Resume: true}, run: func(ctx context.Context, req provider.Request, emit func(provider.Event) error) error {
		think := func(s string) error { return emit(provider.Event{Kind: provider.ThinkingDelta, Text: s}) }
		text := func(s string) error { return emit(provider.Event{Kind: provider.TextDelta, Text: s}) }
		ref := func(c string) error {
			return emit(provider.Event{Kind: provider.RefUpdate, Ref: &belay.ConversationRef{ID: "conv", Cursor: c}})
		}
		if !req.Resume {
			for _, err := range []error{ref("0"), think("xy"), text("a"), ref("3"), think("zw"), text("b")} {
				if err != nil {
					return err
				}
			}
			return hang(ctx, req, emit)
		}
		offsets <- [2]int{req.ThinkingOffset, req.TextOffset}
		if req.Ref.Cursor != "3" {
			return provider.Errorf(belay.ClassInvalidRequest, "resumed at %q, want 3", req.Ref.Cursor)
		}
		// From the cursor: "zw" and "b" again, in other pieces, then more.
		for _, err := range []error{think("z"), ref("4"), think("w"), text("b"), think("v"), text("c"), ref("8")} {
			if err != nil {
				return err
			}
		}
		return emit(provider.Event{Kind: provider.TurnEnd, StopReason: "end_turn"})
	}}
	b := setup(t, Options{}, p)
	run := b.submit(SubmitRequest{Provider: "agent", Prompt: "p"})
	stream := func(typ string) string {
		s := ""
		for _, e := range b.events(run.Session) {
			if e.Type == typ && e.Run == run.ID {
				s += textOf(t, e)
			}
		}
		return s
	}
	waitFor(t, func() bool { return stream(belay.EventRunText) == "ab" })
	b.restart()
	run = b.waitStatus(run.ID, belay.RunComplete)
	require.Equal(t, [2]int{2, 1}, <-offsets, "the offsets of the ref the provider resumes from")
	require.Equal(t, "xyzwv", stream(belay.EventRunThinking), "the replayed thinking is journaled once")
	require.Equal(t, "abc", stream(belay.EventRunText), "the replayed text is journaled once")
}

func textOf(t *testing.T, e belay.Event) string {
	t.Helper()
	var d belay.TextData
	require.NoError(t, json.Unmarshal(e.Data, &d))
	return d.Text
}
