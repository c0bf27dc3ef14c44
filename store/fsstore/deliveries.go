package fsstore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/ids"
)

// maxDeliveryType caps a delivery type's length.
const maxDeliveryType = 64

// PostDelivery adds an inbox item, once per (Key, Type) in the session.
func (s *Store) PostDelivery(ctx context.Context, in belay.DeliveryInput) (belay.Delivery, bool, error) {
	if err := checkDeliveryInput(in); err != nil {
		return belay.Delivery{}, false, err
	}
	ss, err := s.session(in.Session)
	if err != nil {
		return belay.Delivery{}, false, err
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if err := ss.writable(); err != nil {
		if id, ok := ss.st.DeliveryKeys[deliveryKey(in.Type, in.Key)]; ok && in.Key != "" {
			return copyDelivery(ss.st.deliveries[id]), false, nil
		}
		return belay.Delivery{}, false, err
	}
	ev, id, hint, err := s.postEvent(ss, in)
	if err != nil {
		return belay.Delivery{}, false, err
	}
	if id == "" {
		return copyDelivery(ss.st.deliveries[ss.st.DeliveryKeys[deliveryKey(in.Type, in.Key)]]), false, nil
	}
	if _, err := ss.commitHinted(ctx, hint, ev); err != nil {
		return belay.Delivery{}, false, err
	}
	s.notify.posted(ss.st.deliveries[id])
	return copyDelivery(ss.st.deliveries[id]), true, nil
}

func checkDeliveryInput(in belay.DeliveryInput) error {
	if in.Type == "" || len(in.Type) > maxDeliveryType {
		return fmt.Errorf("%w: a delivery type is 1-%d characters", belay.ErrInvalid, maxDeliveryType)
	}
	if err := belay.CheckPriority(in.Priority); err != nil {
		return err
	}
	if in.To != "" && belay.CheckTags([]string{in.To}, nil) != nil {
		return fmt.Errorf("%w: addressee %q: want 1-%d of letters, digits and ._:/@-", belay.ErrInvalid, in.To, belay.MaxTagLen)
	}
	if in.AfterRun != "" {
		if err := ids.Check(ids.Run, in.AfterRun); err != nil {
			return fmt.Errorf("%w: afterRun: %v", belay.ErrInvalid, err)
		}
	}
	return checkJSON("delivery data", in.Data)
}

// postEvent returns the event that posts in, and the new delivery's id; an
// empty id means a delivery with the same (Key, Type) exists. ss.mu is held.
func (s *Store) postEvent(ss *session, in belay.DeliveryInput) (belay.Event, string, any, error) {
	if in.Key != "" {
		if _, ok := ss.st.DeliveryKeys[deliveryKey(in.Type, in.Key)]; ok {
			return belay.Event{}, "", nil, nil
		}
	}
	if in.AfterRun != "" {
		if !ss.st.hasRun(in.AfterRun) {
			return belay.Event{}, "", nil, fmt.Errorf("%w: run %s is not in session %s", belay.ErrNotFound, in.AfterRun, ss.id)
		}
	}
	return postedEvent(in)
}

// postedEvent is the delivery.posted event of a new item, its id and the
// event's payload hint (postedHint).
func postedEvent(in belay.DeliveryInput) (belay.Event, string, any, error) {
	data, err := asWritten(in.Data)
	if err != nil {
		return belay.Event{}, "", nil, err
	}
	p := belay.DeliveryPostedData{ID: ids.New(ids.Delivery), Type: in.Type, Key: in.Key, Priority: in.Priority, Data: data, To: in.To, AfterRun: in.AfterRun}
	raw, err := marshal(p)
	if err != nil {
		return belay.Event{}, "", nil, err
	}
	return belay.Event{Type: belay.EventDeliveryPosted, Data: raw}, p.ID, postedHint(&p), nil
}

// deliverySession finds the session holding a delivery, locked.
func (s *Store) deliverySession(id string) (*session, *belay.Delivery, error) {
	if err := ids.Check(ids.Delivery, id); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", belay.ErrInvalid, err)
	}
	s.idxMu.RLock()
	sid, ok := s.deliveries[id]
	s.idxMu.RUnlock()
	if !ok {
		return nil, nil, fmt.Errorf("%w: delivery %s", belay.ErrNotFound, id)
	}
	ss, err := s.session(sid)
	if err != nil {
		return nil, nil, err
	}
	ss.mu.Lock()
	d, ok := ss.st.deliveries[id]
	if !ok {
		ss.mu.Unlock()
		return nil, nil, fmt.Errorf("%w: delivery %s", belay.ErrNotFound, id)
	}
	return ss, d, nil
}

// Delivery returns one delivery.
func (s *Store) Delivery(_ context.Context, id string) (belay.Delivery, error) {
	ss, d, err := s.deliverySession(id)
	if err != nil {
		return belay.Delivery{}, err
	}
	defer ss.mu.Unlock()
	return copyDelivery(d), nil
}

