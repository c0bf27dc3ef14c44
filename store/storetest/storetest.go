// Package storetest is the conformance suite every store.Store passes. An
// implementation's test calls Run with a Harness that makes fresh stores on
// a fake clock and reopens them.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/clock"
	"github.com/belayhq/belay/internal/ids"
	"github.com/belayhq/belay/store"
)

// Harness makes stores for the suite.
type Harness struct {
	// New returns an empty store whose time comes from clk. The suite closes
	// it (possibly after Reopen).
	New func(t *testing.T, clk *clock.Fake) store.Store
	// Reopen closes s and opens the same data again on the same clock, as a
	// restarted process would.
	Reopen func(t *testing.T, s store.Store) store.Store
}

// Start is the fake clock's start time.
var Start = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

type bundle struct {
	s   store.Store
	clk *clock.Fake
	ctx context.Context
	h   Harness
	t   *testing.T
}

func setup(t *testing.T, h Harness) *bundle {
	t.Helper()
	clk := clock.NewFake(Start)
	b := &bundle{s: h.New(t, clk), clk: clk, ctx: context.Background(), h: h, t: t}
	t.Cleanup(func() { _ = b.s.Close() })
	return b
}

func (b *bundle) reopen() {
	b.t.Helper()
	b.s = b.h.Reopen(b.t, b.s)
}

func (b *bundle) session() belay.Session {
	b.t.Helper()
	sess, err := b.s.CreateSession(b.ctx, belay.SessionInput{Provider: "fake", Model: "echo"})
	require.NoError(b.t, err)
	return sess
}

func (b *bundle) run(session string) belay.Run {
	b.t.Helper()
	r, created, err := b.s.CreateRun(b.ctx, belay.RunInput{Session: session, Input: json.RawMessage(`{"prompt":"hi"}`)})
	require.NoError(b.t, err)
	require.True(b.t, created)
	return r
}

// Run runs the suite.
func Run(t *testing.T, h Harness) {
	tests := map[string]func(t *testing.T, h Harness){
		"Sessions":             testSessions,
		"SubmitPolicies":       testSubmitPolicies,
		"SubmitBatch":          testSubmitBatch,
		"SubmitClaim":          testSubmitClaim,
		"FeedLeavesOutSteps":   testFeedLeavesOutSteps,
		"ClaimOrderAndCaps":    testClaimOrderAndCaps,
		"ClaimRescue":          testClaimRescue,
		"RescueBeyondOneClaim": testRescueBeyondOneClaim,
		"ClaimRace":            testClaimRace,
		"ClaimWhileSubmitting": testClaimWhileSubmitting,
		"RequestCancel":        testRequestCancel,
		"ActivityPersisted":    testActivityPersisted,
		"ChangeFeed":           testChangeFeed,
		"SessionIdempotency":   testSessionIdempotency,
		"SessionWithFirstRun":  testSessionWithFirstRun,
		"Events":               testEvents,
		"EventsWait":           testEventsWait,
		"ScanEvents":           testScanEvents,
		"FencedAppend":         testFencedAppend,
		"Runs":                 testRuns,
		"RunLeases":            testRunLeases,
		"RunLeaseRace":         testRunLeaseRace,
		"CancelQueued":         testCancelQueued,
		"Deliveries":           testDeliveries,
		"DeliveryOrder":        testDeliveryOrder,
		"DeliveryLeaseExpiry":  testDeliveryLeaseExpiry,
		"DeliveryRetryRelease": testDeliveryRetryRelease,
		"DeliveryRace":         testDeliveryRace,
		"Redelivery":           testRedelivery,
		"InvalidJSON":          testInvalidJSON,
		"RunEndDelivers":       testRunEndDelivers,
		"Prune":                testPrune,
		"PruneOwners":          testPruneOwners,
		"DeleteSession":        testDeleteSession,
		"Reopen":               testReopen,
		"AddressedDeliveries":  testAddressedDeliveries,
		"RunTagsAndFilter":     testRunTagsAndFilter,
	}
	maps.Copy(tests, notifyTests)
	for name, fn := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, h)
		})
	}
}

func testSessions(t *testing.T, h Harness) {
	b := setup(t, h)
	a := b.session()
	require.NoError(t, ids.Check(ids.Session, a.ID))
	require.Equal(t, belay.SessionIdle, a.State)
	require.Equal(t, Start, a.CreatedAt)
	b.clk.Advance(time.Second)
	c, err := b.s.CreateSession(b.ctx, belay.SessionInput{Provider: "openai", Labels: map[string]string{"k": "v"}})
	require.NoError(t, err)
	got, err := b.s.Session(b.ctx, c.ID)
	require.NoError(t, err)
	require.Equal(t, "openai", got.Provider)
	require.Equal(t, map[string]string{"k": "v"}, got.Labels)
	require.Equal(t, uint64(1), got.LastSeq)

	list, err := b.s.Sessions(b.ctx, belay.SessionFilter{})
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, c.ID, list[0].ID, "newest first")
	list, err = b.s.Sessions(b.ctx, belay.SessionFilter{Provider: "fake"})
	require.NoError(t, err)
	require.Len(t, list, 1)
	list, err = b.s.Sessions(b.ctx, belay.SessionFilter{Limit: 1})
	require.NoError(t, err)
	require.Len(t, list, 1)
	list, err = b.s.Sessions(b.ctx, belay.SessionFilter{Before: c.ID})
	require.NoError(t, err)
	require.Len(t, list, 1, "Before is a cursor: older sessions only")
	require.Equal(t, a.ID, list[0].ID)
	list, err = b.s.Sessions(b.ctx, belay.SessionFilter{Before: a.ID})
	require.NoError(t, err)
	require.Empty(t, list)

	_, err = b.s.Session(b.ctx, "ses_../../etc")
	require.ErrorIs(t, err, belay.ErrInvalid)
	_, err = b.s.Session(b.ctx, ids.New(ids.Session))
	require.ErrorIs(t, err, belay.ErrNotFound)
	_, err = b.s.CreateSession(b.ctx, belay.SessionInput{})
	require.ErrorIs(t, err, belay.ErrInvalid)
	_, err = b.s.CreateSession(b.ctx, belay.SessionInput{Provider: "fake", ID: "nope"})
	require.ErrorIs(t, err, belay.ErrInvalid)
	_, err = b.s.CreateSession(b.ctx, belay.SessionInput{Provider: "fake", ID: a.ID})
	require.ErrorIs(t, err, belay.ErrExists)
	own := ids.New(ids.Session)
	mine, err := b.s.CreateSession(b.ctx, belay.SessionInput{Provider: "fake", ID: own})
	require.NoError(t, err)
	require.Equal(t, own, mine.ID)
}

func testSessionIdempotency(t *testing.T, h Harness) {
	b := setup(t, h)
	in := belay.SessionInput{Provider: "fake", IdempotencyKey: "k1"}
	a, err := b.s.CreateSession(b.ctx, in)
	require.NoError(t, err)
	again, err := b.s.CreateSession(b.ctx, in)
	require.NoError(t, err)
	require.Equal(t, a.ID, again.ID)
	b.reopen()
	again, err = b.s.CreateSession(b.ctx, in)
	require.NoError(t, err)
	require.Equal(t, a.ID, again.ID)
	list, err := b.s.Sessions(b.ctx, belay.SessionFilter{})
	require.NoError(t, err)
	require.Len(t, list, 1)
}

