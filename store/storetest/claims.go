package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/store"
)

// The tests in this file hold a store to the decisions it makes for every
// runtime over it (issue 14): submit under a policy, claims under the caps,
// rescue of gone owners' runs, durable cancel, and the change feed.

func (b *bundle) submit(session string, p belay.Policy, key string) store.SubmitResult {
	b.t.Helper()
	res, err := b.s.Submit(b.ctx, store.SubmitInput{Policy: p, RunInput: belay.RunInput{
		Session: session, IdempotencyKey: key, Input: json.RawMessage(`{"prompt":"hi"}`),
	}})
	require.NoError(b.t, err)
	return res
}

func (b *bundle) claim(owner string, max int, l store.Limits) []store.Claimed {
	b.t.Helper()
	require.NoError(b.t, b.s.HeartbeatOwner(b.ctx, owner, time.Hour))
	cs, err := b.s.ClaimRuns(b.ctx, store.Claim{Owner: owner, Max: max, TTL: time.Minute, Limits: l})
	require.NoError(b.t, err)
	for _, c := range cs {
		b.checkClaimed(c)
	}
	return cs
}

// checkClaimed holds what a claim read besides the run to what the store
// says of it: the runner uses them instead of reading them.
func (b *bundle) checkClaimed(c store.Claimed) {
	b.t.Helper()
	if c.Input != nil {
		in, err := b.s.RunInput(b.ctx, c.Run.ID)
		require.NoError(b.t, err)
		require.JSONEq(b.t, string(in), string(c.Input), "the claimed run's input")
	}
	if c.Session != nil {
		sess, err := b.s.Session(b.ctx, c.Run.Session)
		require.NoError(b.t, err)
		require.Equal(b.t, sess.ID, c.Session.ID)
		require.Equal(b.t, sess.Provider, c.Session.Provider)
		require.Equal(b.t, string(sess.Options), string(c.Session.Options))
		require.Equal(b.t, sess.Ref, c.Session.Ref)
		require.Equal(b.t, belay.SessionActive, c.Session.State, "its claimed run runs in it")
	}
}

func claimedIDs(cs []store.Claimed) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Run.ID
	}
	return out
}

func (b *bundle) finish(c store.Claimed) {
	b.t.Helper()
	_, err := b.s.UpdateRun(b.ctx, c.Run.ID, c.Run.Epoch, belay.RunUpdate{Phase: belay.PhaseComplete})
	require.NoError(b.t, err)
}

