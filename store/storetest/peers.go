package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/clock"
	"github.com/belayhq/belay/provider"
	"github.com/belayhq/belay/runtime"
	"github.com/belayhq/belay/store"
)

// PeerHarness makes stores over one body of data, as several runtime
// instances see it: the same store value for a store that serves one
// process (fsstore), or one connection pool per node over one database.
type PeerHarness struct {
	// New returns n stores over the same, initially empty, data, whose
	// time (lease and owner expiry) comes from clk. The suite closes them.
	New func(t *testing.T, clk *clock.Fake, n int) []store.Store
}

// RunPeers runs the peer suite: runtime instances over one store, racing
// on purpose (issue 14).
func RunPeers(t *testing.T, h PeerHarness) {
	tests := map[string]func(t *testing.T, h PeerHarness){
		"CapsAndConversations": testPeerCaps,
		"CancelFromNonOwner":   testPeerCancel,
		"StalledOwnerFenced":   testPeerStalledOwner,
		"StoppedOwnerRescued":  testPeerStoppedOwner,
		"OwnRunWithoutRunner":  testPeerOwnOrphan,
		"InboxOnBoth":          testPeerInbox,
		"LeaseOfStoppedPeer":   testPeerLeaseOfStoppedPeer,
		"Policies":             testPeerPolicies,
	}
	for name, fn := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, h)
		})
	}
}

// peer is one runtime instance of a peer test.
type peer struct {
	rt  *runtime.Runtime
	clk *clock.Fake
}

type peers struct {
	t      *testing.T
	stores []store.Store
	clk    *clock.Fake // the store's clock
	list   []*peer
}

const peerTTL = time.Minute

func newPeers(t *testing.T, h PeerHarness, n int) *peers {
	t.Helper()
	clk := clock.NewFake(Start)
	ps := &peers{t: t, stores: h.New(t, clk, n), clk: clk}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, p := range ps.list {
			_ = p.rt.Stop(ctx)
		}
		for _, s := range ps.stores {
			_ = s.Close()
		}
	})
	return ps
}

// start starts a runtime on store i with its own clock (nil: the store's).
func (ps *peers) start(i int, clk *clock.Fake, limits runtime.Limits, provs ...provider.Provider) *peer {
	ps.t.Helper()
	return ps.startAs(i, "", clk, limits, provs...)
}

// startAs is start for a runtime with the owner id inc ("": a new one).
func (ps *peers) startAs(i int, inc string, clk *clock.Fake, limits runtime.Limits, provs ...provider.Provider) *peer {
	ps.t.Helper()
	if clk == nil {
		clk = ps.clk
	}
	reg := provider.Registry{}
	for _, p := range provs {
		reg[p.Name()] = p
	}
	rt, err := runtime.New(runtime.Options{Store: ps.stores[i], Providers: reg, Clock: clk, Incarnation: inc, Limits: limits, LeaseTTL: peerTTL, PruneEvery: -1})
	require.NoError(ps.t, err)
	require.NoError(ps.t, rt.Start(context.Background()))
	p := &peer{rt: rt, clk: clk}
	ps.list = append(ps.list, p)
	return p
}

func (ps *peers) session(p *peer, prov string) string {
	ps.t.Helper()
	sess, err := p.rt.Store().CreateSession(context.Background(), belay.SessionInput{Provider: prov})
	require.NoError(ps.t, err)
	return sess.ID
}

func (ps *peers) send(p *peer, session, prompt string, pol belay.Policy) belay.Run {
	ps.t.Helper()
	run, err := p.rt.Submit(context.Background(), runtime.SubmitRequest{Session: session, Prompt: prompt, Policy: pol})
	require.NoError(ps.t, err)
	return run
}

func (ps *peers) wait(p *peer, id string) belay.Run {
	ps.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	run, err := p.rt.Wait(ctx, id)
	require.NoError(ps.t, err)
	return run
}