// testSessionWithFirstRun: a session created with its first run holds that
// run from the start (one durable write), also after a reopen; a repeated
// create with the same keys returns both again, not a second run.
func testSessionWithFirstRun(t *testing.T, h Harness) {
	b := setup(t, h)
	in := belay.SessionInput{Provider: "fake", Model: "m", IdempotencyKey: "s1",
		FirstRun: &belay.RunInput{IdempotencyKey: "r1", Priority: 3, Input: json.RawMessage(`{"prompt":"hi"}`)}}
	sess, err := b.s.CreateSession(b.ctx, in)
	require.NoError(t, err)
	runs, err := b.s.Runs(b.ctx, belay.RunFilter{Session: sess.ID})
	require.NoError(t, err)
	require.Len(t, runs, 1)
	r := runs[0]
	require.Equal(t, belay.RunQueued, r.Status)
	require.Equal(t, "fake", r.Provider)
	require.Equal(t, "m", r.Model)
	require.Equal(t, 3, r.Priority)
	input, err := b.s.RunInput(b.ctx, r.ID)
	require.NoError(t, err)
	require.JSONEq(t, `{"prompt":"hi"}`, string(input))

	b.reopen()
	again, err := b.s.CreateSession(b.ctx, in)
	require.NoError(t, err)
	require.Equal(t, sess.ID, again.ID)
	same, created, err := b.s.CreateRun(b.ctx, belay.RunInput{Session: sess.ID, IdempotencyKey: "r1"})
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, r.ID, same.ID)
	runs, err = b.s.Runs(b.ctx, belay.RunFilter{Session: sess.ID})
	require.NoError(t, err)
	require.Len(t, runs, 1)

	_, err = b.s.CreateSession(b.ctx, belay.SessionInput{Provider: "fake", FirstRun: &belay.RunInput{Input: json.RawMessage(`{`)}})
	require.ErrorIs(t, err, belay.ErrInvalid)
}

func testEvents(t *testing.T, h Harness) {
	b := setup(t, h)
	sess := b.session()
	seqs, err := b.s.Append(b.ctx, sess.ID, belay.Sync,
		belay.Event{Type: "note", Data: json.RawMessage(`{"n":1}`)},
		belay.Event{Type: "note", ID: "once", Data: json.RawMessage(`{"n":2}`)})
	require.NoError(t, err)
	require.Equal(t, []uint64{2, 3}, seqs, "seq 1 is session.created")
	seqs, err = b.s.Append(b.ctx, sess.ID, belay.Buffered, belay.Event{Type: "note", ID: "once"}, belay.Event{Type: "delta"})
	require.NoError(t, err)
	require.Equal(t, []uint64{3, 4}, seqs)
	require.NoError(t, b.s.WaitEvents(b.ctx, sess.ID, 3))

	evs, err := b.s.Events(b.ctx, sess.ID, 0, 0)
	require.NoError(t, err)
	require.Len(t, evs, 4)
	require.Equal(t, belay.EventSessionCreated, evs[0].Type)
	for i, e := range evs {
		require.Equal(t, uint64(i+1), e.Seq)
	}
	evs, err = b.s.Events(b.ctx, sess.ID, 2, 1)
	require.NoError(t, err)
	require.Len(t, evs, 1)
	require.Equal(t, uint64(3), evs[0].Seq)
	require.JSONEq(t, `{"n":2}`, string(evs[0].Data))

	_, err = b.s.Append(b.ctx, sess.ID, belay.Sync, belay.Event{Type: belay.EventRunUpdated})
	require.ErrorIs(t, err, belay.ErrInvalid, "store event types are reserved")
	_, err = b.s.Append(b.ctx, sess.ID, belay.Sync, belay.Event{Type: "Bad Type"})
	require.ErrorIs(t, err, belay.ErrInvalid)
	_, err = b.s.Append(b.ctx, ids.New(ids.Session), belay.Sync, belay.Event{Type: "note"})
	require.ErrorIs(t, err, belay.ErrNotFound)
	got, err := b.s.Session(b.ctx, sess.ID)
	require.NoError(t, err)
	require.Equal(t, uint64(4), got.LastSeq)
}

func testScanEvents(t *testing.T, h Harness) {
	b := setup(t, h)
	sess := b.session()
	for i := range 10 {
		_, err := b.s.Append(b.ctx, sess.ID, belay.Sync, belay.Event{Type: "note", Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))})
		require.NoError(t, err)
	}
	want, err := b.s.Events(b.ctx, sess.ID, 3, 0)
	require.NoError(t, err)
	var got []belay.Event
	require.NoError(t, b.s.ScanEvents(b.ctx, sess.ID, 3, func(e belay.Event) error {
		e.Data = append(json.RawMessage(nil), e.Data...)
		got = append(got, e)
		return nil
	}))
	require.Len(t, got, len(want))
	for i := range got {
		require.Equal(t, want[i].Seq, got[i].Seq)
		require.Equal(t, want[i].Type, got[i].Type)
		require.JSONEq(t, string(want[i].Data), string(got[i].Data))
	}
	stop := errors.New("stop")
	n := 0
	err = b.s.ScanEvents(b.ctx, sess.ID, 0, func(belay.Event) error { n++; return stop })
	require.ErrorIs(t, err, stop)
	require.Equal(t, 1, n)
	ctx, cancel := context.WithCancel(b.ctx)
	cancel()
	err = b.s.ScanEvents(ctx, sess.ID, 0, func(belay.Event) error { return nil })
	require.ErrorIs(t, err, context.Canceled, "a scan stops when its caller goes away")
	err = b.s.ScanEvents(b.ctx, ids.New(ids.Session), 0, func(belay.Event) error { return nil })
	require.ErrorIs(t, err, belay.ErrNotFound)
}

func testEventsWait(t *testing.T, h Harness) {
	b := setup(t, h)
	sess := b.session()
	done := make(chan error, 1)
	go func() { done <- b.s.WaitEvents(b.ctx, sess.ID, 1) }()
	_, err := b.s.Append(b.ctx, sess.ID, belay.Sync, belay.Event{Type: "note"})
	require.NoError(t, err)
	require.NoError(t, <-done)
	ctx, cancel := context.WithCancel(b.ctx)
	cancel()
	require.ErrorIs(t, b.s.WaitEvents(ctx, sess.ID, 2), context.Canceled)
}

func testFencedAppend(t *testing.T, h Harness) {
	b := setup(t, h)
	sess := b.session()
	r := b.run(sess.ID)
	leased, err := b.s.AcquireRunLease(b.ctx, r.ID, "w1", time.Minute, 0)
	require.NoError(t, err)
	_, err = b.s.Append(b.ctx, sess.ID, belay.Buffered, belay.Event{Type: "delta", Run: r.ID, Epoch: leased.Epoch})
	require.NoError(t, err)
	b.clk.Advance(2 * time.Minute)
	taken, err := b.s.AcquireRunLease(b.ctx, r.ID, "w2", time.Minute, 0)
	require.NoError(t, err)
	require.Equal(t, leased.Epoch+1, taken.Epoch)
	_, err = b.s.Append(b.ctx, sess.ID, belay.Sync, belay.Event{Type: "delta", Run: r.ID, Epoch: leased.Epoch})
	var stale *belay.StaleEpochError
	require.ErrorAs(t, err, &stale)
	require.Equal(t, taken.Epoch, stale.Current)
	_, err = b.s.Append(b.ctx, sess.ID, belay.Sync, belay.Event{Type: "delta", Run: ids.New(ids.Run), Epoch: 1})
	require.ErrorIs(t, err, belay.ErrNotFound)
	_, err = b.s.Append(b.ctx, sess.ID, belay.Sync, belay.Event{Type: "delta", Epoch: 1})
	require.ErrorIs(t, err, belay.ErrInvalid)
}

