package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/store"
)

// A runtime does not assume it is alone (issue 14): every decision that
// must hold across instances over one store is the store's. The runtime
// keeps an owner record alive (ownerLoop), claims what the store admits
// for it, rescued runs of gone owners included (claimLoop), and follows
// the store's change feed (feedLoop) to learn of new and ended runs, inbox
// changes and cancel requests, whichever instance they came from. Its own
// memory holds only the runners it executes.

// claimBatch bounds one ClaimRuns call.
const claimBatch = 64

// ownerTTL is how long the owner record lives without a heartbeat: the
// run lease's TTL, so a dead owner's runs are rescued within one lease.
func (r *Runtime) ownerTTL() time.Duration { return r.opts.LeaseTTL }

// join registers this runtime as an owner, arms the inbox timer from the
// persisted delivery leases, and starts the claim, feed and heartbeat
// loops. The first claim rescues what a previous incarnation left.
func (r *Runtime) join(ctx, bg context.Context) error {
	if err := r.store.HeartbeatOwner(ctx, r.opts.Incarnation, r.ownerTTL()); err != nil {
		return fmt.Errorf("runtime: register owner: %w", err)
	}
	head, err := r.store.ChangeHead(ctx)
	if err != nil {
		return fmt.Errorf("runtime: change feed: %w", err)
	}
	_, next, err := r.store.ExpireDeliveryLeases(ctx)
	if err != nil {
		return fmt.Errorf("runtime: expire delivery leases: %w", err)
	}
	r.inbox.arm(next)
	r.mu.Lock()
	r.joined = true // a submit may now lease its run here (submitClaiming)
	r.mu.Unlock()
	r.wg.Add(3)
	go func() { defer r.wg.Done(); r.ownerLoop(bg) }()
	go func() { defer r.wg.Done(); r.claimLoop(bg) }()
	go func() { defer r.wg.Done(); r.feedLoop(bg, head) }()
	r.claimSoon()
	return nil
}

// leave retires the owner record once the runners have stopped, so that
// another instance may rescue the runs it left at once.
func (r *Runtime) leave(ctx context.Context) error {
	r.mu.Lock()
	started := r.started
	r.mu.Unlock()
	if !started {
		return nil
	}
	if err := r.store.RetireOwner(ctx, r.opts.Incarnation); err != nil && !errors.Is(err, belay.ErrStoreClosed) {
		return fmt.Errorf("runtime: retire owner: %w", err)
	}
	return nil
}

// claimSoon wakes the claim loop.
func (r *Runtime) claimSoon() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// rescueEvery is how often the claim loop looks for runs to rescue when
// nothing else wakes it: a quarter of the lease TTL, at most half a
// second, so that a dead node's runs resume elsewhere within the TTL and
// half a second of its death (a claim that finds nothing is one short
// read-only transaction).
func (r *Runtime) rescueEvery() time.Duration {
	return max(min(r.opts.LeaseTTL/4, 500*time.Millisecond), 10*time.Millisecond)
}

// claimWorkers bounds the claims in flight at once. A claim waits for its
// lease writes to be durable; several in flight keep admission going while
// one waits, so that admission is not bounded by one sync at a time.
const claimWorkers = 8

// claimLoop claims runs whenever woken, and now and then to rescue runs of
// owners that died.
func (r *Runtime) claimLoop(ctx context.Context) {
	tick := make(chan struct{}, 1)
	var arm func()
	arm = func() {
		r.clk.AfterFunc(r.rescueEvery(), func() {
			select {
			case tick <- struct{}{}:
			default:
			}
		})
	}
	arm()
	sem := make(chan struct{}, claimWorkers)
	var wg sync.WaitGroup
	defer wg.Wait()
	adopt := true // the first claim looks for runs of this owner too
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-tick:
			arm()
			adopt = true
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		orphans := adopt
		adopt = false
		wg.Go(func() {
			defer func() { <-sem }()
			if orphans {
				r.adoptOrphans(ctx)
			}
			full, ok := r.claim(ctx)
			switch {
			case !ok && ctx.Err() == nil:
				// The store refused: try again after a pause, not in a spin.
				r.clk.AfterFunc(time.Second, r.claimSoon)
			case full:
				r.claimSoon() // there may be more: another worker takes them
			}
		})
	}
}

