package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/ids"
)

// maxDeliveryType caps a delivery's type, as in fsstore.
const maxDeliveryType = 64

const deliveryCols = `id, session, type, coalesce(key, ''), priority, data::text, status, seq, epoch,
	lease_owner, lease_granted_at, lease_expires_at, attempts, not_before, result, created_at, settled_at,
	coalesce(addressee, ''), coalesce(after_run, '')`

// deliverable is the SQL condition for an item a consumer may lease at
// $now: pending and due, or leased with an expired lease, and not held
// for a run that has not ended. Whom it is addressed to is the caller's
// condition.
const deliverable = `((status = 'pending' AND (not_before IS NULL OR not_before <= $now)) OR (status = 'leased' AND lease_expires_at <= $now))
	AND (after_run IS NULL OR EXISTS (SELECT 1 FROM belay_runs ar WHERE ar.id = belay_deliveries.after_run
		AND ar.status IN ('complete', 'failed', 'cancelled', 'stranded')))`

// addressedTo is the SQL condition for the items a lease for addressee to
// takes: those addressed to it, or for "" those addressed to no one. The
// parameter that carries to is named either way, so the statement's
// arguments do not depend on it.
func addressedTo(to, param string) string {
	if to == "" {
		return `addressee IS NULL AND ` + param + `::text = ''`
	}
	return `addressee = ` + param
}