func testRuns(t *testing.T, h Harness) {
	b := setup(t, h)
	sess := b.session()
	in := belay.RunInput{Session: sess.ID, IdempotencyKey: "req-1", Priority: 3, Input: json.RawMessage(`{"prompt":"hello"}`)}
	r, created, err := b.s.CreateRun(b.ctx, in)
	require.NoError(t, err)
	require.True(t, created)
	require.NoError(t, ids.Check(ids.Run, r.ID))
	require.Equal(t, belay.RunQueued, r.Status)
	require.Equal(t, belay.PhaseQueued, r.Phase)
	require.Equal(t, "fake", r.Provider, "a run defaults to its session's provider")
	require.Equal(t, 3, r.Priority)
	again, created, err := b.s.CreateRun(b.ctx, in)
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, r.ID, again.ID)

	evs, err := b.s.Events(b.ctx, sess.ID, r.InputSeq-1, 1)
	require.NoError(t, err)
	require.Equal(t, belay.EventRunCreated, evs[0].Type)
	require.Contains(t, string(evs[0].Data), `"prompt":"hello"`)
	input, err := b.s.RunInput(b.ctx, r.ID)
	require.NoError(t, err)
	require.JSONEq(t, `{"prompt":"hello"}`, string(input))
	_, err = b.s.RunInput(b.ctx, ids.New(ids.Run))
	require.ErrorIs(t, err, belay.ErrNotFound)

	got, err := b.s.Session(b.ctx, sess.ID)
	require.NoError(t, err)
	require.Equal(t, belay.SessionActive, got.State)

	other := b.run(sess.ID)
	runs, err := b.s.Runs(b.ctx, belay.RunFilter{Session: sess.ID})
	require.NoError(t, err)
	require.Equal(t, []string{r.ID, other.ID}, []string{runs[0].ID, runs[1].ID})
	_, err = b.s.Run(b.ctx, "run_bad")
	require.ErrorIs(t, err, belay.ErrInvalid)
	_, err = b.s.Run(b.ctx, ids.New(ids.Run))
	require.ErrorIs(t, err, belay.ErrNotFound)
	_, _, err = b.s.CreateRun(b.ctx, belay.RunInput{Session: ids.New(ids.Session)})
	require.ErrorIs(t, err, belay.ErrNotFound)
}

func testRunLeases(t *testing.T, h Harness) {
	b := setup(t, h)
	sess := b.session()
	r := b.run(sess.ID)
	l1, err := b.s.AcquireRunLease(b.ctx, r.ID, "w1", time.Minute, 0)
	require.NoError(t, err)
	require.Equal(t, uint64(1), l1.Epoch)
	require.Equal(t, belay.RunRunning, l1.Status)
	require.Equal(t, belay.PhaseAdmitted, l1.Phase)
	require.Equal(t, "w1", l1.Lease.Owner)

	_, err = b.s.AcquireRunLease(b.ctx, r.ID, "w2", time.Minute, 0)
	require.ErrorIs(t, err, belay.ErrLeaseHeld, "a held lease is not granted again")

	// A live owner that renews is never reclaimed, however long it runs.
	for i := 0; i < 10; i++ {
		b.clk.Advance(50 * time.Second)
		_, err := b.s.RenewRunLease(b.ctx, r.ID, l1.Epoch, time.Minute, nil)
		require.NoError(t, err)
		_, err = b.s.AcquireRunLease(b.ctx, r.ID, "w2", time.Minute, 0)
		require.ErrorIs(t, err, belay.ErrLeaseHeld)
	}

	// Takeover of a provably dead owner names its epoch.
	_, err = b.s.AcquireRunLease(b.ctx, r.ID, "w2", time.Minute, l1.Epoch+5)
	require.ErrorIs(t, err, belay.ErrLeaseHeld)
	l2, err := b.s.AcquireRunLease(b.ctx, r.ID, "w2", time.Minute, l1.Epoch)
	require.NoError(t, err)
	require.Equal(t, uint64(2), l2.Epoch)

	var stale *belay.StaleEpochError
	_, err = b.s.UpdateRun(b.ctx, r.ID, l1.Epoch, belay.RunUpdate{Phase: belay.PhaseStreaming})
	require.ErrorAs(t, err, &stale)
	_, err = b.s.RenewRunLease(b.ctx, r.ID, l1.Epoch, time.Minute, nil)
	require.ErrorIs(t, err, belay.ErrStaleEpoch)
	_, err = b.s.ReleaseRunLease(b.ctx, r.ID, l1.Epoch)
	require.ErrorIs(t, err, belay.ErrStaleEpoch)

	u, err := b.s.UpdateRun(b.ctx, r.ID, l2.Epoch, belay.RunUpdate{
		Phase: belay.PhaseStreaming, Attempt: 1,
		Ref: &belay.ConversationRef{Kind: "response", ID: "resp_1", Cursor: "7"},
	})
	require.NoError(t, err)
	require.Equal(t, belay.PhaseStreaming, u.Phase)
	require.Equal(t, "resp_1", u.Ref.ID)
	got, err := b.s.Session(b.ctx, sess.ID)
	require.NoError(t, err)
	require.Equal(t, "7", got.Ref.Cursor, "the run's conversation ref is the session's")

	// A buffered phase change is fenced like any other, and is durable
	// once a synced write of the session after it returned.
	_, err = b.s.UpdateRun(b.ctx, r.ID, l1.Epoch, belay.RunUpdate{Phase: belay.PhaseFinishing, Buffered: true})
	require.ErrorAs(t, err, &stale)
	_, err = b.s.UpdateRun(b.ctx, r.ID, l2.Epoch, belay.RunUpdate{Phase: belay.PhaseFinishing, Buffered: true})
	require.NoError(t, err)
	_, err = b.s.RenewRunLease(b.ctx, r.ID, l2.Epoch, time.Minute, nil)
	require.NoError(t, err)
	fin, err := b.s.Run(b.ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, belay.PhaseFinishing, fin.Phase)

	_, err = b.s.UpdateRun(b.ctx, r.ID, l2.Epoch, belay.RunUpdate{Phase: belay.PhaseQueued})
	require.ErrorIs(t, err, belay.ErrInvalid)
	_, err = b.s.UpdateRun(b.ctx, r.ID, l2.Epoch, belay.RunUpdate{Phase: "bogus"})
	require.ErrorIs(t, err, belay.ErrInvalid)

	// Release, then a fresh lease without takeover.
	rel, err := b.s.ReleaseRunLease(b.ctx, r.ID, l2.Epoch)
	require.NoError(t, err)
	require.Nil(t, rel.Lease)
	_, err = b.s.UpdateRun(b.ctx, r.ID, l2.Epoch, belay.RunUpdate{Phase: belay.PhaseStreaming})
	require.ErrorIs(t, err, belay.ErrNotLeased)
	l3, err := b.s.AcquireRunLease(b.ctx, r.ID, "w3", time.Minute, 0)
	require.NoError(t, err)
	require.Equal(t, uint64(3), l3.Epoch)

	done, err := b.s.UpdateRun(b.ctx, r.ID, l3.Epoch, belay.RunUpdate{Phase: belay.PhaseFailed,
		Error: &belay.RunError{Class: belay.ClassRateLimited, Message: "429"}, Reason: "retries exhausted"})
	require.NoError(t, err)
	require.Equal(t, belay.RunFailed, done.Status)
	require.Nil(t, done.Lease, "a terminal run holds no lease")
	require.False(t, done.EndedAt.IsZero())
	require.Equal(t, belay.ClassRateLimited, done.Error.Class)
	_, err = b.s.UpdateRun(b.ctx, r.ID, l3.Epoch, belay.RunUpdate{Phase: belay.PhaseComplete})
	require.ErrorIs(t, err, belay.ErrTerminal)
	_, err = b.s.AcquireRunLease(b.ctx, r.ID, "w4", time.Minute, 0)
	require.ErrorIs(t, err, belay.ErrTerminal)
	got, err = b.s.Session(b.ctx, sess.ID)
	require.NoError(t, err)
	require.Equal(t, belay.SessionIdle, got.State)
	failed, err := b.s.Runs(b.ctx, belay.RunFilter{Status: belay.RunFailed})
	require.NoError(t, err)
	require.Len(t, failed, 1)
}