// claim takes one batch of what the store admits for this runtime and
// starts runners for it. It reports whether the batch was full (there may
// be more), and false in ok when the store refused.
func (r *Runtime) claim(ctx context.Context) (full, ok bool) {
	r.mu.Lock()
	stopping := r.stopping
	if !stopping {
		r.claiming++ // until its runners are started (adoptOrphans)
	}
	r.mu.Unlock()
	if stopping {
		return false, true
	}
	cs, err := r.store.ClaimRuns(ctx, store.Claim{Owner: r.opts.Incarnation, Max: claimBatch, TTL: r.opts.LeaseTTL, Limits: r.opts.Limits})
	r.mu.Lock()
	defer r.mu.Unlock()
	r.claiming--
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("claim runs", "err", err)
		}
		return false, false
	}
	for _, c := range cs {
		if r.stopping {
			break // leased to this owner: the next start or a peer rescues it
		}
		if _, ok := r.runners[c.Run.ID]; ok {
			continue
		}
		mode := startFresh
		if c.Rescued {
			mode = startReclaim
		}
		r.startLocked(c.Run.ID, mode, &c)
	}
	return len(cs) == claimBatch, true
}

// adoptOrphans takes back the runs leased to this runtime that have no
// runner here: a runner that exited without ending its run or handing it
// on, or a lease that expired while this owner kept heartbeating. A
// peer's claim rescues such a run only when the lease expired, and this
// owner's own claims never return its own runs (the store cannot tell a
// runner that is alive from one that is gone; the runtime can). Each is
// started again under a new lease epoch, which fences any late write of
// the runner that had it (G6), and goes on by the recovery rules (G9).
// A run waiting to retry a refused write (stall.go) has its retry.
func (r *Runtime) adoptOrphans(ctx context.Context) {
	runs, err := r.store.Runs(ctx, belay.RunFilter{Status: belay.RunRunning})
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("list running runs", "err", err)
		}
		return // the next tick looks again
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	// A claim in flight may have leased a run in the list and not started
	// its runner yet: while one is, a run is taken back only if the last
	// look saw it too, at the same epoch, with no runner. (Taking it from
	// such a claim would be safe, since the claim then finds a runner and
	// starts none, but would cost a lease and a recovery for nothing.)
	busy := r.claiming > 0
	seen := map[string]uint64{}
	for _, run := range runs {
		if r.stopping {
			return // the next start (or a peer) rescues what is left
		}
		if run.Lease == nil || run.Lease.Owner != r.opts.Incarnation {
			continue
		}
		if _, ok := r.runners[run.ID]; ok {
			continue
		}
		if _, ok := r.stallErr[run.ID]; ok {
			continue
		}
		if epoch, ok := r.orphans[run.ID]; busy && (!ok || epoch != run.Epoch) {
			seen[run.ID] = run.Epoch
			continue
		}
		r.log.Warn("run leased to this runtime has no runner; taking it back", "run", run.ID, "epoch", run.Epoch)
		r.startLocked(run.ID, startAdopt, nil)
	}
	r.orphans = seen
}

// ownerLoop keeps the owner record alive. A heartbeat the store refuses
// is retried at the next tick; runs stay safe meanwhile because each
// runner fences itself when it cannot renew its own lease.
func (r *Runtime) ownerLoop(ctx context.Context) {
	every := max(r.ownerTTL()/4, 10*time.Millisecond)
	for {
		done := make(chan struct{})
		t := r.clk.AfterFunc(every, func() { close(done) })
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-done:
		}
		if err := r.store.HeartbeatOwner(ctx, r.opts.Incarnation, r.ownerTTL()); err != nil && ctx.Err() == nil {
			r.log.Warn("owner heartbeat", "err", err)
		}
	}
}

