package pgstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/clock"
	"github.com/belayhq/belay/store"
	"github.com/belayhq/belay/store/pgstore"
)

// claimIDs returns the ids of what a claim leased.
func claimIDs(cs []store.Claimed) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Run.ID)
	}
	return out
}

// TestClaimOrder: one claim takes priority then FIFO, one run per
// session, within the caps, and journals run.leased with the session's
// next seq.
func TestClaimOrder(t *testing.T) {
	ctx := context.Background()
	s := open(t, database(t), nil)
	defer s.Close()
	mk := func(provider string, prio int) (belay.Session, belay.Run) {
		sess, err := s.CreateSession(ctx, belay.SessionInput{Provider: provider})
		require.NoError(t, err)
		r, _, err := s.CreateRun(ctx, belay.RunInput{Session: sess.ID, Priority: prio, Input: json.RawMessage(`{}`)})
		require.NoError(t, err)
		return sess, r
	}
	_, low := mk("a", 0)
	sessHigh, high := mk("a", 5)
	next, _, err := s.CreateRun(ctx, belay.RunInput{Session: sessHigh.ID, Priority: 9}) // same session: waits its turn
	require.NoError(t, err)
	_, b1 := mk("b", 1)
	_, b2 := mk("b", 1)
	lim := store.Limits{PerProvider: map[string]int{"b": 1}}
	// Live owners: neither rescues the other's runs.
	require.NoError(t, s.HeartbeatOwner(ctx, "o1", time.Hour))
	require.NoError(t, s.HeartbeatOwner(ctx, "o2", time.Hour))

	got, err := s.ClaimRuns(ctx, store.Claim{Owner: "o1", Max: 10, TTL: time.Minute, Limits: lim})
	require.NoError(t, err)
	require.Equal(t, []string{high.ID, b1.ID, low.ID}, claimIDs(got), "priority then FIFO; one run per session; b capped at 1")
	for _, c := range got {
		require.False(t, c.Rescued)
		require.Equal(t, uint64(1), c.Run.Epoch)
		require.Equal(t, belay.RunRunning, c.Run.Status)
		require.Equal(t, belay.PhaseAdmitted, c.Run.Phase)
		require.Equal(t, "o1", c.Run.Lease.Owner)
	}
	counts, err := s.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, store.Counts{Queued: 2, Running: 3}, counts)

	evs, err := s.Events(ctx, sessHigh.ID, 0, 0)
	require.NoError(t, err)
	last := evs[len(evs)-1]
	require.Equal(t, belay.EventRunLeased, last.Type)
	require.Equal(t, uint64(len(evs)), last.Seq, "gap-free with the store's own writes")
	require.Equal(t, uint64(1), last.Epoch)

	// The claimed lease is the store's lease: the owner writes under it.
	_, err = s.UpdateRun(ctx, high.ID, 1, belay.RunUpdate{Phase: belay.PhaseComplete})
	require.NoError(t, err)
	again, err := s.ClaimRuns(ctx, store.Claim{Owner: "o1", Max: 10, TTL: time.Minute, Limits: lim})
	require.NoError(t, err)
	require.Equal(t, []string{next.ID}, claimIDs(again), "the session's next run; b stays at its cap")
	require.NotContains(t, claimIDs(again), b2.ID)

	// The global cap counts every running run.
	_, err = s.UpdateRun(ctx, b1.ID, 1, belay.RunUpdate{Phase: belay.PhaseComplete})
	require.NoError(t, err)
	none, err := s.ClaimRuns(ctx, store.Claim{Owner: "o2", Max: 10, TTL: time.Minute, Limits: store.Limits{Global: 2}})
	require.NoError(t, err)
	require.Empty(t, none, "two running (low, next): at the global cap")
	one, err := s.ClaimRuns(ctx, store.Claim{Owner: "o2", Max: 10, TTL: time.Minute, Limits: store.Limits{Global: 3}})
	require.NoError(t, err)
	require.Equal(t, []string{b2.ID}, claimIDs(one))

	_, err = s.ClaimRuns(ctx, store.Claim{Owner: "", TTL: time.Minute})
	require.ErrorIs(t, err, belay.ErrInvalid)
}