// testRunLeaseRace checks that among racers exactly one gets each grant.
func testRunLeaseRace(t *testing.T, h Harness) {
	b := setup(t, h)
	sess := b.session()
	r := b.run(sess.ID)
	const n = 16
	var wg sync.WaitGroup
	wins := make(chan belay.Run, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := b.s.AcquireRunLease(b.ctx, r.ID, fmt.Sprintf("w%d", i), time.Minute, 0)
			if err == nil {
				wins <- got
			} else if !errors.Is(err, belay.ErrLeaseHeld) {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	close(wins)
	require.Len(t, wins, 1)
	require.Equal(t, uint64(1), (<-wins).Epoch)
}

func testCancelQueued(t *testing.T, h Harness) {
	b := setup(t, h)
	sess := b.session()
	r := b.run(sess.ID)
	c, err := b.s.CancelQueuedRun(b.ctx, r.ID, "")
	require.NoError(t, err)
	require.Equal(t, belay.RunCancelled, c.Status)
	require.Equal(t, belay.ClassCancelled, c.Error.Class)
	_, err = b.s.CancelQueuedRun(b.ctx, r.ID, "")
	require.ErrorIs(t, err, belay.ErrActive)
	r2 := b.run(sess.ID)
	_, err = b.s.AcquireRunLease(b.ctx, r2.ID, "w", time.Minute, 0)
	require.NoError(t, err)
	_, err = b.s.CancelQueuedRun(b.ctx, r2.ID, "")
	require.ErrorIs(t, err, belay.ErrActive, "a running run is cancelled through its lease")
}

func post(t *testing.T, b *bundle, session, typ, key string, prio int) belay.Delivery {
	t.Helper()
	d, created, err := b.s.PostDelivery(b.ctx, belay.DeliveryInput{Session: session, Type: typ, Key: key, Priority: prio, Data: json.RawMessage(`{"k":"` + key + `"}`)})
	require.NoError(t, err)
	require.True(t, created)
	return d
}

func testDeliveries(t *testing.T, h Harness) {
	b := setup(t, h)
	sess := b.session()
	d := post(t, b, sess.ID, "ui.click", "e1", 0)
	require.Equal(t, belay.DeliveryPending, d.Status)
	require.NoError(t, ids.Check(ids.Delivery, d.ID))
	dup, created, err := b.s.PostDelivery(b.ctx, belay.DeliveryInput{Session: sess.ID, Type: "ui.click", Key: "e1"})
	require.NoError(t, err)
	require.False(t, created, "a duplicate (id, type) post is dropped")
	require.Equal(t, d.ID, dup.ID)
	post(t, b, sess.ID, "ui.other", "e1", 0) // same key, other type: a new item

	got, err := b.s.LeaseDeliveries(b.ctx, sess.ID, "agent", time.Minute, 1)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, d.ID, got[0].ID)
	require.Equal(t, belay.DeliveryLeased, got[0].Status)
	require.Equal(t, uint64(1), got[0].Epoch)
	require.Equal(t, 1, got[0].Attempts)

	_, err = b.s.SettleDelivery(b.ctx, d.ID, belay.Settlement{Kind: belay.SettleDone, Epoch: 7})
	require.ErrorIs(t, err, belay.ErrStaleEpoch)
	_, err = b.s.SettleDelivery(b.ctx, d.ID, belay.Settlement{Kind: "maybe", Epoch: 1})
	require.ErrorIs(t, err, belay.ErrInvalid)
	done, err := b.s.SettleDelivery(b.ctx, d.ID, belay.Settlement{Kind: belay.SettleDone, Epoch: 1, Result: "ok"})
	require.NoError(t, err)
	require.Equal(t, belay.DeliveryDone, done.Status)
	require.Equal(t, "ok", done.Result)
	_, err = b.s.SettleDelivery(b.ctx, d.ID, belay.Settlement{Kind: belay.SettleDone, Epoch: 1})
	require.ErrorIs(t, err, belay.ErrTerminal, "settlement is exactly once")

	_, _, err = b.s.PostDelivery(b.ctx, belay.DeliveryInput{Session: sess.ID})
	require.ErrorIs(t, err, belay.ErrInvalid)
	_, err = b.s.LeaseDeliveries(b.ctx, sess.ID, "", time.Minute, 1)
	require.ErrorIs(t, err, belay.ErrInvalid)
	all, err := b.s.Deliveries(b.ctx, belay.DeliveryFilter{Session: sess.ID})
	require.NoError(t, err)
	require.Len(t, all, 2)
	pending, err := b.s.Deliveries(b.ctx, belay.DeliveryFilter{Status: belay.DeliveryPending})
	require.NoError(t, err)
	require.Len(t, pending, 1)
	one, err := b.s.Delivery(b.ctx, d.ID)
	require.NoError(t, err)
	require.Equal(t, belay.DeliveryDone, one.Status)
}

func testDeliveryOrder(t *testing.T, h Harness) {
	b := setup(t, h)
	sess := b.session()
	low1 := post(t, b, sess.ID, "t", "low1", 0)
	high1 := post(t, b, sess.ID, "t", "high1", 5)
	low2 := post(t, b, sess.ID, "t", "low2", 0)
	high2 := post(t, b, sess.ID, "t", "high2", 5)
	got, err := b.s.LeaseDeliveries(b.ctx, sess.ID, "agent", time.Minute, 10)
	require.NoError(t, err)
	var order []string
	for _, d := range got {
		order = append(order, d.ID)
	}
	require.Equal(t, []string{high1.ID, high2.ID, low1.ID, low2.ID}, order, "priority class, then seq")
	again, err := b.s.LeaseDeliveries(b.ctx, sess.ID, "agent2", time.Minute, 10)
	require.NoError(t, err)
	require.Empty(t, again, "leased items are not handed out twice")
}

func testDeliveryLeaseExpiry(t *testing.T, h Harness) {
	b := setup(t, h)
	sess := b.session()
	d := post(t, b, sess.ID, "t", "a", 0)
	post(t, b, sess.ID, "t", "b", 0)
	// An item no lease ever took is not "expired": it was never leased;
	// an epoch never granted is not "stale".
	_, err := b.s.SettleDelivery(b.ctx, d.ID, belay.Settlement{Kind: belay.SettleDone, Epoch: 0})
	require.ErrorIs(t, err, belay.ErrNotLeased)
	require.NotErrorIs(t, err, belay.ErrLeaseExpired)
	require.ErrorContains(t, err, "never leased")
	l1, err := b.s.LeaseDeliveries(b.ctx, sess.ID, "agent1", time.Minute, 1)
	require.NoError(t, err)
	_, err = b.s.SettleDelivery(b.ctx, d.ID, belay.Settlement{Kind: belay.SettleDone, Epoch: l1[0].Epoch + 5})
	require.ErrorIs(t, err, belay.ErrStaleEpoch)
	require.ErrorContains(t, err, "never granted")
	_, err = b.s.LeaseDeliveries(b.ctx, sess.ID, "agent1", 2*time.Minute, 1)
	require.NoError(t, err)

	expired, next, err := b.s.ExpireDeliveryLeases(b.ctx)
	require.NoError(t, err)
	require.Empty(t, expired)
	require.Equal(t, Start.Add(time.Minute), next, "the earliest expiry is reported for a timer")

	b.clk.Advance(time.Minute)
	// A late ack from the expired lease is refused.
	_, err = b.s.SettleDelivery(b.ctx, d.ID, belay.Settlement{Kind: belay.SettleDone, Epoch: l1[0].Epoch})
	require.ErrorIs(t, err, belay.ErrStaleEpoch)
	require.ErrorIs(t, err, belay.ErrLeaseExpired)
	expired, next, err = b.s.ExpireDeliveryLeases(b.ctx)
	require.NoError(t, err)
	require.Len(t, expired, 1)
	require.Equal(t, d.ID, expired[0].ID)
	require.Equal(t, Start.Add(2*time.Minute), next)
	// Once the expiry returned it to the inbox, a late ack still says
	// why: the lease expired.
	_, err = b.s.SettleDelivery(b.ctx, d.ID, belay.Settlement{Kind: belay.SettleDone, Epoch: l1[0].Epoch})
	require.ErrorIs(t, err, belay.ErrLeaseExpired)
	got, err := b.s.Delivery(b.ctx, d.ID)
	require.NoError(t, err)
	require.Equal(t, belay.DeliveryPending, got.Status)

	l2, err := b.s.LeaseDeliveries(b.ctx, sess.ID, "agent2", time.Minute, 1)
	require.NoError(t, err)
	require.Equal(t, d.ID, l2[0].ID, "an expired item is redelivered")
	require.Equal(t, l1[0].Epoch+1, l2[0].Epoch)
	require.Equal(t, 2, l2[0].Attempts)
	_, err = b.s.SettleDelivery(b.ctx, d.ID, belay.Settlement{Kind: belay.SettleDone, Epoch: l1[0].Epoch})
	require.ErrorIs(t, err, belay.ErrStaleEpoch)
	_, err = b.s.SettleDelivery(b.ctx, d.ID, belay.Settlement{Kind: belay.SettleError, Epoch: l2[0].Epoch, Result: "boom"})
	require.NoError(t, err)

	// An expired lease that nobody swept is also redeliverable.
	b.clk.Advance(2 * time.Minute)
	l3, err := b.s.LeaseDeliveries(b.ctx, sess.ID, "agent3", time.Minute, 5)
	require.NoError(t, err)
	require.Len(t, l3, 1)
	require.Equal(t, uint64(2), l3[0].Epoch)
}

func testDeliveryRetryRelease(t *testing.T, h Harness) {
	b := setup(t, h)
	sess := b.session()
	d := post(t, b, sess.ID, "t", "a", 0)
	l, err := b.s.LeaseDeliveries(b.ctx, sess.ID, "agent", time.Minute, 1)
	require.NoError(t, err)
	rel, err := b.s.SettleDelivery(b.ctx, d.ID, belay.Settlement{Kind: belay.SettleRelease, Epoch: l[0].Epoch})
	require.NoError(t, err)
	require.Equal(t, belay.DeliveryPending, rel.Status)
	_, err = b.s.SettleDelivery(b.ctx, d.ID, belay.Settlement{Kind: belay.SettleDone, Epoch: l[0].Epoch})
	require.ErrorIs(t, err, belay.ErrNotLeased)
	l, err = b.s.LeaseDeliveries(b.ctx, sess.ID, "agent", time.Minute, 1)
	require.NoError(t, err)
	require.Len(t, l, 1, "a released item is redelivered at once")
	_, err = b.s.SettleDelivery(b.ctx, d.ID, belay.Settlement{Kind: belay.SettleRetry, Epoch: l[0].Epoch, Delay: 30 * time.Second})
	require.NoError(t, err)
	l, err = b.s.LeaseDeliveries(b.ctx, sess.ID, "agent", time.Minute, 1)
	require.NoError(t, err)
	require.Empty(t, l, "a retried item waits for its delay")
	b.clk.Advance(30 * time.Second)
	l, err = b.s.LeaseDeliveries(b.ctx, sess.ID, "agent", time.Minute, 1)
	require.NoError(t, err)
	require.Len(t, l, 1)
	require.Equal(t, uint64(3), l[0].Epoch)
}

// testDeliveryRace checks at-least-once with exactly-once settlement under
// concurrent consumers: every item is settled once, none twice.
func testDeliveryRace(t *testing.T, h Harness) {
	b := setup(t, h)
	sess := b.session()
	const n = 40
	for i := 0; i < n; i++ {
		post(t, b, sess.ID, "t", fmt.Sprint(i), i%3)
	}
	var mu sync.Mutex
	settled := map[string]int{}
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				got, err := b.s.LeaseDeliveries(b.ctx, sess.ID, fmt.Sprintf("c%d", w), time.Minute, 3)
				if err != nil {
					t.Error(err)
					return
				}
				if len(got) == 0 {
					return
				}
				for _, d := range got {
					if _, err := b.s.SettleDelivery(b.ctx, d.ID, belay.Settlement{Kind: belay.SettleDone, Epoch: d.Epoch}); err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					settled[d.ID]++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	require.Len(t, settled, n)
	for id, c := range settled {
		require.Equal(t, 1, c, id)
	}
}

// testRedelivery checks at-least-once delivery with exactly-once
// settlement when consumers die holding leases: every item is eventually
// settled once, items whose consumer died are handed out again after their
// lease expires, and the dead consumers' late acks are refused.
func testRedelivery(t *testing.T, h Harness) {
	b := setup(t, h)
	sess := b.session()
	const n = 30
	for i := 0; i < n; i++ {
		post(t, b, sess.ID, "t", fmt.Sprint(i), i%2)
	}
	settled := map[string]int{}
	var dead []belay.Delivery // leases held by consumers that died
	for round := 0; len(settled) < n; round++ {
		require.Less(t, round, 50, "deliveries did not drain")
		got, err := b.s.LeaseDeliveries(b.ctx, sess.ID, fmt.Sprintf("c%d", round), time.Minute, 4)
		require.NoError(t, err)
		for i, d := range got {
			if (round+i)%3 == 0 {
				dead = append(dead, d) // this consumer crashes before acking
				continue
			}
			_, err := b.s.SettleDelivery(b.ctx, d.ID, belay.Settlement{Kind: belay.SettleDone, Epoch: d.Epoch})
			require.NoError(t, err)
			settled[d.ID]++
		}
		if len(got) == 0 {
			b.clk.Advance(time.Minute)
			_, _, err := b.s.ExpireDeliveryLeases(b.ctx)
			require.NoError(t, err)
		}
	}
	for id, c := range settled {
		require.Equal(t, 1, c, id)
	}
	require.NotEmpty(t, dead)
	for _, d := range dead {
		_, err := b.s.SettleDelivery(b.ctx, d.ID, belay.Settlement{Kind: belay.SettleDone, Epoch: d.Epoch})
		require.Error(t, err, "a dead consumer's late ack is refused")
	}
	all, err := b.s.Deliveries(b.ctx, belay.DeliveryFilter{Session: sess.ID, Status: belay.DeliveryDone})
	require.NoError(t, err)
	require.Len(t, all, n)
}

// testRunEndDelivers checks that a run's end can post its delivery in the
// same durable write, idempotently.
func testRunEndDelivers(t *testing.T, h Harness) {
	b := setup(t, h)
	sess := b.session()
	r := b.run(sess.ID)
	l, err := b.s.AcquireRunLease(b.ctx, r.ID, "w", time.Minute, 0)
	require.NoError(t, err)
	_, err = b.s.UpdateRun(b.ctx, r.ID, l.Epoch, belay.RunUpdate{Phase: belay.PhaseComplete, Deliver: &belay.DeliveryInput{Key: "x"}})
	require.ErrorIs(t, err, belay.ErrInvalid, "invalid deliveries are refused before anything is written")
	_, err = b.s.UpdateRun(b.ctx, r.ID, l.Epoch, belay.RunUpdate{Phase: belay.PhaseComplete, Deliver: &belay.DeliveryInput{Session: b.session().ID, Type: "run.completed", Key: r.ID}})
	require.ErrorIs(t, err, belay.ErrInvalid, "a run's delivery goes to its own session")
	done, err := b.s.UpdateRun(b.ctx, r.ID, l.Epoch, belay.RunUpdate{Phase: belay.PhaseComplete,
		Deliver: &belay.DeliveryInput{Type: "run.completed", Key: r.ID, Data: json.RawMessage(`{"run":"` + r.ID + `"}`)}})
	require.NoError(t, err)
	require.Equal(t, belay.RunComplete, done.Status)
	b.reopen()
	ds, err := b.s.Deliveries(b.ctx, belay.DeliveryFilter{Session: sess.ID})
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, "run.completed", ds[0].Type)
	require.Equal(t, r.ID, ds[0].Key)
	_, created, err := b.s.PostDelivery(b.ctx, belay.DeliveryInput{Session: sess.ID, Type: "run.completed", Key: r.ID})
	require.NoError(t, err)
	require.False(t, created)
	evs, err := b.s.Events(b.ctx, sess.ID, 0, 0)
	require.NoError(t, err)
	n := len(evs)
	require.Equal(t, belay.EventRunUpdated, evs[n-2].Type)
	require.Equal(t, belay.EventDeliveryPosted, evs[n-1].Type)
}

func testInvalidJSON(t *testing.T, h Harness) {
	b := setup(t, h)
	_, err := b.s.CreateSession(b.ctx, belay.SessionInput{Provider: "fake", Options: json.RawMessage(`{bad`)})
	require.ErrorIs(t, err, belay.ErrInvalid)
	sess := b.session()
	_, _, err = b.s.CreateRun(b.ctx, belay.RunInput{Session: sess.ID, Input: json.RawMessage(`nope`)})
	require.ErrorIs(t, err, belay.ErrInvalid)
	_, _, err = b.s.PostDelivery(b.ctx, belay.DeliveryInput{Session: sess.ID, Type: "t", Data: json.RawMessage(`{"a":`)})
	require.ErrorIs(t, err, belay.ErrInvalid)
	_, err = b.s.Append(b.ctx, sess.ID, belay.Sync, belay.Event{Type: "note", Data: json.RawMessage(`[1,`)})
	require.ErrorIs(t, err, belay.ErrInvalid)
	// A priority beyond what every store keeps, either way.
	for _, p := range []int{belay.MaxPriority + 1, -belay.MaxPriority - 1} {
		_, _, err = b.s.CreateRun(b.ctx, belay.RunInput{Session: sess.ID, Priority: p})
		require.ErrorIs(t, err, belay.ErrInvalid)
		require.ErrorContains(t, err, "out of range")
		_, err = b.s.Submit(b.ctx, store.SubmitInput{RunInput: belay.RunInput{Session: sess.ID, Priority: p}, Policy: belay.PolicyEnqueue})
		require.ErrorIs(t, err, belay.ErrInvalid)
		_, _, err = b.s.PostDelivery(b.ctx, belay.DeliveryInput{Session: sess.ID, Type: "t", Priority: p})
		require.ErrorIs(t, err, belay.ErrInvalid)
		_, err = b.s.CreateSession(b.ctx, belay.SessionInput{Provider: "fake", FirstRun: &belay.RunInput{Priority: p}})
		require.ErrorIs(t, err, belay.ErrInvalid)
	}
	r, _, err := b.s.CreateRun(b.ctx, belay.RunInput{Session: sess.ID, Priority: -belay.MaxPriority})
	require.NoError(t, err)
	require.Equal(t, -belay.MaxPriority, r.Priority)
	evs, err := b.s.Events(b.ctx, sess.ID, 0, 0)
	require.NoError(t, err)
	require.Len(t, evs, 2, "nothing invalid was written (the session's start, the last run)")
}

// testPruneOwners: Prune drops the records of owners gone for a day,
// except those still leasing a run; a dry run drops nothing.
func testPruneOwners(t *testing.T, h Harness) {
	b := setup(t, h)
	require.NoError(t, b.s.HeartbeatOwner(b.ctx, "gone", time.Minute))
	require.NoError(t, b.s.HeartbeatOwner(b.ctx, "holder", time.Minute))
	r := b.run(b.session().ID)
	_, err := b.s.AcquireRunLease(b.ctx, r.ID, "holder", time.Minute, 0)
	require.NoError(t, err)
	owners := func() []string {
		os, err := b.s.Owners(b.ctx)
		require.NoError(t, err)
		var ids []string
		for _, o := range os {
			ids = append(ids, o.ID)
		}
		return ids
	}
	_, err = b.s.Prune(b.ctx, store.PrunePolicy{})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"gone", "holder"}, owners(), "expired a moment ago: kept")

	b.clk.Advance(store.OwnerRecordKeep + time.Hour)
	require.NoError(t, b.s.HeartbeatOwner(b.ctx, "live", time.Minute))
	_, err = b.s.Prune(b.ctx, store.PrunePolicy{DryRun: true})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"gone", "holder", "live"}, owners(), "a dry run drops nothing")
	_, err = b.s.Prune(b.ctx, store.PrunePolicy{})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"holder", "live"}, owners(), "gone for a day and leasing nothing: dropped")
}