func testSubmitPolicies(t *testing.T, h Harness) {
	b := setup(t, h)
	sess := b.session()
	first := b.submit(sess.ID, belay.PolicyEnqueue, "a")
	require.True(t, first.Created)
	require.Equal(t, belay.RunQueued, first.Run.Status)

	// The same key is the same run, whatever the policy.
	again := b.submit(sess.ID, belay.PolicyReject, "a")
	require.False(t, again.Created)
	require.Equal(t, first.Run.ID, again.Run.ID)

	// Reject refuses while the session has a queued run, and creates nothing.
	_, err := b.s.Submit(b.ctx, store.SubmitInput{Policy: belay.PolicyReject, RunInput: belay.RunInput{Session: sess.ID}})
	require.ErrorIs(t, err, store.ErrConversationBusy)
	runs, err := b.s.Runs(b.ctx, belay.RunFilter{Session: sess.ID})
	require.NoError(t, err)
	require.Len(t, runs, 1)

	// Replace cancels the queued runs in the same write.
	second := b.submit(sess.ID, belay.PolicyEnqueue, "")
	repl := b.submit(sess.ID, belay.PolicyReplace, "")
	require.ElementsMatch(t, []string{first.Run.ID, second.Run.ID}, repl.Cancelled)
	for _, id := range repl.Cancelled {
		r, err := b.s.Run(b.ctx, id)
		require.NoError(t, err)
		require.Equal(t, belay.RunCancelled, r.Status)
		require.Contains(t, r.Reason, repl.Run.ID)
	}

	// Interrupt asks the running run to cancel and runs next, ahead of
	// the runs queued before it.
	cs := b.claim("w1", 0, store.Limits{})
	require.Equal(t, []string{repl.Run.ID}, claimedIDs(cs))
	queued := b.submit(sess.ID, belay.PolicyEnqueue, "")
	intr := b.submit(sess.ID, belay.PolicyInterrupt, "")
	require.Equal(t, repl.Run.ID, intr.Interrupted)
	running, err := b.s.Run(b.ctx, repl.Run.ID)
	require.NoError(t, err)
	require.NotNil(t, running.CancelRequest)
	require.Equal(t, intr.Run.ID, running.CancelRequest.By)
	require.Empty(t, b.claim("w1", 0, store.Limits{}), "one active run per session")
	b.finish(cs[0])
	require.Equal(t, []string{intr.Run.ID}, claimedIDs(b.claim("w1", 0, store.Limits{})), "the interrupting run goes first")

	// The order survives a restart.
	b.reopen()
	r, err := b.s.Run(b.ctx, intr.Run.ID)
	require.NoError(t, err)
	_, err = b.s.UpdateRun(b.ctx, r.ID, r.Epoch, belay.RunUpdate{Phase: belay.PhaseComplete})
	require.NoError(t, err)
	require.Equal(t, []string{queued.Run.ID}, claimedIDs(b.claim("w2", 0, store.Limits{})))

	_, err = b.s.Submit(b.ctx, store.SubmitInput{Policy: "sideways", RunInput: belay.RunInput{Session: sess.ID}})
	require.ErrorIs(t, err, belay.ErrInvalid)
}

func testClaimOrderAndCaps(t *testing.T, h Harness) {
	b := setup(t, h)
	type sub struct {
		prov string
		prio int
	}
	subs := []sub{{"slow", 0}, {"fast", 0}, {"slow", 5}, {"fast", 9}, {"slow", 0}}
	var want []string
	for _, s := range subs {
		sess, err := b.s.CreateSession(b.ctx, belay.SessionInput{Provider: s.prov})
		require.NoError(t, err)
		res, err := b.s.Submit(b.ctx, store.SubmitInput{RunInput: belay.RunInput{Session: sess.ID, Priority: s.prio, Input: json.RawMessage(`{}`)}})
		require.NoError(t, err)
		want = append(want, res.Run.ID)
	}
	limits := store.Limits{Global: 3, PerProvider: map[string]int{"slow": 1}}
	cs := b.claim("w1", 0, limits)
	// Priority first, within caps: fast/9, slow/5 (slow is then full),
	// fast/0.
	require.Equal(t, []string{want[3], want[2], want[1]}, claimedIDs(cs))
	for _, c := range cs {
		require.Equal(t, belay.RunRunning, c.Run.Status)
		require.Equal(t, "w1", c.Run.Lease.Owner)
		require.False(t, c.Rescued)
	}
	n, err := b.s.Counts(b.ctx)
	require.NoError(t, err)
	require.Equal(t, store.Counts{Queued: 2, Running: 3}, n)
	require.Empty(t, b.claim("w2", 0, limits), "the global cap counts every owner's runs")
	b.finish(cs[1]) // slow/5 ends: slow has room again
	require.Equal(t, []string{want[0]}, claimedIDs(b.claim("w2", 0, limits)), "FIFO among equals")
	// Max bounds one claim; without caps the last slow run starts.
	b.finish(cs[0])
	b.finish(cs[2])
	require.Equal(t, []string{want[4]}, claimedIDs(b.claim("w2", 1, store.Limits{})))
	require.Empty(t, b.claim("w2", 1, store.Limits{}))
}