// TestSubmitPolicies: reject, replace and interrupt decide in one write;
// an interrupting run goes next, the newest first; idempotency keys win
// over the policy.
func TestSubmitPolicies(t *testing.T) {
	ctx := context.Background()
	s := open(t, database(t), nil)
	defer s.Close()
	sess, err := s.CreateSession(ctx, belay.SessionInput{Provider: "p"})
	require.NoError(t, err)
	submit := func(p belay.Policy, key string) store.SubmitResult {
		t.Helper()
		res, err := s.Submit(ctx, store.SubmitInput{Policy: p, RunInput: belay.RunInput{Session: sess.ID, IdempotencyKey: key, Input: json.RawMessage(`{"n":1}`)}})
		require.NoError(t, err)
		return res
	}
	claimOne := func() string {
		t.Helper()
		cs, err := s.ClaimRuns(ctx, store.Claim{Owner: "o", Max: 10, TTL: time.Minute})
		require.NoError(t, err)
		require.Len(t, cs, 1)
		return cs[0].Run.ID
	}
	r1 := submit(belay.PolicyReject, "k1")
	require.True(t, r1.Created)
	_, err = s.Submit(ctx, store.SubmitInput{Policy: belay.PolicyReject, RunInput: belay.RunInput{Session: sess.ID}})
	require.ErrorIs(t, err, store.ErrConversationBusy)
	dup := submit(belay.PolicyReject, "k1")
	require.False(t, dup.Created, "a known key returns the original whatever the policy")
	require.Equal(t, r1.Run.ID, dup.Run.ID)
	_, err = s.Submit(ctx, store.SubmitInput{Policy: "sideways", RunInput: belay.RunInput{Session: sess.ID}})
	require.ErrorIs(t, err, belay.ErrInvalid)

	require.Equal(t, r1.Run.ID, claimOne())
	q1, q2 := submit(belay.PolicyEnqueue, ""), submit("", "")
	rep := submit(belay.PolicyReplace, "")
	require.Equal(t, []string{q1.Run.ID, q2.Run.ID}, rep.Cancelled)
	for _, id := range rep.Cancelled {
		r, err := s.Run(ctx, id)
		require.NoError(t, err)
		require.Equal(t, belay.RunCancelled, r.Status)
		require.Equal(t, "replaced by "+rep.Run.ID, r.Reason)
	}

	i1 := submit(belay.PolicyInterrupt, "")
	require.Equal(t, r1.Run.ID, i1.Interrupted)
	running, err := s.Run(ctx, r1.Run.ID)
	require.NoError(t, err)
	require.NotNil(t, running.CancelRequest)
	require.Equal(t, i1.Run.ID, running.CancelRequest.By)
	require.Equal(t, "interrupted by run "+i1.Run.ID, running.CancelRequest.Reason)
	i2 := submit(belay.PolicyInterrupt, "")
	require.Equal(t, r1.Run.ID, i2.Interrupted)
	again, err := s.Run(ctx, r1.Run.ID)
	require.NoError(t, err)
	require.Equal(t, i1.Run.ID, again.CancelRequest.By, "the first request stands")

	_, err = s.UpdateRun(ctx, r1.Run.ID, 1, belay.RunUpdate{Phase: belay.PhaseCancelled, Error: &belay.RunError{Class: belay.ClassCancelled}})
	require.NoError(t, err)
	// Conversation order now: i2 (newest front), i1, then rep (FIFO).
	for _, want := range []string{i2.Run.ID, i1.Run.ID, rep.Run.ID} {
		id := claimOne()
		require.Equal(t, want, id)
		r, err := s.Run(ctx, id)
		require.NoError(t, err)
		_, err = s.UpdateRun(ctx, id, r.Epoch, belay.RunUpdate{Phase: belay.PhaseComplete})
		require.NoError(t, err)
	}
}

// TestClaimRace: claimers on two stores (two nodes, two pools) race while
// runs finish; the caps and one running run per session are never
// exceeded and no run is claimed twice, with caps and without (when
// claims count nothing).
func TestClaimRace(t *testing.T) {
	t.Run("caps", func(t *testing.T) {
		claimRace(t, store.Limits{Global: 5, PerProvider: map[string]int{"p": 2, "q": 1}})
	})
	t.Run("no caps", func(t *testing.T) { claimRace(t, store.Limits{}) })
}