func testPrune(t *testing.T, h Harness) {
	b := setup(t, h)
	finish := func(session string, phase belay.RunPhase) {
		r := b.run(session)
		l, err := b.s.AcquireRunLease(b.ctx, r.ID, "w", time.Minute, 0)
		require.NoError(t, err)
		_, err = b.s.UpdateRun(b.ctx, r.ID, l.Epoch, belay.RunUpdate{Phase: phase})
		require.NoError(t, err)
	}
	done := b.session()
	finish(done.ID, belay.PhaseComplete)
	failed := b.session()
	finish(failed.ID, belay.PhaseFailed)
	active := b.session()
	b.run(active.ID)
	inbox := b.session()
	finish(inbox.ID, belay.PhaseComplete)
	post(t, b, inbox.ID, "task", "x", 0)
	// The runtime's notice of a run's end that no consumer took does not
	// hold the session (belay.Delivery.HoldsRetention); one a consumer
	// leased does, as any item.
	notice := b.session()
	finish(notice.ID, belay.PhaseComplete)
	post(t, b, notice.ID, belay.DeliveryRunCompleted, "n", 0)
	taken := b.session()
	finish(taken.ID, belay.PhaseComplete)
	post(t, b, taken.ID, belay.DeliveryRunCompleted, "n", 0)
	lt, err := b.s.LeaseDeliveries(b.ctx, taken.ID, "agent", time.Minute, 1)
	require.NoError(t, err)
	require.Len(t, lt, 1)
	empty := b.session()

	rep, err := b.s.Prune(b.ctx, store.PrunePolicy{})
	require.NoError(t, err)
	require.Empty(t, rep.Pruned, "nothing is old enough")

	b.clk.Advance(store.DefaultKeepComplete + time.Hour)
	rep, err = b.s.Prune(b.ctx, store.PrunePolicy{DryRun: true})
	require.NoError(t, err)
	require.True(t, rep.DryRun)
	require.ElementsMatch(t, []string{done.ID, notice.ID, empty.ID}, prunedIDs(rep))
	_, err = b.s.Session(b.ctx, done.ID)
	require.NoError(t, err, "a dry run deletes nothing")

	rep, err = b.s.Prune(b.ctx, store.PrunePolicy{})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{done.ID, notice.ID, empty.ID}, prunedIDs(rep))
	require.Equal(t, 4, rep.Kept)
	_, err = b.s.Session(b.ctx, done.ID)
	require.ErrorIs(t, err, belay.ErrNotFound)

	// Settle the inbox items: they stay within the grace window, then go.
	l, err := b.s.LeaseDeliveries(b.ctx, inbox.ID, "agent", time.Minute, 1)
	require.NoError(t, err)
	_, err = b.s.SettleDelivery(b.ctx, l[0].ID, belay.Settlement{Kind: belay.SettleDone, Epoch: l[0].Epoch})
	require.NoError(t, err)
	// The notice's lease expired with the clock: back in the inbox, taken
	// once, it still holds the session until it is settled.
	lt, err = b.s.LeaseDeliveries(b.ctx, taken.ID, "agent", time.Minute, 1)
	require.NoError(t, err)
	require.Len(t, lt, 1)
	require.Positive(t, lt[0].Attempts)
	_, err = b.s.SettleDelivery(b.ctx, lt[0].ID, belay.Settlement{Kind: belay.SettleDone, Epoch: lt[0].Epoch})
	require.NoError(t, err)
	rep, err = b.s.Prune(b.ctx, store.PrunePolicy{})
	require.NoError(t, err)
	require.Empty(t, rep.Pruned)

	b.clk.Advance(store.DefaultKeepFailed)
	rep, err = b.s.Prune(b.ctx, store.PrunePolicy{})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{failed.ID, inbox.ID, taken.ID}, prunedIDs(rep))
	_, err = b.s.Session(b.ctx, active.ID)
	require.NoError(t, err, "an active run is never pruned")

	b.reopen()
	list, err := b.s.Sessions(b.ctx, belay.SessionFilter{})
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, active.ID, list[0].ID)
}

