package runtime

import (
	"errors"
	"time"

	"github.com/belayhq/belay"
)

// A runner whose write the store refused (a full disk, an I/O error, a
// store that cannot be reached) cannot record anything more, so it stops.
// Its run is not left "running" with nobody on it, and not failed either:
// nothing about the run itself went wrong. The runner's slot (the
// conversation lease, the admission cap) is kept, and the run is started
// again after a backoff, in startRetry mode: it takes its own lease over,
// then resumes through its provider, resends when no side effect could
// repeat, or strands, by the rules of any recovery (G9). When the store
// still refuses, the next backoff is longer, up to maxStallBackoff. A
// stopping runtime retries nothing: the next start reclaims the run.

const (
	minStallBackoff = 500 * time.Millisecond
	maxStallBackoff = 30 * time.Second
)

// stallOn records that the runner stops because the store refused a
// write, unless err says another worker owns the run now (then this one
// just leaves).
func (rn *runner) stallOn(err error) {
	if err == nil || errors.Is(err, belay.ErrStaleEpoch) || errors.Is(err, belay.ErrNotLeased) ||
		errors.Is(err, belay.ErrLeaseHeld) || errors.Is(err, belay.ErrTerminal) || errors.Is(err, belay.ErrNotFound) {
		return
	}
	rn.mu.Lock()
	defer rn.mu.Unlock()
	if rn.stalled == nil {
		rn.stalled = err
	}
}

// afterRunner is called when a runner exits: a stalled run is retried
// later in the same slot; any other run frees its slot.
func (r *Runtime) afterRunner(rn *runner) {
	rn.mu.Lock()
	stalled := rn.stalled
	rn.mu.Unlock()
	r.mu.Lock()
	if stalled == nil || r.stopping {
		r.mu.Unlock()
		r.finished(rn.id)
		return
	}
	delete(r.runners, rn.id)
	n := r.stalls[rn.id]
	r.stalls[rn.id] = n + 1
	r.stallErr[rn.id] = stalled
	r.mu.Unlock()
	wait := min(minStallBackoff<<min(n, 10), maxStallBackoff)
	r.log.Warn("run stalled: the store refused a write; retrying", "run", rn.id, "in", wait, "err", stalled)
	r.clk.AfterFunc(wait, func() { r.retryStalled(rn.id) })
	if h := r.opts.OnStall; h != nil {
		h(rn.id, stalled)
	}
}

// retryStalled starts a stalled run again, unless the runtime is stopping
// (the next start reclaims it) or it already runs.
func (r *Runtime) retryStalled(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopping {
		return
	}
	if _, ok := r.runners[id]; ok {
		return
	}
	r.startLocked(id, startRetry, nil)
}

// unstalled forgets a run's stall once its retry wrote again.
func (r *Runtime) unstalled(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.stallErr, id)
}