func scanDelivery(row pgx.Row) (belay.Delivery, error) {
	var d belay.Delivery
	var data *string
	var seq, epoch int64
	var owner *string
	var granted, expires, notBefore, settled *time.Time
	err := row.Scan(&d.ID, &d.Session, &d.Type, &d.Key, &d.Priority, &data, &d.Status, &seq, &epoch,
		&owner, &granted, &expires, &d.Attempts, &notBefore, &d.Result, &d.CreatedAt, &settled, &d.To, &d.AfterRun)
	if err != nil {
		return d, err
	}
	if data != nil {
		d.Data = json.RawMessage(*data)
	}
	d.Seq, d.Epoch = uint64(seq), uint64(epoch)
	if owner != nil {
		d.Lease = &belay.Lease{Owner: *owner, Epoch: d.Epoch, GrantedAt: utc(granted), ExpiresAt: utc(expires)}
	}
	d.NotBefore, d.SettledAt, d.CreatedAt = utc(notBefore), utc(settled), d.CreatedAt.UTC()
	return d, nil
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

// PostDelivery adds an inbox item, once per (Key, Type).
func (s *Store) PostDelivery(ctx context.Context, in belay.DeliveryInput) (belay.Delivery, bool, error) {
	if err := checkDeliveryInput(in); err != nil {
		return belay.Delivery{}, false, err
	}
	if err := checkSession(in.Session); err != nil {
		return belay.Delivery{}, false, err
	}
	var id string
	var created bool
	err := s.withSession(ctx, in.Session, belay.Sync, func(t *tx) error {
		var err error
		id, created, err = s.postDelivery(t, in)
		return err
	})
	if err != nil {
		return belay.Delivery{}, false, err
	}
	d, err := s.Delivery(ctx, id)
	return d, created, err
}

// queueDeliveryKey queues, after the session's lock, the read of the item
// (Type, Key) posted in t's session, for postDelivery.
func queueDeliveryKey(b *pgx.Batch, t *tx, typ, key string) {
	b.Queue(`SELECT coalesce((SELECT id FROM belay_deliveries WHERE session = $1 AND type = $2 AND key = $3), '')`, t.session, typ, key).QueryRow(func(row pgx.Row) error {
		var id string
		if err := row.Scan(&id); err != nil {
			return err
		}
		if t.deliveryKeys == nil {
			t.deliveryKeys = map[[2]string]string{}
		}
		t.deliveryKeys[[2]string{typ, key}] = id
		return nil
	})
}

// postDelivery journals delivery.posted and inserts the item, or returns
// the item its (Key, Type) already posted.
func (s *Store) postDelivery(t *tx, in belay.DeliveryInput) (string, bool, error) {
	if id, ok := t.deliveryKeys[[2]string{in.Type, in.Key}]; ok && in.Key != "" {
		if id != "" {
			return id, false, nil
		}
	} else if in.Key != "" {
		var id string
		err := t.QueryRow(t.ctx, `SELECT id FROM belay_deliveries WHERE session = $1 AND type = $2 AND key = $3`, t.session, in.Type, in.Key).Scan(&id)
		if err == nil {
			return id, false, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return "", false, err
		}
	}
	if in.AfterRun != "" {
		var ok bool
		if err := t.QueryRow(t.ctx, `SELECT EXISTS (SELECT 1 FROM belay_runs WHERE id = $1 AND session = $2)`, in.AfterRun, t.session).Scan(&ok); err != nil {
			return "", false, err
		}
		if !ok {
			return "", false, fmt.Errorf("%w: run %s is not in session %s", belay.ErrNotFound, in.AfterRun, t.session)
		}
	}
	p := belay.DeliveryPostedData{ID: ids.New(ids.Delivery), Type: in.Type, Key: in.Key, Priority: in.Priority, Data: in.Data, To: in.To, AfterRun: in.AfterRun}
	data, err := marshal(p)
	if err != nil {
		return "", false, err
	}
	seq, err := t.emit(belay.Event{Type: belay.EventDeliveryPosted, Data: data})
	if err != nil {
		return "", false, err
	}
	t.queue(insertDelivery, []string{p.ID}, []string{t.session}, []string{in.Type}, []*string{nullable(in.Key)}, []int64{int64(in.Priority)},
		[]*string{nullable(string(in.Data))}, []int64{int64(seq)}, []time.Time{t.now}, []*string{nullable(in.To)}, []*string{nullable(in.AfterRun)})
	s.remember(s.deliverySessions, p.ID, t.session)
	if t.deliveryKeys != nil && in.Key != "" {
		t.deliveryKeys[[2]string{in.Type, in.Key}] = p.ID // posted now
	}
	return p.ID, true, nil
}

// insertDelivery posts pending items: their ids, sessions, types, keys,
// priorities, data (JSON), seqs, creation times, addressees and the runs
// they wait for.
var insertDelivery = merged(`INSERT INTO belay_deliveries (id, session, type, key, priority, data, status, seq, created_at, addressee, after_run)
	SELECT k.id, k.session, k.type, k.key, k.priority, k.data::json, 'pending', k.seq, k.at, k.addressee, k.after_run
	FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::text[], $7::bigint[], $8::timestamptz[], $9::text[], $10::text[])
		AS k(id, session, type, key, priority, data, seq, at, addressee, after_run)`)

// Delivery returns one delivery.
func (s *Store) Delivery(ctx context.Context, id string) (belay.Delivery, error) {
	if err := ids.Check(ids.Delivery, id); err != nil {
		return belay.Delivery{}, fmt.Errorf("%w: %v", belay.ErrInvalid, err)
	}
	if s.isClosed() {
		return belay.Delivery{}, belay.ErrStoreClosed
	}
	d, err := scanDelivery(s.pool.QueryRow(ctx, `SELECT `+deliveryCols+` FROM belay_deliveries WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return belay.Delivery{}, fmt.Errorf("%w: delivery %s", belay.ErrNotFound, id)
	}
	return d, s.wrap(err)
}

// Deliveries lists deliveries in delivery order: priority, then seq
// within a session (then creation across sessions).
func (s *Store) Deliveries(ctx context.Context, f belay.DeliveryFilter) ([]belay.Delivery, error) {
	if s.isClosed() {
		return nil, belay.ErrStoreClosed
	}
	if f.Session != "" {
		if _, err := s.Session(ctx, f.Session); err != nil {
			return nil, err
		}
	}
	rows, err := s.pool.Query(ctx, `SELECT `+deliveryCols+` FROM belay_deliveries WHERE ($1 = '' OR session = $1) AND ($2 = '' OR status = $2)
		ORDER BY priority DESC, created_at, session, seq`, f.Session, string(f.Status))
	if err != nil {
		return nil, s.wrap(err)
	}
	return collectDeliveries(rows, s)
}

func collectDeliveries(rows pgx.Rows, s *Store) ([]belay.Delivery, error) {
	defer rows.Close()
	var out []belay.Delivery
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			return nil, s.wrap(err)
		}
		out = append(out, d)
	}
	return out, s.wrap(rows.Err())
}

// LeaseDeliveries leases up to max deliverable items of a session (or of
// every session) that are addressed to no one, in order of priority
// class, then seq.
func (s *Store) LeaseDeliveries(ctx context.Context, session, owner string, ttl time.Duration, max int) ([]belay.Delivery, error) {
	return s.leaseFor(ctx, session, "", owner, ttl, max)
}

// LeaseDeliveriesTo leases up to max deliverable items, in any session,
// addressed to to (store.AddressedLeaser).
func (s *Store) LeaseDeliveriesTo(ctx context.Context, to, owner string, ttl time.Duration, max int) ([]belay.Delivery, error) {
	if to == "" {
		return nil, fmt.Errorf("%w: an addressed lease needs an addressee", belay.ErrInvalid)
	}
	return s.leaseFor(ctx, "", to, owner, ttl, max)
}

// leaseFor leases up to max deliverable items for addressee to ("": items
// addressed to no one) of one session, or of every session ("").
func (s *Store) leaseFor(ctx context.Context, session, to, owner string, ttl time.Duration, max int) ([]belay.Delivery, error) {
	if owner == "" || ttl <= 0 || max <= 0 {
		return nil, fmt.Errorf("%w: a lease needs an owner, a positive ttl and max", belay.ErrInvalid)
	}
	if session != "" {
		if err := checkSession(session); err != nil {
			return nil, err
		}
		return s.leaseIn(ctx, session, to, owner, ttl, max)
	}
	// Across sessions: the sessions with deliverable items, in the order
	// of their best item; each is leased under its own session lock.
	rows, err := s.pool.Query(ctx, `SELECT session FROM belay_deliveries
		WHERE `+addressedTo(to, "$2")+` AND `+sqlNow(deliverable, "$1")+` GROUP BY session ORDER BY max(priority) DESC, min(created_at)`, s.nowArg(), to)
	if err != nil {
		return nil, s.wrap(err)
	}
	sessions, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, s.wrap(err)
	}
	var out []belay.Delivery
	for _, sid := range sessions {
		if len(out) == max {
			break
		}
		got, err := s.leaseIn(ctx, sid, to, owner, ttl, max-len(out))
		if err != nil && !errors.Is(err, belay.ErrNotFound) {
			if len(out) > 0 {
				return out, nil
			}
			return nil, err
		}
		out = append(out, got...)
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Priority != b.Priority {
			return a.Priority > b.Priority
		}
		if a.Session == b.Session {
			return a.Seq < b.Seq
		}
		return a.CreatedAt.Before(b.CreatedAt)
	})
	return out, nil
}

// sqlNow replaces $now in a condition with the given parameter, falling
// back to the database clock.
func sqlNow(cond, param string) string {
	return strings.ReplaceAll(cond, "$now", "coalesce("+param+"::timestamptz, now())")
}

// leaseIn leases up to max items of one session for addressee to under
// the session's lock. The lock also keeps the runs of held items as they
// are: a run ends only under it.
func (s *Store) leaseIn(ctx context.Context, session, to, owner string, ttl time.Duration, max int) ([]belay.Delivery, error) {
	var out []belay.Delivery
	err := s.withSession(ctx, session, belay.Sync, func(t *tx) error {
		expires := t.now.Add(ttl)
		rows, err := t.Query(ctx, `UPDATE belay_deliveries SET status = 'leased', epoch = epoch + 1, lease_owner = $3,
			lease_granted_at = $2, lease_expires_at = $4, attempts = attempts + 1, not_before = NULL
			WHERE id IN (SELECT id FROM belay_deliveries WHERE session = $1 AND `+addressedTo(to, "$6")+`
				AND `+strings.ReplaceAll(deliverable, "$now", "$2::timestamptz")+`
				ORDER BY priority DESC, seq LIMIT $5 FOR UPDATE SKIP LOCKED)
			RETURNING `+deliveryCols, session, t.now, owner, expires, max, to)
		if err != nil {
			return err
		}
		out, err = collectDeliveries(rows, s)
		if err != nil {
			return err
		}
		sort.Slice(out, func(i, j int) bool {
			if out[i].Priority != out[j].Priority {
				return out[i].Priority > out[j].Priority
			}
			return out[i].Seq < out[j].Seq
		})
		for _, d := range out {
			data, err := marshal(belay.DeliveryLeasedData{ID: d.ID, Owner: owner, ExpiresAt: expires})
			if err != nil {
				return err
			}
			if _, err := t.emit(belay.Event{Type: belay.EventDeliveryLeased, Epoch: d.Epoch, Data: data}); err != nil {
				return err
			}
		}
		return nil
	})
	return out, err
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
	if err := ids.Check(ids.Delivery, id); err != nil {
		return belay.Delivery{}, fmt.Errorf("%w: %v", belay.ErrInvalid, err)
	}
	session, ok := s.recall(s.deliverySessions, id)
	if !ok {
		err := s.pool.QueryRow(ctx, `SELECT session FROM belay_deliveries WHERE id = $1`, id).Scan(&session)
		if errors.Is(err, pgx.ErrNoRows) {
			return belay.Delivery{}, fmt.Errorf("%w: delivery %s", belay.ErrNotFound, id)
		}
		if err != nil {
			return belay.Delivery{}, s.wrap(err)
		}
		s.remember(s.deliverySessions, id, session)
	}
	var out belay.Delivery
	err := s.withSession(ctx, session, belay.Sync, func(t *tx) error {
		d, err := scanDelivery(t.QueryRow(ctx, `SELECT `+deliveryCols+` FROM belay_deliveries WHERE id = $1`, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: delivery %s", belay.ErrNotFound, id)
		}
		if err != nil {
			return err
		}
		switch {
		case d.Status.Settled():
			return fmt.Errorf("%w: delivery %s is settled (%s)", belay.ErrTerminal, id, d.Status)
		case st.Epoch != d.Epoch:
			return &belay.StaleEpochError{Kind: "delivery", ID: id, Got: st.Epoch, Current: d.Epoch}
		case d.Status != belay.DeliveryLeased && d.Epoch == 0:
			return fmt.Errorf("%w: delivery %s was never leased: lease it, then settle it with the epoch the lease returns", belay.ErrNotLeased, id)
		case d.Status != belay.DeliveryLeased:
			var expired uint64
			if err := t.QueryRow(ctx, `SELECT expired_epoch FROM belay_deliveries WHERE id = $1`, id).Scan(&expired); err != nil {
				return err
			}
			if expired == st.Epoch {
				return fmt.Errorf("%w (%w): delivery %s: the lease at epoch %d expired and the item was returned to the inbox for redelivery",
					belay.ErrLeaseExpired, belay.ErrStaleEpoch, id, st.Epoch)
			}
			return fmt.Errorf("%w: delivery %s at epoch %d was returned to the inbox", belay.ErrNotLeased, id, st.Epoch)
		case d.Lease.Expired(t.now):
			return fmt.Errorf("%w (%w): delivery %s: the lease at epoch %d expired at %s and the item will be redelivered",
				belay.ErrLeaseExpired, belay.ErrStaleEpoch, id, st.Epoch, d.Lease.ExpiresAt.Format(time.RFC3339))
		}
		p := belay.DeliverySettledData{ID: id, Kind: st.Kind, Result: st.Result}
		status := belay.DeliveryPending
		var settled, notBefore any
		switch st.Kind {
		case belay.SettleDone:
			status, settled = belay.DeliveryDone, t.now
		case belay.SettleError:
			status, settled = belay.DeliveryError, t.now
		case belay.SettleRetry:
			p.NotBefore = t.now.Add(st.Delay)
			notBefore = p.NotBefore
		}
		data, err := marshal(p)
		if err != nil {
			return err
		}
		if _, err := t.emit(belay.Event{Type: belay.EventDeliverySettled, Epoch: st.Epoch, Data: data}); err != nil {
			return err
		}
		t.queue(`UPDATE belay_deliveries SET status = $2, result = $3, settled_at = $4, not_before = $5,
			lease_owner = NULL, lease_granted_at = NULL, lease_expires_at = NULL WHERE id = $1 RETURNING `+deliveryCols,
			id, string(status), st.Result, settled, notBefore).QueryRow(func(row pgx.Row) (err error) {
			out, err = scanDelivery(row)
			return err
		})
		return nil
	})
	return out, err
}

// recheckEvery is how soon ExpireDeliveryLeases asks to be called again
// after it failed.
const recheckEvery = 5 * time.Second

// ExpireDeliveryLeases returns every expired leased item to pending and
// reports the earliest lease expiry still ahead. When the database cannot
// be read, that moment is unknown: it reports a moment recheckEvery ahead,
// so that the caller's timer checks again then rather than never (a timer
// that fires early only checks again).
func (s *Store) ExpireDeliveryLeases(ctx context.Context) ([]belay.Delivery, time.Time, error) {
	if s.isClosed() {
		return nil, time.Time{}, belay.ErrStoreClosed
	}
	expired, next, err := s.expireDeliveryLeases(ctx)
	if err != nil {
		now := time.Now()
		if s.clock != nil {
			now = s.clock.Now()
		}
		if retry := now.Add(recheckEvery); next.IsZero() || next.After(retry) {
			next = retry.UTC()
		}
	}
	return expired, next, err
}

func (s *Store) expireDeliveryLeases(ctx context.Context) ([]belay.Delivery, time.Time, error) {
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT session FROM belay_deliveries
		WHERE status = 'leased' AND lease_expires_at <= coalesce($1::timestamptz, now())`, s.nowArg())
	if err != nil {
		return nil, time.Time{}, s.wrap(err)
	}
	sessions, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, time.Time{}, s.wrap(err)
	}
	var expired []belay.Delivery
	var errs []error
	for _, sid := range sessions {
		err := s.withSession(ctx, sid, belay.Sync, func(t *tx) error {
			rows, err := t.Query(ctx, `UPDATE belay_deliveries SET status = 'pending', expired_epoch = epoch, lease_owner = NULL, lease_granted_at = NULL, lease_expires_at = NULL
				WHERE session = $1 AND status = 'leased' AND lease_expires_at <= $2 RETURNING `+deliveryCols, sid, t.now)
			if err != nil {
				return err
			}
			got, err := collectDeliveries(rows, s)
			if err != nil {
				return err
			}
			sort.Slice(got, func(i, j int) bool { return got[i].Seq < got[j].Seq })
			for _, d := range got {
				data, err := marshal(belay.DeliveryExpiredData{ID: d.ID})
				if err != nil {
					return err
				}
				if _, err := t.emit(belay.Event{Type: belay.EventDeliveryExpired, Epoch: d.Epoch, Data: data}); err != nil {
					return err
				}
			}
			expired = append(expired, got...)
			return nil
		})
		if err != nil && !errors.Is(err, belay.ErrNotFound) {
			errs = append(errs, err)
		}
	}
	var next *time.Time
	err = s.pool.QueryRow(ctx, `SELECT min(lease_expires_at) FROM belay_deliveries
		WHERE status = 'leased' AND lease_expires_at > coalesce($1::timestamptz, now())`, s.nowArg()).Scan(&next)
	if err != nil {
		errs = append(errs, s.wrap(err))
	}
	return expired, utc(next), errors.Join(errs...)
}