// testDeleteSession: a session with a queued or running run is never
// deleted; one with an item a consumer must handle only with force; the
// runtime's notice of a run's end that no consumer took does not hold it.
func testDeleteSession(t *testing.T, h Harness) {
	b := setup(t, h)
	del, ok := b.s.(store.SessionDeleter)
	if !ok {
		t.Skip("the store does not delete sessions (store.SessionDeleter)")
	}
	finished := func() string {
		s := b.session()
		r := b.run(s.ID)
		l, err := b.s.AcquireRunLease(b.ctx, r.ID, "w", time.Minute, 0)
		require.NoError(t, err)
		_, err = b.s.UpdateRun(b.ctx, r.ID, l.Epoch, belay.RunUpdate{Phase: belay.PhaseComplete})
		require.NoError(t, err)
		return s.ID
	}
	active := b.session()
	b.run(active.ID)
	require.ErrorIs(t, del.DeleteSession(b.ctx, active.ID, true), belay.ErrActive)

	work := finished()
	post(t, b, work, "task", "x", 0)
	require.ErrorIs(t, del.DeleteSession(b.ctx, work, false), belay.ErrActive)
	require.NoError(t, del.DeleteSession(b.ctx, work, true))

	notice := finished()
	post(t, b, notice, belay.DeliveryRunCompleted, "n", 0)
	require.NoError(t, del.DeleteSession(b.ctx, notice, false))

	taken := finished()
	post(t, b, taken, belay.DeliveryRunFailed, "n", 0)
	_, err := b.s.LeaseDeliveries(b.ctx, taken, "agent", time.Minute, 1)
	require.NoError(t, err)
	require.ErrorIs(t, del.DeleteSession(b.ctx, taken, false), belay.ErrActive)

	for _, id := range []string{work, notice} {
		_, err := b.s.Session(b.ctx, id)
		require.ErrorIs(t, err, belay.ErrNotFound)
	}
	for _, id := range []string{active.ID, taken} {
		_, err := b.s.Session(b.ctx, id)
		require.NoError(t, err)
	}
}

