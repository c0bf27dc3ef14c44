package runtime

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/jsonx"
	"github.com/belayhq/belay/store"
)

// inbox arms the delivery lease timer and wakes consumers waiting for
// deliveries (G7). One timer is armed for the earliest moment an item
// becomes deliverable again (a lease expiry or a retry delay); when it
// fires, expired leases are returned to pending and waiters are woken. The
// leases themselves are persisted by the store, so a restart re-arms the
// timer from them: an unacked item is redelivered when its lease expires,
// not at once and not never.
type inbox struct {
	r *Runtime

	alarm   alarm // the next lease expiry or retry
	mu      sync.Mutex
	changed chan struct{}
}

func (ib *inbox) init(r *Runtime) {
	ib.r = r
	ib.alarm = alarm{clk: r.clk, fire: ib.fire}
	ib.changed = make(chan struct{})
}

// arm makes sure the timer fires no later than at.
func (ib *inbox) arm(at time.Time) { ib.alarm.arm(at) }

// fire expires leases, wakes waiters and re-arms for the next expiry.
func (ib *inbox) fire() {
	expired, next, err := ib.r.store.ExpireDeliveryLeases(context.Background())
	if err != nil {
		ib.r.log.Warn("expire delivery leases", "err", err)
	}
	if len(expired) > 0 {
		ib.r.log.Info("delivery leases expired", "count", len(expired))
	}
	ib.notify()
	ib.arm(next)
}

// notify wakes every waiting consumer, and the notifier: deliveries were
// posted or settled.
func (ib *inbox) notify() {
	ib.r.notify.wake()
	ib.mu.Lock()
	defer ib.mu.Unlock()
	close(ib.changed)
	ib.changed = make(chan struct{})
}

func (ib *inbox) wait() <-chan struct{} {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	return ib.changed
}

func (ib *inbox) stop() {
	ib.alarm.stop()
	ib.mu.Lock()
	defer ib.mu.Unlock()
	close(ib.changed)
	ib.changed = make(chan struct{})
}

// Post adds an item to a session's inbox; a duplicate (key, type) post is
// dropped and the first item returned with created=false. The types of
// the notices of a run's end are the runtime's own: retention tells them
// apart by type (belay.Delivery.HoldsRetention), so a client may not post
// them.
func (r *Runtime) Post(ctx context.Context, in belay.DeliveryInput) (belay.Delivery, bool, error) {
	if belay.OutcomeType(in.Type) {
		return belay.Delivery{}, false, fmt.Errorf("%w: type %q is belay's own notice of a run's end (run.completed, run.failed, run.stranded are posted only when a run ends); give the item another type", belay.ErrInvalid, in.Type)
	}
	d, created, err := r.store.PostDelivery(ctx, in)
	if err == nil && created {
		r.inbox.notify()
	}
	return d, created, err
}

// Lease leases up to max deliverable items of a session ("" for any),
// waiting up to wait for one to become deliverable.
func (r *Runtime) Lease(ctx context.Context, session, owner string, ttl time.Duration, max int, wait time.Duration) ([]belay.Delivery, error) {
	return r.lease(ctx, func() ([]belay.Delivery, error) {
		return r.store.LeaseDeliveries(ctx, session, owner, ttl, max)
	}, wait)
}

// LeaseTo leases up to max deliverable items addressed to to, in every
// session, waiting up to wait for one (an item waiting for a run becomes
// deliverable when the run ends).
func (r *Runtime) LeaseTo(ctx context.Context, to, owner string, ttl time.Duration, max int, wait time.Duration) ([]belay.Delivery, error) {
	al, ok := r.store.(store.AddressedLeaser)
	if !ok {
		return nil, fmt.Errorf("%w: this store does not keep addressed inbox items (MCP wake-ups)", belay.ErrInvalid)
	}
	return r.lease(ctx, func() ([]belay.Delivery, error) {
		return al.LeaseDeliveriesTo(ctx, to, owner, ttl, max)
	}, wait)
}

func (r *Runtime) lease(ctx context.Context, try func() ([]belay.Delivery, error), wait time.Duration) ([]belay.Delivery, error) {
	deadline := r.clk.Now().Add(wait)
	for {
		changed := r.inbox.wait()
		got, err := try()
		if err != nil || len(got) > 0 {
			for _, d := range got {
				r.inbox.arm(d.Lease.ExpiresAt)
			}
			return got, err
		}
		left := deadline.Sub(r.clk.Now())
		if left <= 0 {
			return nil, nil
		}
		timeout := make(chan struct{})
		t := r.clk.AfterFunc(left, func() { close(timeout) })
		select {
		case <-changed:
		case <-timeout:
		case <-ctx.Done():
			t.Stop()
			return nil, context.Cause(ctx)
		}
		t.Stop()
	}
}

// Settle acks, releases or retries a leased item, naming its lease epoch.
func (r *Runtime) Settle(ctx context.Context, id string, s belay.Settlement) (belay.Delivery, error) {
	d, err := r.store.SettleDelivery(ctx, id, s)
	if err != nil {
		return d, err
	}
	switch s.Kind {
	case belay.SettleRelease:
		r.inbox.notify()
	case belay.SettleRetry:
		r.inbox.arm(d.NotBefore)
	}
	return d, nil
}

// outcomeDelivery is the inbox item announcing a run's end: completed,
// failed or stranded (nil for cancelled). It is keyed by run id, so it is
// posted once.
func outcomeDelivery(run belay.Run, phase belay.RunPhase, runErr *belay.RunError, reason string, at time.Time) *belay.DeliveryInput {
	var typ string
	switch phase {
	case belay.PhaseComplete:
		typ = belay.DeliveryRunCompleted
	case belay.PhaseFailed:
		typ = belay.DeliveryRunFailed
	case belay.PhaseStranded:
		typ = belay.DeliveryRunStranded
	default:
		return nil
	}
	data := belay.OutcomeData{Run: run.ID, Status: phase.Status(), Reason: reason, At: at.UTC()}
	if runErr != nil {
		data.Class = runErr.Class
	}
	return &belay.DeliveryInput{Session: run.Session, Type: typ, Key: run.ID, Data: jsonx.Must(data)}
}