func claimRace(t *testing.T, lim store.Limits) {
	ctx := context.Background()
	a, b := twoNodes(t)
	const sessions, perSession = 12, 4
	for i := 0; i < sessions; i++ {
		sess, err := a.CreateSession(ctx, belay.SessionInput{Provider: []string{"p", "q", "r"}[i%3]})
		require.NoError(t, err)
		for j := 0; j < perSession; j++ {
			_, _, err := a.CreateRun(ctx, belay.RunInput{Session: sess.ID, Priority: j % 2})
			require.NoError(t, err)
		}
	}
	var mu sync.Mutex
	claims := map[string]int{}
	check := func() {
		var running, maxPerSession, p, q int
		require.NoError(t, a.Pool().QueryRow(ctx, `SELECT
			(SELECT count(*) FROM belay_runs WHERE status = 'running'),
			coalesce((SELECT max(n) FROM (SELECT count(*) AS n FROM belay_runs WHERE status = 'running' GROUP BY session) x), 0),
			(SELECT count(*) FROM belay_runs WHERE status = 'running' AND provider = 'p'),
			(SELECT count(*) FROM belay_runs WHERE status = 'running' AND provider = 'q')`).Scan(&running, &maxPerSession, &p, &q))
		require.LessOrEqual(t, maxPerSession, 1)
		if lim.Capped() {
			require.LessOrEqual(t, running, lim.Global)
			require.LessOrEqual(t, p, lim.PerProvider["p"])
			require.LessOrEqual(t, q, lim.PerProvider["q"])
		}
	}
	var wg sync.WaitGroup
	for w, st := range []*pgstore.Store{a, b, a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := fmt.Sprintf("o%d", w)
			if err := st.HeartbeatOwner(ctx, owner, time.Hour); err != nil {
				t.Error(err)
				return
			}
			for round := 0; round < 400; round++ {
				got, err := st.ClaimRuns(ctx, store.Claim{Owner: owner, Max: 2, TTL: time.Minute, Limits: lim})
				if err != nil {
					t.Error(err)
					return
				}
				for _, cl := range got {
					mu.Lock()
					claims[cl.Run.ID]++
					mu.Unlock()
					if _, err := st.UpdateRun(ctx, cl.Run.ID, cl.Run.Epoch, belay.RunUpdate{Phase: belay.PhaseComplete}); err != nil {
						t.Error(err)
						return
					}
				}
				c, err := st.Counts(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if c.Queued+c.Running == 0 {
					return
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for finished := false; !finished; {
		select {
		case <-done:
			finished = true
		default:
			check()
		}
	}
	require.Len(t, claims, sessions*perSession, "every run was claimed")
	for id, n := range claims {
		require.Equal(t, 1, n, id)
	}
}

// TestRescue: a live owner's runs are never rescued; once its record
// expires (by the store's clock) another node rescues them under a new
// epoch, fencing the old owner; a retired owner's runs are rescued at
// once; a claimer never rescues its own runs.
func TestRescue(t *testing.T) {
	ctx := context.Background()
	url := database(t)
	clk := clock.NewFake(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	a := open(t, url, clk)
	defer a.Close()
	b := open(t, url, clk)
	defer b.Close()
	sess, err := a.CreateSession(ctx, belay.SessionInput{Provider: "p"})
	require.NoError(t, err)
	r, _, err := a.CreateRun(ctx, belay.RunInput{Session: sess.ID})
	require.NoError(t, err)
	require.NoError(t, a.HeartbeatOwner(ctx, "A", time.Minute))
	require.NoError(t, b.HeartbeatOwner(ctx, "B", time.Hour))
	got, err := a.ClaimRuns(ctx, store.Claim{Owner: "A", TTL: time.Hour})
	require.NoError(t, err)
	require.Equal(t, []string{r.ID}, claimIDs(got))

	got, err = b.ClaimRuns(ctx, store.Claim{Owner: "B", TTL: time.Hour})
	require.NoError(t, err)
	require.Empty(t, got, "A is live and its lease unexpired")

	clk.Advance(2 * time.Minute) // A stopped heartbeating
	owners, err := b.Owners(ctx)
	require.NoError(t, err)
	require.Len(t, owners, 2)
	require.Equal(t, "A", owners[0].ID)
	require.False(t, owners[0].Live)
	require.True(t, owners[1].Live)
	got, err = a.ClaimRuns(ctx, store.Claim{Owner: "A", TTL: time.Hour})
	require.NoError(t, err)
	require.Empty(t, got, "never the claimer's own run")

	got, err = b.ClaimRuns(ctx, store.Claim{Owner: "B", TTL: time.Hour})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.True(t, got[0].Rescued)
	require.Equal(t, uint64(2), got[0].Run.Epoch)
	require.Equal(t, "B", got[0].Run.Lease.Owner)
	require.Equal(t, belay.RunRunning, got[0].Run.Status)
	evs, err := b.Events(ctx, sess.ID, 0, 0)
	require.NoError(t, err)
	var leased struct {
		Owner    string `json:"owner"`
		Takeover uint64 `json:"takeover"`
	}
	require.NoError(t, json.Unmarshal(evs[len(evs)-1].Data, &leased))
	require.Equal(t, "B", leased.Owner)
	require.Equal(t, uint64(1), leased.Takeover)
	_, err = a.UpdateRun(ctx, r.ID, 1, belay.RunUpdate{Phase: belay.PhaseComplete})
	var stale *belay.StaleEpochError
	require.ErrorAs(t, err, &stale, "the old owner is fenced")

	// B retires: its run is rescued at once by a live owner.
	require.NoError(t, b.RetireOwner(ctx, "B"))
	require.NoError(t, a.HeartbeatOwner(ctx, "A", time.Minute))
	got, err = a.ClaimRuns(ctx, store.Claim{Owner: "A", TTL: time.Hour})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.True(t, got[0].Rescued)
	require.Equal(t, uint64(3), got[0].Run.Epoch)

	// An expired lease of a live owner is rescued too.
	require.NoError(t, b.HeartbeatOwner(ctx, "B", time.Hour))
	clk.Advance(time.Hour + time.Second)
	require.NoError(t, a.HeartbeatOwner(ctx, "A", time.Hour))
	got, err = b.ClaimRuns(ctx, store.Claim{Owner: "B", TTL: time.Hour})
	require.NoError(t, err)
	require.Len(t, got, 1, "A is live but let its lease expire")
	require.True(t, got[0].Rescued)
}

// TestRescueLooksForDeadOwnersWhenOwnersChange: a claim finds expired
// leases by their index every time, but looks through every running run
// for runs of dead owners only when the live owners changed since its
// node's last look, or deadScanEvery after it: a retired owner's run is
// rescued by the next claim, a run of an owner that never had a record
// within deadScanEvery, and claims in between read no running run of a
// live owner.
func TestRescueLooksForDeadOwnersWhenOwnersChange(t *testing.T) {
	ctx := context.Background()
	url := database(t)
	clk := clock.NewFake(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
	a := open(t, url, clk)
	defer a.Close()
	b := open(t, url, clk)
	defer b.Close()
	run := func() string {
		sess, err := a.CreateSession(ctx, belay.SessionInput{Provider: "p"})
		require.NoError(t, err)
		r, _, err := a.CreateRun(ctx, belay.RunInput{Session: sess.ID})
		require.NoError(t, err)
		return r.ID
	}
	claim := func(s *pgstore.Store, owner string) []store.Claimed {
		got, err := s.ClaimRuns(ctx, store.Claim{Owner: owner, Max: 1, TTL: time.Hour})
		require.NoError(t, err)
		return got
	}
	require.NoError(t, a.HeartbeatOwner(ctx, "A", time.Hour))
	require.NoError(t, b.HeartbeatOwner(ctx, "B", time.Hour))
	ofA := run()
	require.Equal(t, []string{ofA}, claimIDs(claim(a, "A")))

	require.Empty(t, claim(b, "B"))
	require.Equal(t, int64(1), pgstore.FullScans(b), "a node's first claim looks")
	require.Empty(t, claim(b, "B"))
	require.Equal(t, int64(1), pgstore.FullScans(b), "the same live owners: no second look")

	// An owner that never had a record (it never heartbeat).
	ofGhost := run()
	require.Equal(t, []string{ofGhost}, claimIDs(claim(a, "ghost")))
	clk.Advance(pgstore.DeadScanEvery)
	got := claim(b, "B")
	require.Equal(t, []string{ofGhost}, claimIDs(got), "rescued by the look deadScanEvery later")
	require.True(t, got[0].Rescued)
	require.Equal(t, int64(2), pgstore.FullScans(b))

	// A retired owner's run is rescued by the next claim: the live owners
	// changed.
	require.NoError(t, a.RetireOwner(ctx, "A"))
	got = claim(b, "B")
	require.Equal(t, []string{ofA}, claimIDs(got))
	require.True(t, got[0].Rescued)
	require.Equal(t, int64(3), pgstore.FullScans(b))

	// An expired lease needs no look: a live owner that could not renew.
	require.NoError(t, a.HeartbeatOwner(ctx, "A2", 24*time.Hour))
	ofA2 := run()
	got, err := a.ClaimRuns(ctx, store.Claim{Owner: "A2", Max: 1, TTL: pgstore.DeadScanEvery / 2})
	require.NoError(t, err)
	require.Equal(t, []string{ofA2}, claimIDs(got))
	require.Empty(t, claim(b, "B"))
	scans := pgstore.FullScans(b)
	clk.Advance(pgstore.DeadScanEvery / 2)
	got = claim(b, "B")
	require.Equal(t, []string{ofA2}, claimIDs(got))
	require.Equal(t, scans, pgstore.FullScans(b))
}

// TestClaimReadsTheClockAfterTheLock: a claim that waited for the claim
// lock grants leases as of when it got it, not as of when it began: its
// lease runs a whole TTL from after the lock was let go. (The clock read
// in the statement that took the lock was read before the wait.)
func TestClaimReadsTheClockAfterTheLock(t *testing.T) {
	ctx := context.Background()
	url := database(t)
	s := open(t, url, nil)
	defer s.Close()
	require.NoError(t, s.HeartbeatOwner(ctx, "A", time.Hour))
	sess, err := s.CreateSession(ctx, belay.SessionInput{Provider: "p"})
	require.NoError(t, err)
	_, _, err = s.CreateRun(ctx, belay.RunInput{Session: sess.ID})
	require.NoError(t, err)

	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, pgstore.ClaimLock)
	require.NoError(t, err)
	type result struct {
		got []store.Claimed
		err error
	}
	done := make(chan result, 1)
	go func() {
		got, err := s.ClaimRuns(ctx, store.Claim{Owner: "A", Max: 1, TTL: time.Minute})
		done <- result{got, err}
	}()
	// The claim waits for the lock.
	require.Eventually(t, func() bool {
		var waiting bool
		require.NoError(t, conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted)`).Scan(&waiting))
		return waiting
	}, 30*time.Second, 5*time.Millisecond)
	var released time.Time
	require.NoError(t, tx.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&released))
	require.NoError(t, tx.Commit(ctx))
	r := <-done
	require.NoError(t, r.err)
	require.Len(t, r.got, 1)
	exp := r.got[0].Run.Lease.ExpiresAt
	require.False(t, exp.Before(released.Add(time.Minute)), "lease until %s, the lock let go at %s: granted as of before the wait", exp, released)
}

// TestExpiredWalkByLeaseIndex: the claim's read of expired leases, on
// every claim, reaches them by the index of running runs by lease expiry
// under the settings of claims, whatever the statistics: never a walk of
// every running run (what one condition with OR planned, 0.35 ms a claim
// with 1,000 running runs where this takes 0.03).
func TestExpiredWalkByLeaseIndex(t *testing.T) {
	ctx := context.Background()
	url := database(t)
	s := open(t, url, nil)
	defer s.Close()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	settings, _ := pgstore.SetStatements()
	check := func(when string) {
		plan := genericPlan(t, conn, settings, pgstore.ExpiredWalk, "text, timestamptz", "'x', now()")
		require.Contains(t, plan, "Index Cond: (lease_expires_at IS NULL)", "%s\n%s", when, plan)
		require.Contains(t, plan, "Index Cond: (lease_expires_at <= $2)", "%s\n%s", when, plan)
	}
	check("a new database")
	_, err = conn.Exec(ctx, "ANALYZE")
	require.NoError(t, err)
	check("empty tables analyzed")
	require.NoError(t, s.HeartbeatOwner(ctx, "w", time.Hour))
	for range 20 {
		x, err := s.CreateSession(ctx, belay.SessionInput{Provider: "fake"})
		require.NoError(t, err)
		_, _, err = s.CreateRun(ctx, belay.RunInput{Session: x.ID})
		require.NoError(t, err)
	}
	got, err := s.ClaimRuns(ctx, store.Claim{Owner: "w", Max: 20, TTL: time.Hour})
	require.NoError(t, err)
	require.Len(t, got, 20)
	_, err = conn.Exec(ctx, "ANALYZE")
	require.NoError(t, err)
	check("running runs analyzed")
}

// TestRescueByDatabaseClock: without an injected clock, owner expiry is
// judged by the database's clock: a rescuer on another node takes the run
// once the owner's short record has expired.
func TestRescueByDatabaseClock(t *testing.T) {
	ctx := context.Background()
	a, b := twoNodes(t)
	sess, err := a.CreateSession(ctx, belay.SessionInput{Provider: "p"})
	require.NoError(t, err)
	r, _, err := a.CreateRun(ctx, belay.RunInput{Session: sess.ID})
	require.NoError(t, err)
	require.NoError(t, a.HeartbeatOwner(ctx, "A", 300*time.Millisecond))
	got, err := a.ClaimRuns(ctx, store.Claim{Owner: "A", TTL: time.Hour})
	require.NoError(t, err)
	require.Len(t, got, 1)
	var rescued []store.Claimed
	require.Eventually(t, func() bool {
		rescued, err = b.ClaimRuns(ctx, store.Claim{Owner: "B", TTL: time.Hour})
		require.NoError(t, err)
		return len(rescued) == 1
	}, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, r.ID, rescued[0].Run.ID)
	require.True(t, rescued[0].Rescued)
	owners, err := b.Owners(ctx)
	require.NoError(t, err)
	require.Len(t, owners, 1)
	require.False(t, owners[0].Live)
	require.True(t, owners[0].ExpiresAt.Before(time.Now().Add(time.Minute)))
}

// TestCancelAcrossNodes: a cancel requested on node A is durable on the
// run and reaches node B through the change feed, in order and gap-free;
// B's waiter is woken by the notification (it never polls).
func TestCancelAcrossNodes(t *testing.T) {
	ctx := context.Background()
	url := database(t)
	a := open(t, url, nil)
	defer a.Close()
	b, err := pgstore.Open(ctx, url, pgstore.Options{PollEvery: time.Hour})
	require.NoError(t, err)
	defer b.Close()
	sess, err := a.CreateSession(ctx, belay.SessionInput{Provider: "p"})
	require.NoError(t, err)
	r, _, err := a.CreateRun(ctx, belay.RunInput{Session: sess.ID})
	require.NoError(t, err)
	queued, _, err := a.CreateRun(ctx, belay.RunInput{Session: sess.ID})
	require.NoError(t, err)
	got, err := b.ClaimRuns(ctx, store.Claim{Owner: "B", TTL: time.Hour})
	require.NoError(t, err)
	require.Len(t, got, 1)
	head, err := b.ChangeHead(ctx)
	require.NoError(t, err)

	woke := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		woke <- b.WaitChanges(wctx, head)
	}()
	run, err := a.RequestCancel(ctx, r.ID, "stop it")
	require.NoError(t, err)
	require.Equal(t, belay.RunRunning, run.Status, "running: the owner carries it out")
	require.Equal(t, "stop it", run.CancelRequest.Reason)
	require.NoError(t, <-woke)
	again, err := a.RequestCancel(ctx, r.ID, "twice")
	require.NoError(t, err)
	require.Equal(t, "stop it", again.CancelRequest.Reason, "idempotent")
	q, err := a.RequestCancel(ctx, queued.ID, "")
	require.NoError(t, err)
	require.Equal(t, belay.RunCancelled, q.Status, "queued: cancelled at once")

	changes, next, err := b.Changes(ctx, head, 0)
	require.NoError(t, err)
	require.Len(t, changes, 2)
	require.Equal(t, head+2, next)
	require.Equal(t, store.Change{Cursor: head + 1, Session: sess.ID, Seq: changes[0].Seq, Type: belay.EventRunCancelRequested, Run: r.ID}, changes[0])
	require.Equal(t, store.Change{Cursor: head + 2, Session: sess.ID, Seq: changes[0].Seq + 1, Type: belay.EventRunUpdated, Run: queued.ID, Ended: true}, changes[1])
	seen, err := b.Run(ctx, r.ID)
	require.NoError(t, err)
	require.NotNil(t, seen.CancelRequest)
	require.False(t, seen.CancelRequest.At.IsZero())

	_, err = b.UpdateRun(ctx, r.ID, got[0].Run.Epoch, belay.RunUpdate{Phase: belay.PhaseCancelled, Error: &belay.RunError{Class: belay.ClassCancelled}})
	require.NoError(t, err)
	ended, err := a.RequestCancel(ctx, r.ID, "late")
	require.ErrorIs(t, err, belay.ErrTerminal)
	require.Equal(t, r.ID, ended.ID, "the run comes back with the refusal")
	require.Equal(t, belay.RunCancelled, ended.Status)
}

// TestFeedGapFreeUnderLoad: writers on two nodes change many sessions at
// once while a follower on a third reads the feed: it sees every change
// exactly once, cursors without holes, each session's in seq order.
func TestFeedGapFreeUnderLoad(t *testing.T) {
	ctx := context.Background()
	url := database(t)
	a := open(t, url, nil)
	defer a.Close()
	b := open(t, url, nil)
	defer b.Close()
	f := open(t, url, nil)
	defer f.Close()
	start, err := f.ChangeHead(ctx)
	require.NoError(t, err)

	stop := make(chan struct{})
	followed := make(chan []store.Change, 1)
	go func() {
		var all []store.Change
		cursor := start
		defer func() { followed <- all }()
		for {
			changes, next, err := f.Changes(ctx, cursor, 7)
			if err != nil {
				t.Error(err)
				return
			}
			all = append(all, changes...)
			cursor = next
			if len(changes) > 0 {
				continue
			}
			select {
			case <-stop:
				// Drain what the writers committed before they stopped.
				rest, _, err := f.Changes(ctx, cursor, 0)
				if err != nil {
					t.Error(err)
				}
				all = append(all, rest...)
				return
			default:
			}
			wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			_ = f.WaitChanges(wctx, cursor)
			cancel()
		}
	}()
	var wg sync.WaitGroup
	for w := 0; w < 6; w++ {
		st := []*pgstore.Store{a, b}[w%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			sess, err := st.CreateSession(ctx, belay.SessionInput{Provider: "p"})
			if err != nil {
				t.Error(err)
				return
			}
			for i := 0; i < 15; i++ {
				if _, _, err := st.PostDelivery(ctx, belay.DeliveryInput{Session: sess.ID, Type: "t"}); err != nil {
					t.Error(err)
					return
				}
				if _, _, err := st.CreateRun(ctx, belay.RunInput{Session: sess.ID}); err != nil {
					t.Error(err)
					return
				}
				if _, err := st.Append(ctx, sess.ID, belay.Sync, belay.Event{Type: "note"}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	all := <-followed
	require.Len(t, all, 6*(1+2*15), "every state change once; caller events are not in the feed")
	lastSeq := map[string]uint64{}
	for i, c := range all {
		require.Equal(t, start+uint64(i)+1, c.Cursor, "no holes")
		require.Greater(t, c.Seq, lastSeq[c.Session], "a session's changes in seq order")
		lastSeq[c.Session] = c.Seq
		if c.Type == belay.EventDeliveryPosted {
			require.NotEmpty(t, c.Delivery)
		}
	}
}

// TestFeedTrim: the feed keeps the latest changes; a cursor behind them
// is refused with ErrCursorExpired, as is one ahead of the feed.
func TestFeedTrim(t *testing.T) {
	ctx := context.Background()
	url := database(t)
	s, err := pgstore.Open(ctx, url, pgstore.Options{Migrate: true, KeepChanges: 4})
	require.NoError(t, err)
	defer s.Close()
	sess, err := s.CreateSession(ctx, belay.SessionInput{Provider: "p"})
	require.NoError(t, err)
	for i := 0; i < 10; i++ {
		_, _, err := s.CreateRun(ctx, belay.RunInput{Session: sess.ID})
		require.NoError(t, err)
	}
	_, err = s.Prune(ctx, store.PrunePolicy{})
	require.NoError(t, err)
	head, err := s.ChangeHead(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(11), head)
	_, _, err = s.Changes(ctx, 0, 0)
	require.ErrorIs(t, err, store.ErrCursorExpired)
	changes, next, err := s.Changes(ctx, head-4, 0)
	require.NoError(t, err)
	require.Len(t, changes, 4)
	require.Equal(t, head, next)
	_, _, err = s.Changes(ctx, head+1, 0)
	require.ErrorIs(t, err, store.ErrCursorExpired)
}

// TestActivityAcrossNodes: the activity a runner reports with a renewal is
// visible from another node, and journaled in run.renewed.
func TestActivityAcrossNodes(t *testing.T) {
	ctx := context.Background()
	a, b := twoNodes(t)
	sess, err := a.CreateSession(ctx, belay.SessionInput{Provider: "p"})
	require.NoError(t, err)
	_, _, err = a.CreateRun(ctx, belay.RunInput{Session: sess.ID})
	require.NoError(t, err)
	got, err := a.ClaimRuns(ctx, store.Claim{Owner: "A", TTL: time.Minute})
	require.NoError(t, err)
	require.Len(t, got, 1)
	run := got[0].Run
	require.Nil(t, run.Activity)
	at := time.Date(2026, 11, 23, 10, 0, 0, 0, time.FixedZone("x", 3600))
	_, err = a.RenewRunLease(ctx, run.ID, run.Epoch, time.Minute, &belay.RunActivity{LastProgress: at, Tier: "quiet"})
	require.NoError(t, err)
	_, err = a.RenewRunLease(ctx, run.ID, run.Epoch, time.Minute, nil)
	require.NoError(t, err)
	seen, err := b.Run(ctx, run.ID)
	require.NoError(t, err)
	require.NotNil(t, seen.Activity, "a renewal without activity keeps the last")
	require.True(t, at.Equal(seen.Activity.LastProgress))
	require.Equal(t, "quiet", seen.Activity.Tier)
	evs, err := b.Events(ctx, sess.ID, 0, 0)
	require.NoError(t, err)
	var renewed map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(evs[len(evs)-2].Data, &renewed))
	require.Contains(t, renewed, "expiresAt")
	require.JSONEq(t, `{"lastProgress":"2026-11-23T09:00:00Z","tier":"quiet"}`, string(renewed["activity"]))
}

// TestMigrationsOrderedByNumber: migrations are applied by version number.
func TestMigrationsOrderedByNumber(t *testing.T) {
	all, err := pgstore.Migrations()
	require.NoError(t, err)
	for i := 1; i < len(all); i++ {
		require.Less(t, all[i-1].Version, all[i].Version)
	}
	names := map[int]string{}
	for _, m := range all {
		names[m.Version] = m.Name
	}
	require.Equal(t, "claims", names[5])
	require.Equal(t, "change_sequencer", names[6])
}

// TestFeedNumbersWhatADeadNodeLeft: a change committed by a node that died
// before its sequencer ran is numbered by the next reader on any node, in
// order after what was numbered before.
func TestFeedNumbersWhatADeadNodeLeft(t *testing.T) {
	ctx := context.Background()
	s := open(t, database(t), nil)
	defer s.Close()
	sess, err := s.CreateSession(ctx, belay.SessionInput{Provider: "p"})
	require.NoError(t, err)
	head, err := s.ChangeHead(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(1), head)
	// What a commit leaves before its node numbers it.
	_, err = s.Pool().Exec(ctx, `INSERT INTO belay_changes (session, seq, type) VALUES ($1, 2, 'run.created'), ($1, 3, 'run.leased')`, sess.ID)
	require.NoError(t, err)
	changes, next, err := s.Changes(ctx, head, 0)
	require.NoError(t, err)
	require.Equal(t, uint64(3), next)
	require.Len(t, changes, 2)
	require.Equal(t, store.Change{Cursor: 2, Session: sess.ID, Seq: 2, Type: belay.EventRunCreated}, changes[0])
	require.Equal(t, store.Change{Cursor: 3, Session: sess.ID, Seq: 3, Type: belay.EventRunLeased}, changes[1])
}

// TestClaimPastACappedProvider: when the best candidates all belong to a
// provider that fills up, the claim goes on past them to other providers'
// runs (the next page of candidates), as the file store's scheduler does.
func TestClaimPastACappedProvider(t *testing.T) {
	ctx := context.Background()
	s := open(t, database(t), nil)
	defer s.Close()
	var as []string
	for i := 0; i < 14; i++ { // more than a page for Max 2
		sess, err := s.CreateSession(ctx, belay.SessionInput{Provider: "a"})
		require.NoError(t, err)
		r, _, err := s.CreateRun(ctx, belay.RunInput{Session: sess.ID, Priority: 5})
		require.NoError(t, err)
		as = append(as, r.ID)
	}
	sess, err := s.CreateSession(ctx, belay.SessionInput{Provider: "b"})
	require.NoError(t, err)
	b, _, err := s.CreateRun(ctx, belay.RunInput{Session: sess.ID})
	require.NoError(t, err)
	require.NoError(t, s.HeartbeatOwner(ctx, "o", time.Hour))
	got, err := s.ClaimRuns(ctx, store.Claim{Owner: "o", Max: 2, TTL: time.Minute, Limits: store.Limits{PerProvider: map[string]int{"a": 1}}})
	require.NoError(t, err)
	require.Equal(t, []string{as[0], b.ID}, claimIDs(got))
}

// TestClaimSkipsABusySession: a claim does not wait for a session another
// transaction holds; it takes the other sessions' runs and comes back for
// that one later.
func TestClaimSkipsABusySession(t *testing.T) {
	ctx := context.Background()
	s := open(t, database(t), nil)
	defer s.Close()
	busy, err := s.CreateSession(ctx, belay.SessionInput{Provider: "p"})
	require.NoError(t, err)
	held, _, err := s.CreateRun(ctx, belay.RunInput{Session: busy.ID, Priority: 9})
	require.NoError(t, err)
	free, err := s.CreateSession(ctx, belay.SessionInput{Provider: "p"})
	require.NoError(t, err)
	other, _, err := s.CreateRun(ctx, belay.RunInput{Session: free.ID})
	require.NoError(t, err)
	require.NoError(t, s.HeartbeatOwner(ctx, "o", time.Hour))

	// Another node's write in flight holds the busy session's row lock.
	conn, err := pgx.Connect(ctx, s.Pool().Config().ConnConfig.ConnString())
	require.NoError(t, err)
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT 1 FROM belay_sessions WHERE id = $1 FOR UPDATE`, busy.ID)
	require.NoError(t, err)
	got, err := s.ClaimRuns(ctx, store.Claim{Owner: "o", TTL: time.Minute})
	require.NoError(t, err)
	require.Equal(t, []string{other.ID}, claimIDs(got), "the busy session is skipped, not waited for")
	require.NoError(t, tx.Rollback(ctx))
	got, err = s.ClaimRuns(ctx, store.Claim{Owner: "o", TTL: time.Minute})
	require.NoError(t, err)
	require.Equal(t, []string{held.ID}, claimIDs(got))
}

// TestSequencerLeavesItsRowsToTheBusyOne: a node's sequencer that finds
// another's pass under way does not wait for it; the pass under way looks
// again once it has let the lock go and numbers the rows committed while
// it held it, so the feed misses nothing.
func TestSequencerLeavesItsRowsToTheBusyOne(t *testing.T) {
	ctx := context.Background()
	a, b := twoNodes(t)
	sess, err := a.CreateSession(ctx, belay.SessionInput{Provider: "p"})
	require.NoError(t, err)
	_, err = pgstore.SequenceNow(ctx, a, true)
	require.NoError(t, err)
	// What a commit leaves before its node numbers it: one row for a's
	// pass, then one committed while that pass holds the lock.
	_, err = a.Pool().Exec(ctx, `INSERT INTO belay_changes (session, seq, type) VALUES ($1, 2, 'run.created')`, sess.ID)
	require.NoError(t, err)
	held, release := make(chan struct{}), make(chan struct{})
	var released sync.Once
	defer released.Do(func() { close(release) }) // a failed check still lets a's pass end
	// a's passes are counted by the hook: the pass the session's creation
	// asked of a's notifier may be the one that finds the row.
	var once sync.Once
	var numbered atomic.Int64
	pgstore.OnSequenced(a, func(n int64) {
		numbered.Add(n)
		if n > 0 {
			once.Do(func() {
				close(held)
				<-release
			})
		}
	})
	done := make(chan error, 1)
	go func() {
		_, err := pgstore.SequenceNow(ctx, a, false)
		done <- err
	}()
	<-held
	_, err = b.Pool().Exec(ctx, `INSERT INTO belay_changes (session, seq, type) VALUES ($1, 3, 'run.leased')`, sess.ID)
	require.NoError(t, err)
	n, err := pgstore.SequenceNow(ctx, b, false)
	require.NoError(t, err)
	require.Zero(t, n, "b found a's pass under way and left its row to it")
	var unnumbered int
	require.NoError(t, b.Pool().QueryRow(ctx, `SELECT count(*) FROM belay_changes WHERE cursor IS NULL`).Scan(&unnumbered))
	require.Equal(t, 2, unnumbered, "a's pass has not committed, and b numbered nothing")
	released.Do(func() { close(release) })
	require.NoError(t, <-done)
	require.Equal(t, int64(2), numbered.Load(), "a numbered its row, then b's")
	changes, _, err := b.Changes(ctx, 1, 0)
	require.NoError(t, err)
	require.Equal(t, []store.Change{
		{Cursor: 2, Session: sess.ID, Seq: 2, Type: belay.EventRunCreated},
		{Cursor: 3, Session: sess.ID, Seq: 3, Type: belay.EventRunLeased},
	}, changes)
}

// TestReadyMarks: every write that changes a session's queued or running
// runs leaves exactly its next queued run marked ready while none of it
// runs (belay_ready, migration 11), so that claims walk only those; the repair that
// looks for a missed mark finds none.
func TestReadyMarks(t *testing.T) {
	ctx := context.Background()
	s := open(t, database(t), nil)
	defer s.Close()
	// marked lists the runs marked ready; should those that the
	// definition names. They must be the same, and the expected ones.
	check := func(step string, want ...string) {
		t.Helper()
		rows, err := s.Pool().Query(ctx, `SELECT run FROM belay_ready ORDER BY run`)
		require.NoError(t, err)
		marked, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		rows, err = s.Pool().Query(ctx, `SELECT r.id FROM belay_runs r WHERE r.status = 'queued'
			AND r.id = (SELECT n.id FROM belay_runs n WHERE n.session = r.session AND n.status = 'queued' ORDER BY front DESC, CASE WHEN front THEN -ord ELSE ord END LIMIT 1)
			AND NOT EXISTS (SELECT 1 FROM belay_runs a WHERE a.session = r.session AND a.status = 'running') ORDER BY id`)
		require.NoError(t, err)
		should, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		slices.Sort(want)
		require.Equal(t, should, marked, step)
		require.Equal(t, append([]string{}, want...), marked, step)
	}
	submit := func(session string, p belay.Policy) store.SubmitResult {
		t.Helper()
		res, err := s.Submit(ctx, store.SubmitInput{RunInput: belay.RunInput{Session: session, Input: json.RawMessage(`{}`)}, Policy: p})
		require.NoError(t, err)
		return res
	}
	a, err := s.CreateSession(ctx, belay.SessionInput{Provider: "p"})
	require.NoError(t, err)
	b, err := s.CreateSession(ctx, belay.SessionInput{Provider: "p"})
	require.NoError(t, err)

	r1 := submit(a.ID, belay.PolicyEnqueue).Run
	check("a submit to an idle session", r1.ID)
	r2 := submit(a.ID, belay.PolicyEnqueue).Run
	check("a second submit waits", r1.ID)
	got, err := s.ClaimRuns(ctx, store.Claim{Owner: "o", Max: 10, TTL: time.Minute})
	require.NoError(t, err)
	require.Equal(t, []string{r1.ID}, claimIDs(got))
	check("the session runs")
	r3 := submit(a.ID, belay.PolicyInterrupt).Run
	check("an interrupting run waits for the run it interrupts")
	_, err = s.UpdateRun(ctx, r1.ID, 1, belay.RunUpdate{Phase: belay.PhaseCancelled, Error: &belay.RunError{Class: belay.ClassCancelled}})
	require.NoError(t, err)
	check("the run ended: the interrupting run goes next", r3.ID)

	b1 := submit(b.ID, belay.PolicyEnqueue).Run
	b2 := submit(b.ID, belay.PolicyEnqueue).Run
	check("b's first run", r3.ID, b1.ID)
	_, err = s.AcquireRunLease(ctx, b2.ID, "o", time.Minute, 0)
	require.NoError(t, err)
	check("a run leased out of turn makes its session busy", r3.ID)

	_, err = s.CancelQueuedRun(ctx, r3.ID, "")
	require.NoError(t, err)
	check("the next run after a cancelled one", r2.ID)
	r4 := submit(a.ID, belay.PolicyReplace)
	require.Equal(t, []string{r2.ID}, r4.Cancelled)
	check("a replacing run", r4.Run.ID)
	_, err = s.Submit(ctx, store.SubmitInput{RunInput: belay.RunInput{Session: a.ID, Input: json.RawMessage(`{}`)}, Policy: belay.PolicyReject})
	require.ErrorIs(t, err, store.ErrConversationBusy)
	check("a rejected submit changes nothing", r4.Run.ID)
	_, err = s.UpdateRun(ctx, b2.ID, 1, belay.RunUpdate{Phase: belay.PhaseComplete})
	require.NoError(t, err)
	check("b is idle again", r4.Run.ID, b1.ID)
	_, err = s.RequestCancel(ctx, b1.ID, "")
	require.NoError(t, err)
	check("a queued run cancelled by request", r4.Run.ID)

	got, err = s.ClaimRuns(ctx, store.Claim{Owner: "o", Max: 10, TTL: time.Minute})
	require.NoError(t, err)
	require.Equal(t, []string{r4.Run.ID}, claimIDs(got))
	check("all claimed")
	repaired, err := pgstore.RepairReadyNow(ctx, s)
	require.NoError(t, err)
	require.Zero(t, repaired, "no mark was missed")

	// A mark lost (a node of an older belay wrote) is found by the repair.
	r5 := submit(a.ID, belay.PolicyEnqueue).Run
	_, err = s.UpdateRun(ctx, r4.Run.ID, 1, belay.RunUpdate{Phase: belay.PhaseComplete})
	require.NoError(t, err)
	check("r5 next", r5.ID)
	_, err = s.Pool().Exec(ctx, `DELETE FROM belay_ready WHERE run = $1`, r5.ID)
	require.NoError(t, err)
	got, err = s.ClaimRuns(ctx, store.Claim{Owner: "o", Max: 10, TTL: time.Minute})
	require.NoError(t, err)
	require.Empty(t, got, "an unmarked run is not walked")
	repaired, err = pgstore.RepairReadyNow(ctx, s)
	require.NoError(t, err)
	require.Equal(t, int64(1), repaired)
	got, err = s.ClaimRuns(ctx, store.Claim{Owner: "o", Max: 10, TTL: time.Minute})
	require.NoError(t, err)
	require.Equal(t, []string{r5.ID}, claimIDs(got))
}