func testClaimRescue(t *testing.T, h Harness) {
	b := setup(t, h)
	sess := b.session()
	r := b.submit(sess.ID, belay.PolicyEnqueue, "")
	require.NoError(t, b.s.HeartbeatOwner(b.ctx, "w1", time.Minute))
	cs, err := b.s.ClaimRuns(b.ctx, store.Claim{Owner: "w1", TTL: 10 * time.Minute})
	require.NoError(t, err)
	require.Len(t, cs, 1)
	epoch := cs[0].Run.Epoch

	// A live owner's run under its lease is never rescued.
	require.Empty(t, b.claim("w2", 0, store.Limits{}))
	owners, err := b.s.Owners(b.ctx)
	require.NoError(t, err)
	require.Len(t, owners, 2)

	// The owner's record expires (it stopped heartbeating): rescued, with a
	// new epoch that fences the old owner's writes.
	b.clk.Advance(2 * time.Minute)
	require.NoError(t, b.s.HeartbeatOwner(b.ctx, "w2", time.Hour))
	cs2, err := b.s.ClaimRuns(b.ctx, store.Claim{Owner: "w2", TTL: time.Minute})
	require.NoError(t, err)
	require.Len(t, cs2, 1)
	require.True(t, cs2[0].Rescued)
	require.Equal(t, r.Run.ID, cs2[0].Run.ID)
	require.Greater(t, cs2[0].Run.Epoch, epoch)
	_, err = b.s.UpdateRun(b.ctx, r.Run.ID, epoch, belay.RunUpdate{Phase: belay.PhaseComplete})
	require.ErrorIs(t, err, belay.ErrStaleEpoch)

	// A live owner whose lease expired (it could not renew) loses it too.
	require.NoError(t, b.s.HeartbeatOwner(b.ctx, "w3", time.Hour))
	b.clk.Advance(2 * time.Minute)
	require.NoError(t, b.s.HeartbeatOwner(b.ctx, "w2", time.Hour))
	cs3 := b.claim("w3", 0, store.Limits{})
	require.Len(t, cs3, 1)
	require.True(t, cs3[0].Rescued)

	// A retired owner's runs are rescued at once, and the claimer's own
	// runs never are.
	require.Empty(t, b.claim("w3", 0, store.Limits{}))
	require.NoError(t, b.s.RetireOwner(b.ctx, "w3"))
	cs4 := b.claim("w1", 0, store.Limits{})
	require.Len(t, cs4, 1)
	b.finish(cs4[0])
}

// testRescueBeyondOneClaim: a gone owner's runs, more than one claim
// takes, are all rescued by the claims that follow, a claim's Max at a
// time: none is left running under the dead owner's lease (a daemon
// killed with more runs in flight than its claim batch).
func testRescueBeyondOneClaim(t *testing.T, h Harness) {
	b := setup(t, h)
	const n = 5
	want := map[string]bool{}
	for range n {
		r := b.submit(b.session().ID, belay.PolicyEnqueue, "")
		want[r.Run.ID] = true
	}
	require.Len(t, b.claim("dead", n, store.Limits{}), n)
	require.NoError(t, b.s.RetireOwner(b.ctx, "dead"))
	got := map[string]bool{}
	for range n {
		cs := b.claim("alive", 2, store.Limits{})
		require.LessOrEqual(t, len(cs), 2)
		for _, c := range cs {
			require.True(t, c.Rescued)
			got[c.Run.ID] = true
		}
	}
	require.Equal(t, want, got, "every run of the gone owner rescued")
}

