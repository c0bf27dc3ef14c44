package runtime

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/belayhq/belay"
)

// reconcile takes over what a previous incarnation left: runs in flight
// are reclaimed at once (resumed through their provider if it can, else
// resent if no side effect could repeat, else stranded); queued runs are
// scheduled again in their order; and the delivery lease timer is
// re-armed from the persisted leases. (A finished run's delivery is posted
// in the same write that finishes it, so no crash leaves one unposted.)
func (r *Runtime) reconcile(ctx context.Context) error {
	running, err := r.store.Runs(ctx, belay.RunFilter{Status: belay.RunRunning})
	if err != nil {
		return fmt.Errorf("runtime: reconcile: %w", err)
	}
	queued, err := r.store.Runs(ctx, belay.RunFilter{Status: belay.RunQueued})
	if err != nil {
		return fmt.Errorf("runtime: reconcile: %w", err)
	}
	sort.SliceStable(queued, func(i, j int) bool { return queued[i].CreatedAt.Before(queued[j].CreatedAt) })

	r.mu.Lock()
	for _, run := range running {
		if run.Lease != nil && run.Lease.Owner == r.opts.Incarnation {
			continue // already ours (a second Start is refused earlier)
		}
		r.sched.restore(run.ID, run.Session, run.Provider)
		r.startLocked(run.ID, startReclaim)
	}
	for _, run := range queued {
		if _, err := r.sched.submit(run.ID, run.Session, run.Provider, run.Priority, PolicyEnqueue); err != nil {
			r.log.Warn("requeue run", "run", run.ID, "err", err)
		}
	}
	r.mu.Unlock()
	r.promote()

	_, next, err := r.store.ExpireDeliveryLeases(ctx)
	if err != nil {
		r.log.Warn("expire delivery leases", "err", err)
	}
	r.inbox.arm(next)
	return nil
}

// startRetention prunes by policy now and then until ctx ends (G12).
func (r *Runtime) startRetention(ctx context.Context) {
	if r.opts.PruneEvery < 0 {
		return
	}
	var tick func()
	tick = func() {
		r.mu.Lock()
		if r.stopping || ctx.Err() != nil {
			r.mu.Unlock()
			return
		}
		r.wg.Add(1)
		r.mu.Unlock()
		go func() {
			defer r.wg.Done()
			if _, err := r.Prune(ctx, false); err != nil && ctx.Err() == nil {
				r.log.Warn("prune", "err", err)
			}
			r.clk.AfterFunc(r.opts.PruneEvery, tick)
		}()
	}
	r.clk.AfterFunc(time.Minute, tick)
}