// eventually waits for cond, polling.
func (ps *peers) eventually(cond func() bool, what string) {
	ps.t.Helper()
	require.Eventually(ps.t, cond, 30*time.Second, 2*time.Millisecond, what)
}

// untilLeasedTo moves the store's clock on by step until p holds run's
// lease (or the run ended). It stops there: a clock racing ahead of p's
// own lease renewals would make p fence itself.
func (ps *peers) untilLeasedTo(p *peer, id string, step time.Duration, what string) {
	ps.t.Helper()
	ps.eventually(func() bool {
		r, err := p.rt.Store().Run(context.Background(), id)
		if err == nil && (r.Status.Terminal() || r.Lease != nil && r.Lease.Owner == p.rt.Incarnation()) {
			return true
		}
		ps.clk.Advance(step)
		return false
	}, what)
}

// runningOn waits until run is running under p's lease.
func (ps *peers) runningOn(p *peer, id string) belay.Run {
	ps.t.Helper()
	var run belay.Run
	ps.eventually(func() bool {
		r, err := p.rt.Store().Run(context.Background(), id)
		run = r
		return err == nil && r.Status == belay.RunRunning && r.Lease != nil && r.Lease.Owner == p.rt.Incarnation()
	}, "run "+id+" running on "+p.rt.Incarnation())
	return run
}

// runningOnFirst starts two instances with g, the second once a run sent
// to the first runs there.
func (ps *peers) runningOnFirst(g *gateProvider) (a, b *peer, run belay.Run) {
	ps.t.Helper()
	a = ps.start(0, nil, runtime.Limits{}, g)
	run = ps.send(a, ps.session(a, g.name), "hi", belay.PolicyEnqueue)
	ps.runningOn(a, run.ID)
	return a, ps.start(1, nil, runtime.Limits{}, g), run
}

// gateProvider blocks every run until released and records how many runs
// execute at once, overall and per session.
type gateProvider struct {
	name    string
	release chan struct{}

	mu        sync.Mutex
	now, peak int
	bySession map[string]int
	overlap   string
	started   atomic.Int32
}

func newGate(name string) *gateProvider {
	return &gateProvider{name: name, release: make(chan struct{}), bySession: map[string]int{}}
}