func testRequestCancel(t *testing.T, h Harness) {
	b := setup(t, h)
	sess := b.session()
	q := b.submit(sess.ID, belay.PolicyEnqueue, "")
	// Queued: cancelled at once.
	r, err := b.s.RequestCancel(b.ctx, q.Run.ID, "no longer needed")
	require.NoError(t, err)
	require.Equal(t, belay.RunCancelled, r.Status)
	require.Equal(t, "no longer needed", r.Reason)
	_, err = b.s.RequestCancel(b.ctx, q.Run.ID, "again")
	require.ErrorIs(t, err, belay.ErrTerminal)

	// Running: a durable request the owner carries out.
	q2 := b.submit(sess.ID, belay.PolicyEnqueue, "")
	cs := b.claim("w1", 0, store.Limits{})
	require.Len(t, cs, 1)
	r, err = b.s.RequestCancel(b.ctx, q2.Run.ID, "stop")
	require.NoError(t, err)
	require.Equal(t, belay.RunRunning, r.Status)
	require.NotNil(t, r.CancelRequest)
	require.Equal(t, "stop", r.CancelRequest.Reason)
	again, err := b.s.RequestCancel(b.ctx, q2.Run.ID, "other")
	require.NoError(t, err)
	require.Equal(t, "stop", again.CancelRequest.Reason, "idempotent: the first request stands")
	b.reopen()
	r, err = b.s.Run(b.ctx, q2.Run.ID)
	require.NoError(t, err)
	require.NotNil(t, r.CancelRequest, "the request is durable")
}

func testActivityPersisted(t *testing.T, h Harness) {
	b := setup(t, h)
	sess := b.session()
	b.submit(sess.ID, belay.PolicyEnqueue, "")
	cs := b.claim("w1", 0, store.Limits{})
	require.Len(t, cs, 1)
	at := Start.Add(-3 * time.Second)
	_, err := b.s.RenewRunLease(b.ctx, cs[0].Run.ID, cs[0].Run.Epoch, time.Minute, &belay.RunActivity{LastProgress: at, Tier: "streaming"})
	require.NoError(t, err)
	b.reopen()
	r, err := b.s.Run(b.ctx, cs[0].Run.ID)
	require.NoError(t, err)
	require.NotNil(t, r.Activity)
	require.True(t, at.Equal(r.Activity.LastProgress))
	require.Equal(t, "streaming", r.Activity.Tier)
}

func testChangeFeed(t *testing.T, h Harness) {
	b := setup(t, h)
	head, err := b.s.ChangeHead(b.ctx)
	require.NoError(t, err)
	sess := b.session()
	q := b.submit(sess.ID, belay.PolicyEnqueue, "")
	cs := b.claim("w1", 0, store.Limits{})
	require.Len(t, cs, 1)
	_, err = b.s.RequestCancel(b.ctx, q.Run.ID, "stop")
	require.NoError(t, err)
	_, err = b.s.UpdateRun(b.ctx, q.Run.ID, cs[0].Run.Epoch, belay.RunUpdate{Phase: belay.PhaseCancelled})
	require.NoError(t, err)
	d := post(t, b, sess.ID, "ui.click", "", 0)

	var got []store.Change
	cursor := head
	for len(got) < 5 {
		require.NoError(t, b.s.WaitChanges(b.ctx, cursor))
		chs, next, err := b.s.Changes(b.ctx, cursor, 2)
		require.NoError(t, err)
		require.LessOrEqual(t, len(chs), 2)
		for i, c := range chs {
			require.Equal(t, cursor+uint64(i)+1, c.Cursor, "no gaps")
		}
		got, cursor = append(got, chs...), next
	}
	types := []string{}
	for _, c := range got {
		types = append(types, c.Type)
		require.Equal(t, sess.ID, c.Session)
	}
	// The claim's lease is not in it (store.InFeed): its owner is the claimer.
	require.Equal(t, []string{belay.EventSessionCreated, belay.EventRunCreated,
		belay.EventRunCancelRequested, belay.EventRunUpdated, belay.EventDeliveryPosted}, types)
	require.Equal(t, q.Run.ID, got[2].Run)
	require.True(t, got[3].Ended)
	require.Equal(t, d.ID, got[4].Delivery)
	for i := 1; i < len(got); i++ {
		require.Greater(t, got[i].Seq, got[i-1].Seq, "in seq order within a session")
	}
	// Nothing more: a wait blocks until the next change.
	chs, next, err := b.s.Changes(b.ctx, cursor, 0)
	require.NoError(t, err)
	require.Empty(t, chs)
	require.Equal(t, cursor, next)
	woke := make(chan error, 1)
	go func() { woke <- b.s.WaitChanges(b.ctx, cursor) }()
	b.session()
	require.NoError(t, <-woke)
}