// sessionsFor returns the named session, or all of them for "".
func (s *Store) sessionsFor(id string) ([]*session, error) {
	if id == "" {
		return s.allSessions()
	}
	ss, err := s.session(id)
	if err != nil {
		return nil, err
	}
	return []*session{ss}, nil
}

// Deliveries lists deliveries in delivery order.
func (s *Store) Deliveries(_ context.Context, f belay.DeliveryFilter) ([]belay.Delivery, error) {
	sessions, err := s.sessionsFor(f.Session)
	if err != nil {
		return nil, err
	}
	var out []belay.Delivery
	for _, ss := range sessions {
		ss.mu.Lock()
		for _, d := range ss.st.sortedDeliveries() {
			if f.Status == "" || d.Status == f.Status {
				out = append(out, copyDelivery(d))
			}
		}
		ss.mu.Unlock()
	}
	sortDeliveries(out)
	return out, nil
}

// sortDeliveries orders deliveries of several sessions: priority class,
// then creation time, then seq.
func sortDeliveries(ds []belay.Delivery) {
	sort.SliceStable(ds, func(i, j int) bool {
		a, b := ds[i], ds[j]
		if a.Priority != b.Priority {
			return a.Priority > b.Priority
		}
		if a.Session == b.Session {
			return a.Seq < b.Seq
		}
		return a.CreatedAt.Before(b.CreatedAt)
	})
}

// deliverable reports whether d can be leased at now.
func deliverable(d *belay.Delivery, now time.Time) bool {
	switch d.Status {
	case belay.DeliveryPending:
		return !now.Before(d.NotBefore)
	case belay.DeliveryLeased:
		return d.Lease.Expired(now)
	}
	return false
}

// LeaseDeliveries leases up to max deliverable items ("" session: any)
// that are addressed to no one.
func (s *Store) LeaseDeliveries(ctx context.Context, session, owner string, ttl time.Duration, max int) ([]belay.Delivery, error) {
	return s.lease(ctx, session, "", owner, ttl, max)
}

// LeaseDeliveriesTo leases up to max deliverable items, in any session,
// addressed to to.
func (s *Store) LeaseDeliveriesTo(ctx context.Context, to, owner string, ttl time.Duration, max int) ([]belay.Delivery, error) {
	if to == "" {
		return nil, fmt.Errorf("%w: an addressed lease needs an addressee", belay.ErrInvalid)
	}
	return s.lease(ctx, "", to, owner, ttl, max)
}