func (g *gateProvider) Name() string                        { return g.name }
func (g *gateProvider) Capabilities() provider.Capabilities { return provider.Capabilities{} }
func (g *gateProvider) Run(ctx context.Context, req provider.Request, emit func(provider.Event) error) error {
	g.mu.Lock()
	g.now++
	g.peak = max(g.peak, g.now)
	if g.bySession[req.Session]++; g.bySession[req.Session] > 1 {
		g.overlap = req.Session
	}
	g.mu.Unlock()
	g.started.Add(1)
	defer func() {
		g.mu.Lock()
		g.now--
		g.bySession[req.Session]--
		g.mu.Unlock()
	}()
	select {
	case <-g.release:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	if err := emit(provider.Event{Kind: provider.TextDelta, Text: req.Prompt}); err != nil {
		return err
	}
	return emit(provider.Event{Kind: provider.TurnEnd, StopReason: "end_turn"})
}

// testPeerCaps: two instances admitting from one queue never exceed the
// caps together and never run two runs of one session at once.
func testPeerCaps(t *testing.T, h PeerHarness) {
	ps := newPeers(t, h, 2)
	g := newGate("gate")
	limits := runtime.Limits{Global: 3}
	a := ps.start(0, nil, limits, g)
	b := ps.start(1, nil, limits, g)
	var runs []belay.Run
	for i := range 6 {
		p := []*peer{a, b}[i%2]
		sess := ps.session(p, "gate")
		for j := range 2 {
			runs = append(runs, ps.send([]*peer{a, b}[(i+j)%2], sess, fmt.Sprintf("r%d.%d", i, j), belay.PolicyEnqueue))
		}
	}
	ps.eventually(func() bool { return g.started.Load() == 3 }, "three runs started")
	c, err := a.rt.Store().Counts(context.Background())
	require.NoError(t, err)
	require.Equal(t, store.Counts{Queued: 9, Running: 3}, c)
	close(g.release)
	for _, r := range runs {
		require.Equal(t, belay.RunComplete, ps.wait(a, r.ID).Status)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	require.LessOrEqual(t, g.peak, 3, "the global cap holds across instances")
	require.Empty(t, g.overlap, "one active run per session across instances")
	require.EqualValues(t, 12, g.started.Load(), "every run ran once")
}

// testPeerCancel: a cancel received by the instance that does not run the
// run is carried out by the one that does.
func testPeerCancel(t *testing.T, h PeerHarness) {
	ps, g := newPeers(t, h, 2), newGate("gate")
	a, b, run := ps.runningOnFirst(g)
	// The run's liveness is visible from the instance that does not run it.
	act, ok := b.rt.Activity(run.ID)
	require.True(t, ok)
	require.Equal(t, run.ID, act.Run)
	require.False(t, act.LastProgress.IsZero())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done, err := b.rt.Cancel(ctx, run.ID, "not needed")
	require.NoError(t, err)
	require.Equal(t, belay.RunCancelled, done.Status)
	require.Equal(t, "not needed", done.Reason)
	require.Equal(t, a.rt.Incarnation(), lastOwner(t, a.rt.Store(), run), "the owner carried it out")
}

// lastOwner is the owner of the run's last lease, from its journal.
func lastOwner(t *testing.T, st store.Store, run belay.Run) string {
	t.Helper()
	evs, err := st.Events(context.Background(), run.Session, 0, 0)
	require.NoError(t, err)
	owner := ""
	for _, e := range evs {
		if e.Type == belay.EventRunLeased && e.Run == run.ID {
			var p struct {
				Owner string `json:"owner"`
			}
			require.NoError(t, jsonUnmarshal(e.Data, &p))
			owner = p.Owner
		}
	}
	return owner
}

// testPeerStalledOwner: an owner that stops heartbeating but keeps
// running (a stopped process, a partition) loses its run to a live
// instance once its lease expires, and its late writes are refused.
func testPeerStalledOwner(t *testing.T, h PeerHarness) {
	ps := newPeers(t, h, 2)
	entered := make(chan struct{})
	resume := make(chan struct{})
	lateErr := make(chan error, 1)
	var calls atomic.Int32
	p := &funcProvider{name: "stall", run: func(ctx context.Context, req provider.Request, emit func(provider.Event) error) error {
		if calls.Add(1) == 1 {
			// The first owner: it writes, then freezes, then tries again.
			if err := emit(provider.Event{Kind: provider.TextDelta, Text: "early "}); err != nil {
				return err
			}
			close(entered)
			<-resume
			err := emit(provider.Event{Kind: provider.TextDelta, Text: "late"})
			if err == nil {
				// A store that queues buffered writes (store.WriteBehind)
				// refuses the text when its queue commits and tells the
				// lease's next write; a side effect's intent is refused at
				// once by every store (G9).
				err = emit(provider.Event{Kind: provider.ToolCall, Call: &belay.ToolCall{ID: "late_call", Name: "late", SideEffect: true}})
			}
			lateErr <- err
			return err
		}
		if err := emit(provider.Event{Kind: provider.TextDelta, Text: "rescued"}); err != nil {
			return err
		}
		return emit(provider.Event{Kind: provider.TurnEnd, StopReason: "end_turn"})
	}}
	frozen := clock.NewFake(Start) // a's timers never fire: no heartbeat, no renewal
	a := ps.start(0, frozen, runtime.Limits{}, p)
	sess := ps.session(a, "stall")
	run := ps.send(a, sess, "hi", belay.PolicyEnqueue)
	<-entered
	first := ps.runningOn(a, run.ID)
	b := ps.start(1, nil, runtime.Limits{}, p)
	// Past the lease and the owner record, by the store's clock.
	ps.untilLeasedTo(b, run.ID, peerTTL/4, "the live instance rescues and finishes the run")
	done := ps.wait(b, run.ID)
	require.Equal(t, belay.RunComplete, done.Status)
	require.Greater(t, done.Epoch, first.Epoch)
	close(resume)
	require.Error(t, <-lateErr, "the stalled owner's late write is refused")
	evs, err := b.rt.Store().Events(context.Background(), sess, 0, 0)
	require.NoError(t, err)
	for _, e := range evs {
		if e.Run == run.ID && e.Epoch == first.Epoch {
			require.NotEqual(t, "late", textOf(e), "no write from the old epoch after the rescue")
			require.NotEqual(t, belay.EventRunToolCall, e.Type, "no side effect from the old epoch")
		}
	}
	require.Equal(t, b.rt.Incarnation(), lastOwner(t, b.rt.Store(), run))
}

// testPeerStoppedOwner: an instance that stops leaves its runs to the
// other at once (it retires its owner record), and they finish there.
func testPeerStoppedOwner(t *testing.T, h PeerHarness) {
	ps, g := newPeers(t, h, 2), newGate("gate")
	a, b, run := ps.runningOnFirst(g)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, a.rt.Stop(ctx))
	close(g.release)
	ps.untilLeasedTo(b, run.ID, peerTTL/8, "the other instance rescues the stopped one's run")
	done := ps.wait(b, run.ID)
	require.Equal(t, belay.RunComplete, done.Status)
	require.Equal(t, b.rt.Incarnation(), lastOwner(t, b.rt.Store(), run))
}

// testPeerOwnOrphan: a run leased to a live owner that has no runner for
// it is taken back by that owner, under a new epoch, whether its lease
// expired while the owner kept heartbeating (no claim returns a claimer's
// own runs, so no one else would with this owner alone) or its runner
// exited with the lease held.
func testPeerOwnOrphan(t *testing.T, h PeerHarness) {
	ps := newPeers(t, h, 1)
	ctx := context.Background()
	st := ps.stores[0]
	const inc = "inc_orphan"
	release := make(chan struct{})
	p := &funcProvider{name: "own", run: func(ctx context.Context, req provider.Request, emit func(provider.Event) error) error {
		if req.Prompt == "wait" {
			select {
			case <-release:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
		if err := emit(provider.Event{Kind: provider.TextDelta, Text: "done " + req.Prompt}); err != nil {
			return err
		}
		return emit(provider.Event{Kind: provider.TurnEnd, StopReason: "end_turn"})
	}}

	// Before the runtime starts, its owner (alive) holds a lease that
	// expires with no runner on it.
	require.NoError(t, st.HeartbeatOwner(ctx, inc, peerTTL))
	input, err := json.Marshal(belay.InputData{Prompt: "expired"})
	require.NoError(t, err)
	sess, err := st.CreateSession(ctx, belay.SessionInput{Provider: "own", FirstRun: &belay.RunInput{Provider: "own", Input: input}})
	require.NoError(t, err)
	cs, err := st.ClaimRuns(ctx, store.Claim{Owner: inc, Max: 1, TTL: time.Second})
	require.NoError(t, err)
	require.Len(t, cs, 1)
	expired := cs[0].Run
	ps.clk.Advance(2 * time.Second)
	cs, err = st.ClaimRuns(ctx, store.Claim{Owner: inc, Max: 1, TTL: time.Second})
	require.NoError(t, err)
	require.Empty(t, cs, "a claim never returns the claimer's own runs")

	a := ps.startAs(0, inc, nil, runtime.Limits{}, p)
	ps.eventually(func() bool {
		ps.clk.Advance(peerTTL / 8) // the runtime's look for its own runs
		r, err := st.Run(ctx, expired.ID)
		return err == nil && r.Status.Terminal()
	}, "the owner takes back its run whose lease expired")
	done := ps.wait(a, expired.ID)
	require.Equal(t, belay.RunComplete, done.Status, done.Reason)
	require.Greater(t, done.Epoch, expired.Epoch)
	require.Equal(t, inc, lastOwner(t, st, done))

	// A running run whose runner exits with the lease held by its owner:
	// here the lease is taken over under the same owner id, which the
	// runner learns at its next write and leaves the run as it is.
	run := ps.send(a, sess.ID, "wait", belay.PolicyEnqueue)
	leased := ps.runningOn(a, run.ID)
	taken, err := st.AcquireRunLease(ctx, run.ID, inc, peerTTL, leased.Epoch)
	require.NoError(t, err)
	close(release)
	ps.eventually(func() bool {
		ps.clk.Advance(peerTTL / 8) // the runtime's look for its own runs
		r, err := st.Run(ctx, run.ID)
		return err == nil && r.Status.Terminal()
	}, "the owner takes back its run that has no runner")
	done = ps.wait(a, run.ID)
	require.Equal(t, belay.RunComplete, done.Status, done.Reason)
	require.Greater(t, done.Epoch, taken.Epoch, "taken back under a new epoch")
	evs, err := st.Events(ctx, sess.ID, 0, 0)
	require.NoError(t, err)
	for _, e := range evs {
		if e.Run == run.ID && e.Epoch == leased.Epoch {
			require.NotEqual(t, "done wait", textOf(e), "no write from the epoch that was taken over")
		}
	}
}

// testPeerInbox: a consumer waiting on one instance is woken by a post on
// the other, and consumers on both never lease one item twice.
func testPeerInbox(t *testing.T, h PeerHarness) {
	ps := newPeers(t, h, 2)
	a := ps.start(0, nil, runtime.Limits{})
	b := ps.start(1, nil, runtime.Limits{})
	sess := ps.session(a, "none")
	got := make(chan []belay.Delivery, 1)
	base := ps.clk.Pending()
	go func() {
		ds, err := b.rt.Lease(context.Background(), sess, "agent-b", time.Hour, 1, time.Hour)
		if err != nil {
			t.Error(err)
		}
		got <- ds
	}()
	// Post once b waits; a post before the wait would be leased at once,
	// which proves nothing about waking.
	ps.eventually(func() bool { return ps.clk.Pending() > base }, "b waits (its wait armed a timer)")
	_, _, err := a.rt.Post(context.Background(), belay.DeliveryInput{Session: sess, Type: "ui.click", Key: "k0"})
	require.NoError(t, err)
	select {
	case ds := <-got:
		require.Len(t, ds, 1)
		require.Equal(t, "k0", ds[0].Key)
	case <-time.After(30 * time.Second):
		t.Fatal("a post on one instance did not wake a consumer on the other")
	}

	const n = 40
	for i := range n {
		_, _, err := a.rt.Post(context.Background(), belay.DeliveryInput{Session: sess, Type: "ui.click", Key: fmt.Sprintf("k%d", i+1)})
		require.NoError(t, err)
	}
	var mu sync.Mutex
	seen := map[string]string{}
	var wg sync.WaitGroup
	for i, p := range []*peer{a, b, a, b} {
		wg.Go(func() {
			consumer := fmt.Sprintf("c%d", i)
			for {
				ds, err := p.rt.Lease(context.Background(), sess, consumer, time.Hour, 3, 0)
				if err != nil {
					t.Error(err)
					return
				}
				if len(ds) == 0 {
					return
				}
				mu.Lock()
				for _, d := range ds {
					if other, ok := seen[d.ID]; ok {
						t.Errorf("delivery %s leased by %s and %s", d.ID, other, consumer)
					}
					seen[d.ID] = consumer
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Len(t, seen, n)
}

// testPeerLeaseOfStoppedPeer: an inbox item leased through an instance
// that then stops is redelivered when its lease expires to a consumer
// waiting on the other instance, within its wait, not at its end.
func testPeerLeaseOfStoppedPeer(t *testing.T, h PeerHarness) {
	ps := newPeers(t, h, 2)
	a := ps.start(0, nil, runtime.Limits{})
	b := ps.start(1, nil, runtime.Limits{})
	sess := ps.session(a, "none")
	_, _, err := a.rt.Post(context.Background(), belay.DeliveryInput{Session: sess, Type: "ui.click", Key: "k0"})
	require.NoError(t, err)
	base := ps.clk.Pending()
	first, err := b.rt.Lease(context.Background(), sess, "agent-b", time.Minute, 1, 0)
	require.NoError(t, err)
	require.Len(t, first, 1)
	// b arms its inbox timer for the lease, and a (following the feed)
	// arms its own.
	ps.eventually(func() bool { return ps.clk.Pending() >= base+2 }, "both instances know when the lease expires")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, b.rt.Stop(ctx))
	got := make(chan []belay.Delivery, 1)
	go func() {
		ds, err := a.rt.Lease(context.Background(), sess, "agent-a", time.Minute, 1, time.Hour)
		if err != nil {
			t.Error(err)
		}
		got <- ds
	}()
	ps.clk.Advance(time.Minute + time.Second)
	select {
	case ds := <-got:
		require.Len(t, ds, 1)
		require.Equal(t, first[0].ID, ds[0].ID)
		require.Greater(t, ds[0].Epoch, first[0].Epoch)
	case <-time.After(30 * time.Second):
		t.Fatal("the item leased through the stopped instance was not redelivered when its lease expired")
	}
}

// testPeerPolicies: follow-up policies decided in the store hold whichever
// instance receives the submit: reject sees a run submitted on the other,
// and interrupt stops the other's running run.
func testPeerPolicies(t *testing.T, h PeerHarness) {
	ps := newPeers(t, h, 2)
	g := newGate("gate")
	a := ps.start(0, nil, runtime.Limits{}, g)
	sess := ps.session(a, "gate")
	first := ps.send(a, sess, "one", belay.PolicyEnqueue)
	ps.runningOn(a, first.ID)
	b := ps.start(1, nil, runtime.Limits{}, g)
	_, err := b.rt.Submit(context.Background(), runtime.SubmitRequest{Session: sess, Prompt: "two", Policy: belay.PolicyReject})
	require.ErrorIs(t, err, runtime.ErrConversationBusy)
	second := ps.send(b, sess, "three", belay.PolicyInterrupt)
	ended := ps.wait(b, first.ID)
	require.Equal(t, belay.RunCancelled, ended.Status)
	require.Contains(t, ended.Reason, second.ID)
	close(g.release)
	require.Equal(t, belay.RunComplete, ps.wait(a, second.ID).Status)
}

// funcProvider is a provider made of a function.
type funcProvider struct {
	name string
	run  func(ctx context.Context, req provider.Request, emit func(provider.Event) error) error
}

func (p *funcProvider) Name() string                        { return p.name }
func (p *funcProvider) Capabilities() provider.Capabilities { return provider.Capabilities{} }
func (p *funcProvider) Run(ctx context.Context, req provider.Request, emit func(provider.Event) error) error {
	return p.run(ctx, req, emit)
}

// textOf returns the text of a text event, if it is one.
func textOf(e belay.Event) string {
	var p struct {
		Text string `json:"text"`
	}
	if jsonUnmarshal(e.Data, &p) != nil {
		return ""
	}
	return p.Text
}

var errNoJSON = errors.New("no JSON")

func jsonUnmarshal(b []byte, v any) error {
	if len(b) == 0 {
		return errNoJSON
	}
	return json.Unmarshal(b, v)
}