// testSubmitClaim holds a submit that asks for the run's lease
// (SubmitInput.Claim) to the claim's rules: it may lease only what a
// claim by that owner would lease first, and a store may always decline.
func testSubmitClaim(t *testing.T, h Harness) {
	b := setup(t, h)
	sess := b.session()
	submit := func(session, owner string, l store.Limits) store.SubmitResult {
		t.Helper()
		res, err := b.s.Submit(b.ctx, store.SubmitInput{Policy: belay.PolicyEnqueue,
			RunInput: belay.RunInput{Session: session, Input: json.RawMessage(`{"prompt":"hi"}`)},
			Claim:    &store.Claim{Owner: owner, TTL: time.Minute, Limits: l}})
		require.NoError(t, err)
		require.True(t, res.Created)
		return res
	}
	_, err := b.s.Submit(b.ctx, store.SubmitInput{Policy: belay.PolicyEnqueue, RunInput: belay.RunInput{Session: sess.ID},
		Claim: &store.Claim{TTL: time.Minute}})
	require.ErrorIs(t, err, belay.ErrInvalid, "a claim needs an owner")
	runs, err := b.s.Runs(b.ctx, belay.RunFilter{Session: sess.ID})
	require.NoError(t, err)
	require.Empty(t, runs, "a refused submit creates nothing")

	// Nothing waits (a claim has looked for runs to rescue): the run may
	// be leased in the write that creates it, exactly as a claim would.
	require.Empty(t, b.claim("w1", 0, store.Limits{}))
	first := submit(sess.ID, "w1", store.Limits{})
	if c := first.Claimed; c != nil {
		require.Equal(t, first.Run, c.Run)
		require.Equal(t, belay.RunRunning, c.Run.Status)
		require.Equal(t, belay.PhaseAdmitted, c.Run.Phase)
		require.NotNil(t, c.Run.Lease)
		require.Equal(t, "w1", c.Run.Lease.Owner)
		require.Equal(t, uint64(1), c.Run.Epoch)
		require.True(t, c.Run.Lease.ExpiresAt.Equal(b.clk.Now().Add(time.Minute)), "the lease runs for the claim's TTL")
		b.checkClaimed(*c)
		got, err := b.s.Run(b.ctx, c.Run.ID)
		require.NoError(t, err)
		require.Equal(t, c.Run, got)
		require.Empty(t, b.claim("w2", 0, store.Limits{}), "a leased run is not claimed again")
		n, err := b.s.Counts(b.ctx)
		require.NoError(t, err)
		require.Equal(t, store.Counts{Running: 1}, n)
		// The lease fences like a claim's: its epoch ends the run.
		b.finish(*c)
	} else {
		require.Equal(t, belay.RunQueued, first.Run.Status, "declined: the run is queued")
		cs := b.claim("w1", 0, store.Limits{})
		require.Equal(t, []string{first.Run.ID}, claimedIDs(cs))
		b.finish(cs[0])
	}

	// Never while the session has a run: one active run per session.
	other := b.session()
	busy := submit(other.ID, "w1", store.Limits{})
	if busy.Claimed == nil {
		cs := b.claim("w1", 0, store.Limits{})
		require.Equal(t, []string{busy.Run.ID}, claimedIDs(cs))
	}
	behind := submit(other.ID, "w1", store.Limits{})
	require.Nil(t, behind.Claimed, "the session's run is active")
	require.Equal(t, belay.RunQueued, behind.Run.Status)

	// Never ahead of a queued run a claim would take first (priority,
	// then FIFO), and never past the caps.
	waiting := b.submit(b.session().ID, belay.PolicyEnqueue, "")
	late := submit(b.session().ID, "w1", store.Limits{})
	require.Nil(t, late.Claimed, "a queued run of another session waits")
	require.Equal(t, []string{waiting.Run.ID, late.Run.ID}, claimedIDs(b.claim("w1", 0, store.Limits{})))
	capped := submit(b.session().ID, "w1", store.Limits{Global: 3})
	require.Nil(t, capped.Claimed, "three runs are active under a global cap of 3")
	require.Equal(t, belay.RunQueued, capped.Run.Status)
	n, err := b.s.Counts(b.ctx)
	require.NoError(t, err)
	require.Equal(t, store.Counts{Running: 3, Queued: 2}, n)

	// An idempotent repeat returns the run as it is, leased or not.
	keyed, err := b.s.Submit(b.ctx, store.SubmitInput{Policy: belay.PolicyEnqueue, RunInput: belay.RunInput{Session: sess.ID, IdempotencyKey: "k"},
		Claim: &store.Claim{Owner: "w1", TTL: time.Minute}})
	require.NoError(t, err)
	again, err := b.s.Submit(b.ctx, store.SubmitInput{Policy: belay.PolicyEnqueue, RunInput: belay.RunInput{Session: sess.ID, IdempotencyKey: "k"},
		Claim: &store.Claim{Owner: "w2", TTL: time.Minute}})
	require.NoError(t, err)
	require.False(t, again.Created)
	require.Nil(t, again.Claimed)
	require.Equal(t, keyed.Run.ID, again.Run.ID)
}