// feedLoop follows the store's change feed from cursor.
func (r *Runtime) feedLoop(ctx context.Context, cursor uint64) {
	for {
		if err := r.store.WaitChanges(ctx, cursor); err != nil {
			if ctx.Err() != nil || errors.Is(err, belay.ErrStoreClosed) {
				return
			}
			r.log.Warn("change feed", "err", err)
			if !r.pause(ctx, time.Second) {
				return
			}
			continue
		}
		changes, next, err := r.store.Changes(ctx, cursor, 1024)
		switch {
		case errors.Is(err, store.ErrCursorExpired):
			// Fell behind the feed: reread what it would have said.
			if cursor, err = r.store.ChangeHead(ctx); err == nil {
				r.resync(ctx)
			}
			continue
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			r.log.Warn("change feed", "err", err)
			if !r.pause(ctx, time.Second) {
				return
			}
			continue
		}
		cursor = next
		claim, inbox, leased := false, false, false
		for _, c := range changes {
			switch c.Type {
			case belay.EventRunCancelRequested:
				r.cancelLocal(c.Run)
			case belay.EventRunCreated:
				// A run this runtime leased as it submitted it runs here
				// already: nothing for a claim to find.
				claim = claim || !r.running(c.Run)
			case belay.EventRunReleased:
				claim = true
			case belay.EventRunUpdated:
				if c.Ended {
					claim, inbox = true, true // its slot freed; items waiting for its end are ready
					r.forgetCancel(c.Run)
				}
			case belay.EventDeliveryLeased:
				leased = true
			case belay.EventDeliveryPosted, belay.EventDeliverySettled, belay.EventDeliveryExpired,
				belay.EventDeliveryReturned:
				inbox = true
			}
		}
		if leased {
			// An item leased through another instance: arm this one's
			// timer for the next expiry too (and wake the waiters), so
			// that it is redelivered when its lease expires even if that
			// instance is gone by then.
			r.inbox.fire()
			inbox = false
		}
		if claim {
			r.claimSoon()
		}
		if inbox {
			r.inbox.notify()
		}
	}
}

// running reports whether the run has a runner here.
func (r *Runtime) running(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.runners[id]
	return ok
}

// resync acts on what a follower that fell behind the feed may have
// missed: claims, inbox waiters, and cancel requests on its runs.
func (r *Runtime) resync(ctx context.Context) {
	r.claimSoon()
	r.inbox.notify()
	r.mu.Lock()
	ids := make([]string, 0, len(r.runners))
	for id := range r.runners {
		ids = append(ids, id)
	}
	r.mu.Unlock()
	for _, id := range ids {
		if run, err := r.store.Run(ctx, id); err == nil && run.CancelRequest != nil {
			r.cancelLocal(id)
		}
	}
	// Notes of cancel requests whose run's end the follower missed.
	r.mu.Lock()
	ids = ids[:0]
	for id := range r.cancelSeen {
		ids = append(ids, id)
	}
	r.mu.Unlock()
	for _, id := range ids {
		if run, err := r.store.Run(ctx, id); errors.Is(err, belay.ErrNotFound) || err == nil && run.Status.Terminal() {
			r.forgetCancel(id)
		}
	}
}

// forgetCancel drops the note of a cancel request (cancelLocal) once its
// run ended.
func (r *Runtime) forgetCancel(id string) {
	r.mu.Lock()
	delete(r.cancelSeen, id)
	r.mu.Unlock()
}

// pause waits d on the runtime's clock; it reports false if ctx ended.
func (r *Runtime) pause(ctx context.Context, d time.Duration) bool {
	done := make(chan struct{})
	t := r.clk.AfterFunc(d, func() { close(done) })
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-done:
		return true
	}
}

// cancelLocal carries out a run's cancel request if its runner is here.
// With no runner here it notes the request: a claim of this runtime may
// have leased the run already, with the run as it was before the request,
// and not yet started its runner; that runner reads the run again
// (startLocked). The note goes when the run ends.
func (r *Runtime) cancelLocal(id string) {
	r.mu.Lock()
	rn := r.runners[id]
	if rn == nil {
		r.cancelSeen[id] = struct{}{}
	}
	r.mu.Unlock()
	if rn == nil {
		return
	}
	run, err := r.store.Run(context.Background(), id)
	if err != nil {
		// The request is durable: the runner's next lease renewal finds
		// it (startTimers), if no retry here does first.
		r.log.Warn("read run for its cancel request; retrying", "run", id, "err", err)
		r.clk.AfterFunc(time.Second, func() { r.cancelLocal(id) })
		return
	}
	if run.CancelRequest == nil {
		return
	}
	rn.cancel(cancelCause(run.CancelRequest))
}

// cancelCause is the error a cancel request stops a runner with.
func cancelCause(cr *belay.CancelRequest) error {
	if cr.By != "" {
		return &interruptError{by: cr.By}
	}
	return &cancelError{reason: cr.Reason}
}