func prunedIDs(r belay.PruneReport) []string {
	var out []string
	for _, p := range r.Pruned {
		out = append(out, p.ID)
	}
	return out
}

func testReopen(t *testing.T, h Harness) {
	b := setup(t, h)
	sess := b.session()
	r, _, err := b.s.CreateRun(b.ctx, belay.RunInput{Session: sess.ID, IdempotencyKey: "k"})
	require.NoError(t, err)
	l, err := b.s.AcquireRunLease(b.ctx, r.ID, "w1", time.Minute, 0)
	require.NoError(t, err)
	_, err = b.s.UpdateRun(b.ctx, r.ID, l.Epoch, belay.RunUpdate{Phase: belay.PhaseStreaming, Ref: &belay.ConversationRef{ID: "c1"}})
	require.NoError(t, err)
	d := post(t, b, sess.ID, "t", "a", 1)
	ld, err := b.s.LeaseDeliveries(b.ctx, sess.ID, "agent", time.Minute, 1)
	require.NoError(t, err)
	_, err = b.s.Append(b.ctx, sess.ID, belay.Sync, belay.Event{Type: "delta", Run: r.ID, Epoch: l.Epoch, Data: json.RawMessage(`"tok"`)})
	require.NoError(t, err)
	before, err := b.s.Session(b.ctx, sess.ID)
	require.NoError(t, err)
	runBefore, err := b.s.Run(b.ctx, r.ID)
	require.NoError(t, err)

	b.reopen()
	after, err := b.s.Session(b.ctx, sess.ID)
	require.NoError(t, err)
	require.Equal(t, before.LastSeq, after.LastSeq)
	require.Equal(t, before.Ref, after.Ref)
	require.Equal(t, belay.SessionActive, after.State)
	runAfter, err := b.s.Run(b.ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, runBefore, runAfter, "runs survive a restart exactly")

	// Leases are persisted: the run lease is still held, the delivery is
	// still leased and expires by its time, not at once and not never.
	_, err = b.s.AcquireRunLease(b.ctx, r.ID, "w2", time.Minute, 0)
	require.ErrorIs(t, err, belay.ErrLeaseHeld)
	again, err := b.s.LeaseDeliveries(b.ctx, sess.ID, "agent", time.Minute, 1)
	require.NoError(t, err)
	require.Empty(t, again)
	_, next, err := b.s.ExpireDeliveryLeases(b.ctx)
	require.NoError(t, err)
	require.Equal(t, ld[0].Lease.ExpiresAt, next)
	b.clk.Advance(time.Minute)
	again, err = b.s.LeaseDeliveries(b.ctx, sess.ID, "agent", time.Minute, 1)
	require.NoError(t, err)
	require.Len(t, again, 1)
	require.Equal(t, d.ID, again[0].ID)
	require.Equal(t, uint64(2), again[0].Epoch)

	// Idempotency keys survive too.
	same, created, err := b.s.CreateRun(b.ctx, belay.RunInput{Session: sess.ID, IdempotencyKey: "k"})
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, r.ID, same.ID)
	_, created, err = b.s.PostDelivery(b.ctx, belay.DeliveryInput{Session: sess.ID, Type: "t", Key: "a"})
	require.NoError(t, err)
	require.False(t, created)
}

