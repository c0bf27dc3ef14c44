package fsstore

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/store"
)

var _ store.NotificationStore = (*Store)(nil)

func notifyKey(delivery, target string) string { return delivery + "\x00" + target }

// applyNotify folds a notification event. Events of epoch 0 were written
// by the daemon's notifier before the store kept notifications: a claim
// of theirs says nothing durable, a settlement is final. It reports
// whether the state changed.
func (st *state) applyNotify(e *belay.Event) (changed bool, err error) {
	legacy := e.Epoch == 0
	if legacy && e.Type == belay.EventNotifyClaimed {
		return false, nil
	}
	var c store.NotifyClaimedData
	var s store.NotifySettledData
	var delivery, target string
	if e.Type == belay.EventNotifyClaimed {
		if err := decode(e, &c); err != nil {
			return false, err
		}
		delivery, target = c.Delivery, c.Target
	} else {
		if err := decode(e, &s); err != nil {
			return false, err
		}
		delivery, target = s.Delivery, s.Target
	}
	if delivery == "" || target == "" {
		return false, corrupt(e, "a notification without a delivery or target")
	}
	if !legacy && st.deliveries[delivery] == nil {
		return false, corrupt(e, fmt.Sprintf("names unknown delivery %q", delivery))
	}
	k := notifyKey(delivery, target)
	n := st.Notifications[k]
	if n == nil {
		// Added only once the event folds: a refused event changes nothing.
		n = &store.Notification{Delivery: delivery, Session: st.Session.ID, Target: target, State: store.NotifyPending}
		defer func() {
			if err == nil {
				if st.Notifications == nil {
					st.Notifications = map[string]*store.Notification{}
				}
				st.Notifications[k] = n
			}
		}()
	}
	if legacy {
		n.State, n.Attempts, n.Error, n.SettledAt = store.NotifyAbandoned, s.Attempt, s.Error, e.TS
		if s.OK {
			n.State = store.NotifySent
		}
		n.Claim = nil
		return true, nil
	}
	if n.State.Settled() {
		return false, corrupt(e, fmt.Sprintf("changes the notification of %s to %s, which is %s", delivery, target, n.State))
	}
	if e.Type == belay.EventNotifyClaimed {
		if e.Epoch <= n.Epoch {
			return false, corrupt(e, fmt.Sprintf("epoch %d does not follow epoch %d", e.Epoch, n.Epoch))
		}
		n.Epoch, n.State, n.Attempts, n.NotBefore = e.Epoch, store.NotifyClaimed, c.Attempt, time.Time{}
		n.Claim = &belay.Lease{Owner: c.Owner, Epoch: e.Epoch, GrantedAt: e.TS, ExpiresAt: c.ExpiresAt}
		return true, nil
	}
	if e.Epoch != n.Epoch || n.State != store.NotifyClaimed {
		return false, corrupt(e, fmt.Sprintf("settles epoch %d of a notification at epoch %d (%s)", e.Epoch, n.Epoch, n.State))
	}
	o := store.NotificationOutcome{Kind: s.Outcome}
	if o.Check() != nil {
		return false, corrupt(e, fmt.Sprintf("outcome %q", s.Outcome))
	}
	n.State, n.Claim, n.NotBefore, n.Error = o.State(), nil, s.NotBefore, s.Error
	if n.State.Settled() {
		n.SettledAt = e.TS
	}
	return true, nil
}

func copyNotification(n *store.Notification) store.Notification {
	c := *n
	if n.Claim != nil {
		l := *n.Claim
		c.Claim = &l
	}
	return c
}

// notification returns the notification of d to target; ss.mu is held.
func (ss *session) notification(d *belay.Delivery, target string) store.Notification {
	if n := ss.st.Notifications[notifyKey(d.ID, target)]; n != nil {
		return copyNotification(n)
	}
	return store.Notification{Delivery: d.ID, Session: ss.id, Target: target, State: store.NotifyPending}
}

// Notification returns the notification of a delivery to a target.
func (s *Store) Notification(_ context.Context, delivery, target string) (store.Notification, error) {
	ss, d, err := s.deliverySession(delivery)
	if err != nil {
		return store.Notification{}, err
	}
	defer ss.mu.Unlock()
	return ss.notification(d, target), nil
}