func (s *Store) lease(ctx context.Context, session, to, owner string, ttl time.Duration, max int) ([]belay.Delivery, error) {
	if owner == "" || ttl <= 0 || max <= 0 {
		return nil, fmt.Errorf("%w: a lease needs an owner, a positive ttl and max", belay.ErrInvalid)
	}
	if err := s.writable(); err != nil {
		return nil, err
	}
	sessions, err := s.sessionsFor(session)
	if err != nil {
		return nil, err
	}
	// Find candidates in delivery order, then lease them session by session.
	now := s.clock.Now()
	var cands []belay.Delivery
	for _, ss := range sessions {
		if ss.fault() != nil {
			continue // a broken session must not block the others
		}
		ss.mu.Lock()
		for _, d := range ss.st.sortedDeliveries() {
			if ss.st.ready(d, to, now) {
				cands = append(cands, copyDelivery(d))
			}
		}
		ss.mu.Unlock()
	}
	sortDeliveries(cands)
	var out []belay.Delivery
	var errs []error
	for _, c := range cands {
		if len(out) == max {
			break
		}
		d, ok, err := s.leaseOne(ctx, c.ID, to, owner, ttl)
		if err != nil {
			if ctx.Err() != nil {
				return out, err
			}
			// The item's session failed; it reports why. Go on with others.
			errs = append(errs, err)
			continue
		}
		if ok {
			out = append(out, d)
		}
	}
	if len(out) == 0 && len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// ready reports whether d can be leased at now by a lease for addressee
// to: deliverable, addressed to to, and past the end of the run it waits
// for. st's session is locked.
func (st *state) ready(d *belay.Delivery, to string, now time.Time) bool {
	if d.To != to || !deliverable(d, now) {
		return false
	}
	if d.AfterRun == "" {
		return true
	}
	return st.ended(d.AfterRun)
}

// leaseOne leases one delivery if it is still deliverable.
func (s *Store) leaseOne(ctx context.Context, id, to, owner string, ttl time.Duration) (belay.Delivery, bool, error) {
	ss, d, err := s.deliverySession(id)
	if err != nil {
		return belay.Delivery{}, false, err
	}
	defer ss.mu.Unlock()
	now := s.clock.Now()
	if !ss.st.ready(d, to, now) {
		return belay.Delivery{}, false, nil // another consumer got it first
	}
	data, err := marshal(belay.DeliveryLeasedData{ID: id, Owner: owner, ExpiresAt: now.Add(ttl).UTC()})
	if err != nil {
		return belay.Delivery{}, false, err
	}
	if _, err := ss.commit(ctx, belay.Event{Type: belay.EventDeliveryLeased, Epoch: d.Epoch + 1, Data: data}); err != nil {
		return belay.Delivery{}, false, err
	}
	return copyDelivery(d), true, nil
}

// SettleDelivery acks, releases or retries a leased item.
func (s *Store) SettleDelivery(ctx context.Context, id string, st belay.Settlement) (belay.Delivery, error) {
	switch st.Kind {
	case belay.SettleDone, belay.SettleError, belay.SettleRelease, belay.SettleRetry:
	default:
		return belay.Delivery{}, fmt.Errorf("%w: settlement %q is not done, error, release or retry", belay.ErrInvalid, st.Kind)
	}
	if st.Delay < 0 {
		return belay.Delivery{}, fmt.Errorf("%w: negative retry delay", belay.ErrInvalid)
	}
	ss, d, err := s.deliverySession(id)
	if err != nil {
		return belay.Delivery{}, err
	}
	defer ss.mu.Unlock()
	if err := ss.writable(); err != nil {
		return belay.Delivery{}, err
	}
	now := s.clock.Now()
	switch {
	case d.Status.Settled():
		return belay.Delivery{}, fmt.Errorf("%w: delivery %s is settled (%s)", belay.ErrTerminal, id, d.Status)
	case st.Epoch != d.Epoch:
		return belay.Delivery{}, &belay.StaleEpochError{Kind: "delivery", ID: id, Got: st.Epoch, Current: d.Epoch}
	case d.Status != belay.DeliveryLeased && d.Epoch == 0:
		return belay.Delivery{}, notLeasedYet(id)
	case d.Status != belay.DeliveryLeased && ss.st.Expired[id] == st.Epoch:
		return belay.Delivery{}, fmt.Errorf("%w (%w): delivery %s: the lease at epoch %d expired and the item was returned to the inbox for redelivery",
			belay.ErrLeaseExpired, belay.ErrStaleEpoch, id, st.Epoch)
	case d.Status != belay.DeliveryLeased:
		return belay.Delivery{}, fmt.Errorf("%w: delivery %s at epoch %d was returned to the inbox", belay.ErrNotLeased, id, st.Epoch)
	case d.Lease.Expired(now):
		return belay.Delivery{}, fmt.Errorf("%w (%w): delivery %s: the lease at epoch %d expired at %s and the item will be redelivered",
			belay.ErrLeaseExpired, belay.ErrStaleEpoch, id, st.Epoch, d.Lease.ExpiresAt.Format(time.RFC3339))
	}
	p := belay.DeliverySettledData{ID: id, Kind: st.Kind, Result: st.Result}
	if st.Kind == belay.SettleRetry {
		p.NotBefore = now.Add(st.Delay).UTC()
	}
	data, err := marshal(p)
	if err != nil {
		return belay.Delivery{}, err
	}
	if _, err := ss.commit(ctx, belay.Event{Type: belay.EventDeliverySettled, Epoch: st.Epoch, Data: data}); err != nil {
		return belay.Delivery{}, err
	}
	return copyDelivery(d), nil
}

// ExpireDeliveryLeases returns expired leased items to pending.
func (s *Store) ExpireDeliveryLeases(ctx context.Context) ([]belay.Delivery, time.Time, error) {
	if err := s.writable(); err != nil {
		return nil, time.Time{}, err
	}
	sessions, err := s.allSessions()
	if err != nil {
		return nil, time.Time{}, err
	}
	var expired []belay.Delivery
	var next time.Time
	var errs []error
	for _, ss := range sessions {
		ex, nx, err := s.expireSession(ctx, ss)
		expired = append(expired, ex...)
		if err != nil {
			// One broken session must not stop expiry in the others.
			errs = append(errs, err)
		}
		if !nx.IsZero() && (next.IsZero() || nx.Before(next)) {
			next = nx
		}
	}
	return expired, next, errors.Join(errs...)
}

func (s *Store) expireSession(ctx context.Context, ss *session) ([]belay.Delivery, time.Time, error) {
	if ss.fault() != nil {
		return nil, time.Time{}, nil
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	now := s.clock.Now()
	var expired []belay.Delivery
	var next time.Time
	for _, d := range ss.st.Deliveries {
		if d.Status != belay.DeliveryLeased {
			continue
		}
		if !d.Lease.Expired(now) {
			if next.IsZero() || d.Lease.ExpiresAt.Before(next) {
				next = d.Lease.ExpiresAt
			}
			continue
		}
		data, err := marshal(belay.DeliveryExpiredData{ID: d.ID})
		if err != nil {
			return expired, next, err
		}
		if _, err := ss.commit(ctx, belay.Event{Type: belay.EventDeliveryExpired, Epoch: d.Epoch, Data: data}); err != nil {
			return expired, next, err
		}
		expired = append(expired, copyDelivery(d))
	}
	return expired, next, nil
}

// notLeasedYet is the error of a settle of an item no lease ever took.
func notLeasedYet(id string) error {
	return fmt.Errorf("%w: delivery %s was never leased: lease it, then settle it with the epoch the lease returns", belay.ErrNotLeased, id)
}