// testAddressedDeliveries: an item addressed to a consumer goes only to a
// lease for it, and an item held for a run only once the run has ended;
// both survive a reopen.
func testAddressedDeliveries(t *testing.T, h Harness) {
	b := setup(t, h)
	al, ok := b.s.(store.AddressedLeaser)
	if !ok {
		_, _, err := b.s.PostDelivery(b.ctx, belay.DeliveryInput{Session: b.session().ID, Type: "wake", To: "agent-1"})
		require.ErrorIs(t, err, belay.ErrInvalid, "a store without addressed items refuses them")
		t.Skip("the store does not keep addressed inbox items")
	}
	sess := b.session()
	r := b.run(sess.ID)
	_, _, err := b.s.PostDelivery(b.ctx, belay.DeliveryInput{Session: sess.ID, Type: "wake", Key: "a", To: "bad addressee!"})
	require.ErrorIs(t, err, belay.ErrInvalid)
	_, _, err = b.s.PostDelivery(b.ctx, belay.DeliveryInput{Session: sess.ID, Type: "wake", Key: "a", AfterRun: "run_nope"})
	require.ErrorIs(t, err, belay.ErrInvalid)
	_, _, err = b.s.PostDelivery(b.ctx, belay.DeliveryInput{Session: sess.ID, Type: "wake", Key: "a", AfterRun: ids.New(ids.Run)})
	require.ErrorIs(t, err, belay.ErrNotFound, "the run must be in the session")

	wake, created, err := b.s.PostDelivery(b.ctx, belay.DeliveryInput{Session: sess.ID, Type: "wake", Key: "agent-1/" + r.ID, To: "agent-1", AfterRun: r.ID})
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, "agent-1", wake.To)
	require.Equal(t, r.ID, wake.AfterRun)
	plain := post(t, b, sess.ID, "ui.click", "k", 0)
	_, err = al.LeaseDeliveriesTo(b.ctx, "", "w", time.Minute, 1)
	require.ErrorIs(t, err, belay.ErrInvalid)

	got, err := al.LeaseDeliveriesTo(b.ctx, "agent-1", "w", time.Minute, 10)
	require.NoError(t, err)
	require.Empty(t, got, "held until the run ends")
	got, err = b.s.LeaseDeliveries(b.ctx, "", "w", time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, got, 1, "a general lease never takes an addressed item")
	require.Equal(t, plain.ID, got[0].ID)

	l, err := b.s.AcquireRunLease(b.ctx, r.ID, "w", time.Minute, 0)
	require.NoError(t, err)
	_, err = b.s.UpdateRun(b.ctx, r.ID, l.Epoch, belay.RunUpdate{Phase: belay.PhaseComplete})
	require.NoError(t, err)
	b.reopen()
	al = b.s.(store.AddressedLeaser)
	got, err = al.LeaseDeliveriesTo(b.ctx, "agent-2", "w", time.Minute, 10)
	require.NoError(t, err)
	require.Empty(t, got, "addressed to another")
	got, err = al.LeaseDeliveriesTo(b.ctx, "agent-1", "w", time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, wake.ID, got[0].ID)
	require.Equal(t, "agent-1", got[0].To)
	_, err = b.s.SettleDelivery(b.ctx, wake.ID, belay.Settlement{Kind: belay.SettleDone, Epoch: got[0].Epoch, Result: "notified x"})
	require.NoError(t, err)
	again, created, err := b.s.PostDelivery(b.ctx, belay.DeliveryInput{Session: sess.ID, Type: "wake", Key: "agent-1/" + r.ID, To: "agent-1", AfterRun: r.ID})
	require.NoError(t, err)
	require.False(t, created, "one item per key: a second subscription is the first")
	require.Equal(t, belay.DeliveryDone, again.Status)
}

// testRunTagsAndFilter: tags and metadata are kept with a run; Runs
// filters by provider, tag, since and failed across sessions.
func testRunTagsAndFilter(t *testing.T, h Harness) {
	b := setup(t, h)
	if _, ok := b.s.(store.RunLister); !ok {
		_, _, err := b.s.CreateRun(b.ctx, belay.RunInput{Session: b.session().ID, Tags: []string{"a"}})
		require.ErrorIs(t, err, belay.ErrInvalid, "a store without run tags refuses them")
		t.Skip("the store does not keep run tags")
	}
	s1, s2 := b.session(), b.session()
	_, _, err := b.s.CreateRun(b.ctx, belay.RunInput{Session: s1.ID, Tags: []string{"has space"}})
	require.ErrorIs(t, err, belay.ErrInvalid)
	_, _, err = b.s.CreateRun(b.ctx, belay.RunInput{Session: s1.ID, Meta: map[string]string{"": "x"}})
	require.ErrorIs(t, err, belay.ErrInvalid)

	a, _, err := b.s.CreateRun(b.ctx, belay.RunInput{Session: s1.ID, Tags: []string{"team-a", "ci"}, Meta: map[string]string{"ticket": "T-1"}})
	require.NoError(t, err)
	b.clk.Advance(time.Hour)
	c, _, err := b.s.CreateRun(b.ctx, belay.RunInput{Session: s2.ID, Provider: "other", Tags: []string{"team-b"}})
	require.NoError(t, err)
	l, err := b.s.AcquireRunLease(b.ctx, c.ID, "w", time.Minute, 0)
	require.NoError(t, err)
	_, err = b.s.UpdateRun(b.ctx, c.ID, l.Epoch, belay.RunUpdate{Phase: belay.PhaseFailed, Error: &belay.RunError{Class: belay.ClassAuth, Message: "no"}})
	require.NoError(t, err)
	b.reopen()

	got, err := b.s.Run(b.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, []string{"team-a", "ci"}, got.Tags)
	require.Equal(t, "T-1", got.Meta["ticket"])
	for _, tc := range []struct {
		f    belay.RunFilter
		want []string
	}{
		{belay.RunFilter{Tag: "ci"}, []string{a.ID}},
		{belay.RunFilter{Tag: "team-b"}, []string{c.ID}},
		{belay.RunFilter{Provider: "other"}, []string{c.ID}},
		{belay.RunFilter{Failed: true}, []string{c.ID}},
		{belay.RunFilter{Since: Start.Add(30 * time.Minute)}, []string{c.ID}},
		{belay.RunFilter{Session: s1.ID, Tag: "team-b"}, nil},
		{belay.RunFilter{Status: belay.RunQueued}, []string{a.ID}},
	} {
		runs, err := b.s.Runs(b.ctx, tc.f)
		require.NoError(t, err)
		var gotIDs []string
		for _, r := range runs {
			gotIDs = append(gotIDs, r.ID)
		}
		require.Equal(t, tc.want, gotIDs, "%+v", tc.f)
		oldest := func(a, b *belay.Run) bool {
			return a.CreatedAt.Before(b.CreatedAt) || a.CreatedAt.Equal(b.CreatedAt) && a.ID < b.ID
		}
		page, more, err := b.s.(store.RunLister).ListRuns(b.ctx, tc.f, oldest, nil, 10)
		require.NoError(t, err)
		require.False(t, more)
		gotIDs = nil
		for _, r := range page {
			gotIDs = append(gotIDs, r.ID)
		}
		require.Equal(t, tc.want, gotIDs, "ListRuns %+v", tc.f)
	}
	if sc, ok := b.s.(store.RunStatusCounter); ok {
		counts, err := sc.RunStatusCounts(b.ctx)
		require.NoError(t, err)
		require.Equal(t, map[belay.RunStatus]int{belay.RunQueued: 1, belay.RunFailed: 1}, counts)
	}
}