// ClaimNotification claims a notification for owner (store.NotificationStore).
func (s *Store) ClaimNotification(ctx context.Context, delivery, target, owner string, ttl time.Duration) (store.NotificationClaim, error) {
	if err := store.CheckClaim(delivery, target, owner, ttl); err != nil {
		return store.NotificationClaim{}, err
	}
	ss, d, err := s.deliverySession(delivery)
	if err != nil {
		return store.NotificationClaim{}, err
	}
	defer ss.mu.Unlock()
	if err := ss.writable(); err != nil {
		return store.NotificationClaim{}, err
	}
	now := s.clock.Now()
	n := ss.notification(d, target)
	switch {
	case n.State.Settled():
		return store.NotificationClaim{}, fmt.Errorf("%w: the notification of %s to %s is %s", belay.ErrTerminal, delivery, target, n.State)
	case n.State == store.NotifyClaimed && !n.Claim.Expired(now):
		return store.NotificationClaim{}, fmt.Errorf("%w: the notification of %s to %s is claimed by %s until %s",
			belay.ErrLeaseHeld, delivery, target, n.Claim.Owner, n.Claim.ExpiresAt.Format(time.RFC3339))
	case n.State == store.NotifyPending && now.Before(n.NotBefore):
		return store.NotificationClaim{}, fmt.Errorf("%w: the notification of %s to %s is retried from %s",
			store.ErrNotificationNotDue, delivery, target, n.NotBefore.Format(time.RFC3339))
	}
	c := store.NotificationClaim{Delivery: delivery, Session: ss.id, Target: target, Owner: owner,
		Epoch: n.Epoch + 1, Attempt: n.Attempts + 1, ExpiresAt: now.Add(ttl).UTC()}
	data, err := marshal(store.NotifyClaimedData{Delivery: delivery, Target: target, Owner: owner, ExpiresAt: c.ExpiresAt, Attempt: c.Attempt})
	if err != nil {
		return store.NotificationClaim{}, err
	}
	if _, err := ss.commit(ctx, belay.Event{Type: belay.EventNotifyClaimed, Epoch: c.Epoch, Data: data}); err != nil {
		return store.NotificationClaim{}, err
	}
	return c, nil
}

// SettleNotification records a claimed attempt's outcome
// (store.NotificationStore).
func (s *Store) SettleNotification(ctx context.Context, c store.NotificationClaim, o store.NotificationOutcome) (store.Notification, error) {
	if err := o.Check(); err != nil {
		return store.Notification{}, err
	}
	ss, d, err := s.deliverySession(c.Delivery)
	if err != nil {
		return store.Notification{}, err
	}
	defer ss.mu.Unlock()
	if err := ss.writable(); err != nil {
		return store.Notification{}, err
	}
	n := ss.notification(d, c.Target)
	switch {
	case n.State.Settled():
		return n, fmt.Errorf("%w: the notification of %s to %s is %s", belay.ErrTerminal, c.Delivery, c.Target, n.State)
	case c.Epoch != n.Epoch:
		return n, &belay.StaleEpochError{Kind: "notification", ID: c.Delivery + "/" + c.Target, Got: c.Epoch, Current: n.Epoch}
	case n.State != store.NotifyClaimed:
		return n, fmt.Errorf("%w: the notification of %s to %s at epoch %d is not claimed", belay.ErrNotLeased, c.Delivery, c.Target, c.Epoch)
	}
	p := store.NotifySettledData{Delivery: c.Delivery, Target: c.Target, Outcome: o.Kind, Error: o.Error, Attempt: n.Attempts}
	if o.Kind == store.NotifyOutcomeRetry {
		p.NotBefore = s.clock.Now().Add(o.RetryAfter).UTC()
	}
	data, err := marshal(p)
	if err != nil {
		return n, err
	}
	if _, err := ss.commit(ctx, belay.Event{Type: belay.EventNotifySettled, Epoch: c.Epoch, Data: data}); err != nil {
		return n, err
	}
	n = ss.notification(d, c.Target)
	if n.State.Settled() {
		s.notify.drop(c.Delivery, c.Target)
	}
	return n, nil
}

// notifyIndex lists, per target, the notifications that are not settled
// yet: the deliveries DueNotifications looks at, so that a listing reads
// the few open ones rather than every delivery of every session. It is
// built from the loaded state at a target's first listing, then kept by
// PostDelivery (new deliveries) and SettleNotification (settled ones);
// entries of deleted sessions are dropped when met.
type notifyIndex struct {
	mu      sync.Mutex
	targets map[string]*targetIndex // by targetKey
}

type targetIndex struct {
	target store.NotificationTarget
	built  chan struct{} // closed once the first fill is done
	open   map[string]notifyRef
}