func testClaimRace(t *testing.T, h Harness) {
	b := setup(t, h)
	const sessions, perSession, owners = 8, 4, 4
	limits := store.Limits{Global: 5, PerProvider: map[string]int{"fake": 3}}
	for range sessions {
		sess := b.session()
		for range perSession {
			b.submit(sess.ID, belay.PolicyEnqueue, "")
		}
	}
	for o := range owners {
		require.NoError(t, b.s.HeartbeatOwner(b.ctx, string(rune('a'+o)), time.Hour))
	}
	var mu sync.Mutex
	running := map[string]string{} // session -> run
	done := 0
	var wg sync.WaitGroup
	errs := make(chan error, owners)
	for o := range owners {
		wg.Go(func() {
			owner := string(rune('a' + o))
			for {
				mu.Lock()
				finished := done == sessions*perSession
				mu.Unlock()
				if finished {
					return
				}
				cs, err := b.s.ClaimRuns(b.ctx, store.Claim{Owner: owner, TTL: time.Hour, Limits: limits})
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for _, c := range cs {
					if other, ok := running[c.Run.Session]; ok {
						mu.Unlock()
						errs <- errors.New("two runs active in session " + c.Run.Session + ": " + other + " and " + c.Run.ID)
						return
					}
					running[c.Run.Session] = c.Run.ID
				}
				if len(running) > limits.Global {
					mu.Unlock()
					errs <- errors.New("the global cap was exceeded")
					return
				}
				mu.Unlock()
				// Finish them; the map forgets a run before the store frees
				// its slot, so an overlap is always caught.
				for _, c := range cs {
					mu.Lock()
					delete(running, c.Run.Session)
					done++
					mu.Unlock()
					if _, err := b.s.UpdateRun(b.ctx, c.Run.ID, c.Run.Epoch, belay.RunUpdate{Phase: belay.PhaseComplete}); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	n, err := b.s.Counts(b.ctx)
	require.NoError(t, err)
	require.Equal(t, store.Counts{}, n)
}

// testClaimWhileSubmitting claims in a tight loop while runs are created
// by every path (Submit, CreateRun, a session's first run, SubmitBatch): a
// run is claimable as soon as the scheduler or the feed can name it, so no
// claim may fail for a run that was just created, and every run is claimed
// once. (A claim that failed would give the run back with nothing left to
// wake a claimer: the runtime would only find it at its next retry.)
func testClaimWhileSubmitting(t *testing.T, h Harness) {
	b := setup(t, h)
	const submitters, perSubmitter = 4, 40
	require.NoError(t, b.s.HeartbeatOwner(b.ctx, "claimer", time.Hour))
	require.NoError(t, b.s.HeartbeatOwner(b.ctx, "submitter", time.Hour))
	in := json.RawMessage(`{"prompt":"hi"}`)
	var submitted sync.WaitGroup
	errs := make(chan error, submitters+1)
	var mu sync.Mutex
	claimed := map[string]bool{}
	take := func(id string) error {
		mu.Lock()
		defer mu.Unlock()
		if claimed[id] {
			return errors.New("run " + id + " claimed twice")
		}
		claimed[id] = true
		return nil
	}
	for w := range submitters {
		submitted.Go(func() {
			for i := range perSubmitter {
				var err error
				switch (w + i) % 4 {
				case 0:
					_, err = b.s.CreateSession(b.ctx, belay.SessionInput{Provider: "fake", FirstRun: &belay.RunInput{Input: in}})
				case 1:
					// Asking for the lease as it submits: what it gets is
					// claimed once, like what the claimer gets.
					var sess belay.Session
					if sess, err = b.s.CreateSession(b.ctx, belay.SessionInput{Provider: "fake"}); err == nil {
						var res store.SubmitResult
						res, err = b.s.Submit(b.ctx, store.SubmitInput{Policy: belay.PolicyEnqueue, RunInput: belay.RunInput{Session: sess.ID, Input: in},
							Claim: &store.Claim{Owner: "submitter", TTL: time.Hour}})
						if err == nil && res.Claimed != nil {
							err = take(res.Claimed.Run.ID)
						}
					}
				case 2:
					var sess belay.Session
					if sess, err = b.s.CreateSession(b.ctx, belay.SessionInput{Provider: "fake"}); err == nil {
						_, _, err = b.s.CreateRun(b.ctx, belay.RunInput{Session: sess.ID, Input: in})
					}
				case 3:
					var sess belay.Session
					if sess, err = b.s.CreateSession(b.ctx, belay.SessionInput{Provider: "fake"}); err == nil {
						_, es := b.s.SubmitBatch(b.ctx, []store.SubmitInput{{Policy: belay.PolicyEnqueue, RunInput: belay.RunInput{Session: sess.ID, Input: in}}})
						err = errors.Join(es...)
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	stop := make(chan struct{})
	var claimer sync.WaitGroup
	claimer.Go(func() {
		for last := false; ; {
			select {
			case <-stop:
				last = true // one more claim after the last submit
			default:
			}
			cs, err := b.s.ClaimRuns(b.ctx, store.Claim{Owner: "claimer", Max: 8, TTL: time.Hour})
			if err != nil {
				errs <- fmt.Errorf("a claim failed while runs were being created: %w", err)
				return
			}
			for _, c := range cs {
				if err := take(c.Run.ID); err != nil {
					errs <- err
					return
				}
			}
			if last && len(cs) == 0 {
				return
			}
		}
	})
	submitted.Wait()
	close(stop)
	claimer.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, claimed, submitters*perSubmitter, "every run created is claimed")
}

func testSubmitBatch(t *testing.T, h Harness) {
	b := setup(t, h)
	s1, s2, s3 := b.session(), b.session(), b.session()
	in := func(session string, p belay.Policy, key string) store.SubmitInput {
		return store.SubmitInput{Policy: p, RunInput: belay.RunInput{Session: session, IdempotencyKey: key, Input: json.RawMessage(`{"prompt":"` + key + `"}`)}}
	}
	ins := []store.SubmitInput{
		in(s1.ID, belay.PolicyEnqueue, "a"),
		in(s2.ID, belay.PolicyEnqueue, ""),
		in(s1.ID, belay.PolicyEnqueue, "b"),
		in(s3.ID, belay.PolicyReject, "c"),
		in(s3.ID, belay.PolicyReject, "d"), // s3 has c queued now: busy
		{Policy: "sometimes", RunInput: belay.RunInput{Session: s2.ID}},
		in(s1.ID, belay.PolicyEnqueue, "a"), // the key of the first: the same run
		in(s2.ID, belay.PolicyEnqueue, "a"), // the same key in another session: a new run
		in("ses_missing", belay.PolicyEnqueue, ""),
	}
	res, errs := b.s.SubmitBatch(b.ctx, ins)
	require.Len(t, res, len(ins))
	require.Len(t, errs, len(ins))
	for _, i := range []int{0, 1, 2, 3, 7} {
		require.NoError(t, errs[i], "submission %d", i)
		require.True(t, res[i].Created, "submission %d", i)
		require.Equal(t, ins[i].Session, res[i].Run.Session)
		require.Equal(t, belay.RunQueued, res[i].Run.Status)
	}
	require.ErrorIs(t, errs[4], store.ErrConversationBusy)
	require.Zero(t, res[4])
	require.ErrorIs(t, errs[5], belay.ErrInvalid)
	require.NoError(t, errs[6])
	require.False(t, res[6].Created)
	require.Equal(t, res[0].Run.ID, res[6].Run.ID)
	require.NotEqual(t, res[0].Run.ID, res[7].Run.ID)
	require.Error(t, errs[8])

	// Durable, each once, a session's runs in the order given.
	b.reopen()
	runs, err := b.s.Runs(b.ctx, belay.RunFilter{Session: s1.ID})
	require.NoError(t, err)
	require.Equal(t, []string{res[0].Run.ID, res[2].Run.ID}, []string{runs[0].ID, runs[1].ID})
	require.Len(t, runs, 2)
	runs, err = b.s.Runs(b.ctx, belay.RunFilter{Session: s3.ID})
	require.NoError(t, err)
	require.Len(t, runs, 1)
	input, err := b.s.RunInput(b.ctx, res[3].Run.ID)
	require.NoError(t, err)
	require.JSONEq(t, `{"prompt":"c"}`, string(input))
	// A retry of the whole batch returns the same runs for the keyed ones.
	res2, errs2 := b.s.SubmitBatch(b.ctx, ins[:4])
	for i := range 4 {
		require.NoError(t, errs2[i])
	}
	require.False(t, res2[0].Created)
	require.Equal(t, res[0].Run.ID, res2[0].Run.ID)
	require.Equal(t, res[2].Run.ID, res2[2].Run.ID)
	require.Equal(t, res[3].Run.ID, res2[3].Run.ID)
	require.True(t, res2[1].Created, "no key: a new run")
	// The scheduler knows the batch's runs: a claim takes the sessions'
	// first runs.
	cs := b.claim("w1", 0, store.Limits{})
	got := []string{}
	for _, c := range cs {
		got = append(got, c.Run.ID)
	}
	require.ElementsMatch(t, []string{res[0].Run.ID, res[1].Run.ID, res[3].Run.ID}, got)
}

// testFeedLeavesOutSteps: a running run's steps (phase changes, lease
// renewals) are not in the change feed; its end is (store.InFeed).
func testFeedLeavesOutSteps(t *testing.T, h Harness) {
	b := setup(t, h)
	sess := b.session()
	q := b.submit(sess.ID, belay.PolicyEnqueue, "")
	cs := b.claim("w1", 0, store.Limits{})
	require.Len(t, cs, 1)
	head, err := b.s.ChangeHead(b.ctx)
	require.NoError(t, err)
	ep := cs[0].Run.Epoch
	_, err = b.s.UpdateRun(b.ctx, q.Run.ID, ep, belay.RunUpdate{Phase: belay.PhaseStreaming})
	require.NoError(t, err)
	_, err = b.s.RenewRunLease(b.ctx, q.Run.ID, ep, time.Minute, nil)
	require.NoError(t, err)
	_, err = b.s.UpdateRun(b.ctx, q.Run.ID, ep, belay.RunUpdate{Phase: belay.PhaseComplete})
	require.NoError(t, err)
	require.NoError(t, b.s.WaitChanges(b.ctx, head))
	chs, _, err := b.s.Changes(b.ctx, head, 0)
	require.NoError(t, err)
	require.Len(t, chs, 1)
	require.Equal(t, belay.EventRunUpdated, chs[0].Type)
	require.True(t, chs[0].Ended)
}
