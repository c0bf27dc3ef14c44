package runtime

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/clock"
	"github.com/belayhq/belay/internal/jsonx"
	"github.com/belayhq/belay/store"
)

// NotifyTarget is where the runtime sends notifications of inbox items: a
// webhook or an exec hook, configured by the daemon.
type NotifyTarget struct {
	// Name (stable, journaled, without secrets) and the deliveries wanted.
	store.NotificationTarget
	// Send makes one attempt. It must honour ctx; an error is retried
	// with backoff until the attempts run out.
	Send func(ctx context.Context, n Notice) error
	// Timeout bounds one attempt (DefaultNotifyTimeout if 0). A claim
	// lasts Timeout plus NotifyClaimMargin: an instance that holds it
	// longer is presumed dead and another one sends again.
	Timeout time.Duration
}

// Notice is one attempt at a notification.
type Notice struct {
	// ID is the same for every attempt, on every instance: receivers
	// dedupe by it (the webhook-id header).
	ID       string
	Delivery belay.Delivery
	Target   string
	Attempt  int
	// At is the attempt's time; Body the JSON sent:
	// {"type", "timestamp", "data": the delivery}.
	At   time.Time
	Body []byte
}

// Notification defaults.
const (
	DefaultNotifyTimeout  = 30 * time.Second
	DefaultNotifyAttempts = 8
	DefaultNotifySweep    = time.Minute
	// NotifyClaimMargin is added to a target's timeout to make the TTL of
	// a claim.
	NotifyClaimMargin = 30 * time.Second
	// notifyStopGrace is how long Stop lets sends in flight finish before
	// it cancels them (their claims are released for a prompt retry).
	notifyStopGrace = 5 * time.Second
	notifyBatch     = 64
	// notifyStoreRetry is the wait after the store failed a claim.
	notifyStoreRetry = 5 * time.Second
	notifyParallel   = 16
)

// NotificationID is the id every attempt of the notification of delivery
// to target carries.
func NotificationID(delivery, target string) string {
	h := sha256.Sum256([]byte(target))
	return "msg_" + delivery + "_" + base64.RawURLEncoding.EncodeToString(h[:8])
}

// notifyBackoff is the wait after a failed attempt: 1s, 2s, 4s ... up to
// five minutes.
func notifyBackoff(attempt int) time.Duration {
	return min(time.Second<<min(max(attempt-1, 0), 9), 5*time.Minute)
}

// notifier sends every delivery its targets want, once per target: each
// attempt is claimed in the store (so one instance sends it, whichever
// runtimes share the store), and settled there as sent, to retry at a
// time, or abandoned, so that a restart neither repeats a sent one nor
// forgets a retry. It is woken when deliveries are posted on any runtime
// over the store (inbox.notify, driven by the change feed), by a timer
// armed for the next retry or claim expiry the store reports, and by a
// slow sweep as a safety net.
type notifier struct {
	r       *Runtime
	targets []NotifyTarget

	kick chan struct{}

	alarm alarm // the next retry or claim expiry

	mu       sync.Mutex
	inflight map[string]bool // delivery|target, claimed or being claimed here
	sweeper  clock.Timer
	stopped  bool
	sem      chan struct{}

	sendCtx     context.Context // cancelled when Stop gives up waiting
	cancelSends context.CancelFunc
}

func (n *notifier) init(r *Runtime) error {
	n.r = r
	n.kick = make(chan struct{}, 1)
	n.alarm = alarm{clk: r.clk, fire: n.wake}
	n.inflight = map[string]bool{}
	n.sem = make(chan struct{}, notifyParallel)
	n.sendCtx, n.cancelSends = context.WithCancel(context.Background())
	seen := map[string]bool{}
	for _, t := range r.opts.Notify {
		switch {
		case t.Name == "" || len(t.Name) > store.MaxNotifyTarget:
			return fmt.Errorf("%w: a notification target needs a name of 1-%d bytes", belay.ErrInvalid, store.MaxNotifyTarget)
		case t.Send == nil:
			return fmt.Errorf("%w: notification target %s has no Send", belay.ErrInvalid, t.Name)
		case seen[t.Name]:
			return fmt.Errorf("%w: notification target %s is configured twice", belay.ErrInvalid, t.Name)
		}
		seen[t.Name] = true
		if t.Timeout <= 0 {
			t.Timeout = DefaultNotifyTimeout
		}
		n.targets = append(n.targets, t)
	}
	return nil
}

// start runs the loop until ctx is done. The first round sends what was
// due before the start.
func (n *notifier) start(ctx context.Context) {
	if len(n.targets) == 0 {
		return
	}
	n.sweep()
	n.r.wg.Add(1)
	go func() {
		defer n.r.wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case <-n.kick:
			}
			n.round(ctx)
		}
	}()
}

// sweep wakes the loop now and every NotifySweep.
func (n *notifier) sweep() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopped {
		return
	}
	n.wake()
	n.sweeper = n.r.clk.AfterFunc(n.r.opts.NotifySweep, n.sweep)
}