type notifyRef struct {
	session, delivery string
	created           time.Time
	seq               uint64
}

func targetKey(t store.NotificationTarget) string {
	return fmt.Sprintf("%s\x00%q\x00%q", t.Name, t.Sessions, t.Types)
}

// posted adds a new delivery to the indexes that want it. ss.mu is held.
func (ix *notifyIndex) posted(d *belay.Delivery) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for _, ti := range ix.targets {
		if ti.target.Wants(d) {
			ti.open[d.ID] = notifyRef{session: d.Session, delivery: d.ID, created: d.CreatedAt, seq: d.Seq}
		}
	}
}

// drop removes a settled notification from the indexes.
func (ix *notifyIndex) drop(delivery, target string) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for _, ti := range ix.targets {
		if ti.target.Name == target {
			delete(ti.open, delivery)
		}
	}
}

// target returns the index of t, filling it from the sessions' state the
// first time. Deliveries posted while it fills are added by posted.
func (s *Store) targetIndex(t store.NotificationTarget) (*targetIndex, error) {
	k := targetKey(t)
	ix := &s.notify
	ix.mu.Lock()
	if ix.targets == nil {
		ix.targets = map[string]*targetIndex{}
	}
	ti, ok := ix.targets[k]
	if ok {
		ix.mu.Unlock()
		<-ti.built
		return ti, nil
	}
	ti = &targetIndex{target: t, built: make(chan struct{}), open: map[string]notifyRef{}}
	ix.targets[k] = ti
	ix.mu.Unlock()
	defer close(ti.built)
	sessions, err := s.allSessions()
	if err != nil {
		ix.mu.Lock()
		delete(ix.targets, k)
		ix.mu.Unlock()
		return nil, err
	}
	for _, ss := range sessions {
		var refs []notifyRef
		ss.mu.Lock()
		for _, d := range ss.st.Deliveries {
			if t.Wants(d) && !ss.notification(d, t.Name).State.Settled() {
				refs = append(refs, notifyRef{session: ss.id, delivery: d.ID, created: d.CreatedAt, seq: d.Seq})
			}
		}
		ss.mu.Unlock()
		ix.mu.Lock()
		for _, r := range refs {
			ti.open[r.delivery] = r
		}
		ix.mu.Unlock()
	}
	return ti, nil
}

// DueNotifications lists the notifications for t that may be claimed now
// (store.NotificationStore).
func (s *Store) DueNotifications(_ context.Context, t store.NotificationTarget, limit int) ([]store.Notification, time.Time, error) {
	if t.Name == "" || limit <= 0 {
		return nil, time.Time{}, fmt.Errorf("%w: a notification listing needs a target name and a positive limit", belay.ErrInvalid)
	}
	ti, err := s.targetIndex(t)
	if err != nil {
		return nil, time.Time{}, err
	}
	s.notify.mu.Lock()
	refs := make([]notifyRef, 0, len(ti.open))
	for _, r := range ti.open {
		refs = append(refs, r)
	}
	s.notify.mu.Unlock()
	sort.Slice(refs, func(i, j int) bool {
		if !refs[i].created.Equal(refs[j].created) {
			return refs[i].created.Before(refs[j].created)
		}
		if refs[i].session != refs[j].session {
			return refs[i].session < refs[j].session
		}
		return refs[i].seq < refs[j].seq
	})
	now := s.clock.Now()
	var due []store.Notification
	var next time.Time
	later := func(at time.Time) {
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	for _, r := range refs {
		ss, err := s.session(r.session)
		if err != nil {
			s.notify.drop(r.delivery, t.Name) // the session is gone
			continue
		}
		if ss.fault() != nil {
			continue // read-only: no claim can be written until it is healed
		}
		ss.mu.Lock()
		d := ss.st.deliveries[r.delivery]
		var n store.Notification
		if d != nil {
			n = ss.notification(d, t.Name)
		}
		ss.mu.Unlock()
		switch {
		case d == nil || n.State.Settled():
			s.notify.drop(r.delivery, t.Name)
		case n.State == store.NotifyClaimed && !n.Claim.Expired(now):
			later(n.Claim.ExpiresAt)
		case n.State == store.NotifyPending && now.Before(n.NotBefore):
			later(n.NotBefore)
		case len(due) < limit:
			due = append(due, n)
		default:
			later(now) // more are due than were asked for
		}
	}
	return due, next, nil
}