// wake asks for a round; it never blocks.
func (n *notifier) wake() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// arm makes sure a round happens no later than at.
func (n *notifier) arm(at time.Time) {
	if at.IsZero() {
		return
	}
	if !at.After(n.r.clk.Now()) {
		n.wake()
		return
	}
	n.alarm.arm(at)
}

// stop ends the rounds; sends in flight go on for a grace period, then
// are cancelled.
func (n *notifier) stop() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopped {
		return
	}
	n.stopped = true
	n.alarm.stop()
	if n.sweeper != nil {
		n.sweeper.Stop()
	}
	if len(n.inflight) == 0 {
		n.cancelSends()
	} else {
		n.r.clk.AfterFunc(notifyStopGrace, n.cancelSends)
	}
}

// round starts a send for every due notification not in flight here.
func (n *notifier) round(ctx context.Context) {
	for _, t := range n.targets {
		due, next, err := n.r.store.DueNotifications(ctx, t.NotificationTarget, notifyBatch)
		if err != nil {
			if ctx.Err() == nil {
				n.r.log.Warn("list due notifications; the sweep retries", "target", t.Name, "err", err)
			}
			continue
		}
		started := false
		for _, no := range due {
			k := no.Delivery + "|" + t.Name
			n.mu.Lock()
			busy := n.inflight[k] || n.stopped
			if !busy {
				n.inflight[k] = true
			}
			n.mu.Unlock()
			if busy {
				continue
			}
			select {
			case n.sem <- struct{}{}:
			case <-ctx.Done():
				n.done(k, false)
				return
			}
			started = true
			n.r.wg.Add(1)
			go func() {
				defer n.r.wg.Done()
				defer func() { <-n.sem }()
				wake := n.send(t, no.Delivery)
				n.done(k, wake)
			}()
		}
		if !next.IsZero() && (started || next.After(n.r.clk.Now())) {
			n.arm(next)
		}
	}
}

// done ends a send here and, if wake, asks for a round: the send freed a
// slot others may wait for.
func (n *notifier) done(k string, wake bool) {
	n.mu.Lock()
	delete(n.inflight, k)
	n.mu.Unlock()
	if wake {
		n.wake()
	}
}

// send claims, makes and settles one attempt. It reports whether a round
// may follow at once; after a store failure it arms a later one instead.
func (n *notifier) send(t NotifyTarget, delivery string) bool {
	ctx := n.sendCtx
	r := n.r
	claim, err := r.store.ClaimNotification(ctx, delivery, t.Name, r.opts.Incarnation, t.Timeout+NotifyClaimMargin)
	switch {
	case errors.Is(err, belay.ErrLeaseHeld), errors.Is(err, belay.ErrTerminal), errors.Is(err, store.ErrNotificationNotDue):
		return true // another instance has it, or had it
	case err != nil:
		if ctx.Err() == nil {
			r.log.Warn("claim notification; will retry", "delivery", delivery, "target", t.Name, "retry_in", notifyStoreRetry, "err", err)
			n.arm(r.clk.Now().Add(notifyStoreRetry))
		}
		return false
	}
	out := store.NotificationOutcome{Kind: store.NotifyOutcomeSent}
	d, err := r.store.Delivery(ctx, delivery)
	if err == nil {
		at := r.clk.Now()
		notice := Notice{ID: NotificationID(delivery, t.Name), Delivery: d, Target: t.Name, Attempt: claim.Attempt, At: at,
			Body: jsonx.Must(map[string]any{"type": d.Type, "timestamp": at.UTC().Format(time.RFC3339), "data": d})}
		sctx, cancel := context.WithTimeout(ctx, t.Timeout)
		err = t.Send(sctx, notice)
		cancel()
	}
	switch {
	case err == nil:
	case ctx.Err() != nil:
		// Stopping: released for the next instance to send at once.
		out = store.NotificationOutcome{Kind: store.NotifyOutcomeRetry, Error: "the runtime stopped during the attempt: " + err.Error()}
	case claim.Attempt >= r.opts.NotifyAttempts:
		out = store.NotificationOutcome{Kind: store.NotifyOutcomeAbandoned, Error: err.Error()}
		r.log.Error("notification abandoned", "delivery", delivery, "target", t.Name, "attempts", claim.Attempt, "err", err)
	default:
		out = store.NotificationOutcome{Kind: store.NotifyOutcomeRetry, RetryAfter: notifyBackoff(claim.Attempt), Error: err.Error()}
		r.log.Warn("notification failed; will retry", "delivery", delivery, "target", t.Name, "attempt", claim.Attempt, "retry_in", out.RetryAfter, "err", err)
	}
	// Settled even when stopping: a sent notification recorded as sent is
	// what keeps the next start from sending it again.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	no, err := r.store.SettleNotification(sctx, claim, out)
	if err != nil {
		// The claim expires and the notification is sent again (at least
		// once; the receiver dedupes by its id).
		r.log.Warn("settle notification; it is retried when the claim expires", "delivery", delivery, "target", t.Name, "err", err)
		n.arm(claim.ExpiresAt)
		return false
	}
	n.arm(no.NotBefore)
	return true
}
