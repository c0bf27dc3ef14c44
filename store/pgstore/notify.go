package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/ids"
	"github.com/belayhq/belay/store"
)

var _ store.NotificationStore = (*Store)(nil)

// notificationCols are the columns notifyRow scans, of the
// belay_notifications row aliased n (NULL when there is none).
const notificationCols = `n.state, n.attempts, n.epoch, n.claim_owner, n.claim_granted_at, n.claim_expires_at, n.not_before, n.error, n.settled_at`

// notifyRow is a scanned notification row, all NULL if none exists.
type notifyRow struct {
	state                             *string
	attempts                          *int
	epoch                             *int64
	owner, errText                    *string
	granted, expires, notBefore, done *time.Time
}

func (r *notifyRow) dest() []any {
	return []any{&r.state, &r.attempts, &r.epoch, &r.owner, &r.granted, &r.expires, &r.notBefore, &r.errText, &r.done}
}

// into sets n's state fields; n names its delivery, session and target.
func (r *notifyRow) into(n *store.Notification) {
	n.State = store.NotifyPending
	if r.state == nil {
		return // never claimed
	}
	n.State, n.Attempts, n.Epoch = store.NotificationState(*r.state), *r.attempts, uint64(*r.epoch)
	if r.owner != nil {
		n.Claim = &belay.Lease{Owner: *r.owner, Epoch: n.Epoch, GrantedAt: utc(r.granted), ExpiresAt: utc(r.expires)}
	}
	n.NotBefore, n.SettledAt = utc(r.notBefore), utc(r.done)
	if r.errText != nil {
		n.Error = *r.errText
	}
}

// notificationSession returns the session of a delivery.
func (s *Store) notificationSession(ctx context.Context, delivery string) (string, error) {
	if err := ids.Check(ids.Delivery, delivery); err != nil {
		return "", fmt.Errorf("%w: %v", belay.ErrInvalid, err)
	}
	if s.isClosed() {
		return "", belay.ErrStoreClosed
	}
	if session, ok := s.recall(s.deliverySessions, delivery); ok {
		return session, nil
	}
	var session string
	err := s.pool.QueryRow(ctx, `SELECT session FROM belay_deliveries WHERE id = $1`, delivery).Scan(&session)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("%w: delivery %s", belay.ErrNotFound, delivery)
	}
	if err != nil {
		return "", s.wrap(err)
	}
	s.remember(s.deliverySessions, delivery, session)
	return session, nil
}

// readNotification reads the notification of delivery to target in q.
func readNotification(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, delivery, target string) (store.Notification, error) {
	n := store.Notification{Delivery: delivery, Target: target}
	var r notifyRow
	err := q.QueryRow(ctx, `SELECT d.session, `+notificationCols+` FROM belay_deliveries d
		LEFT JOIN belay_notifications n ON n.delivery = d.id AND n.target = $2 WHERE d.id = $1`,
		delivery, target).Scan(append([]any{&n.Session}, r.dest()...)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return n, fmt.Errorf("%w: delivery %s", belay.ErrNotFound, delivery)
	}
	r.into(&n)
	return n, err
}

// Notification returns the notification of a delivery to a target.
func (s *Store) Notification(ctx context.Context, delivery, target string) (store.Notification, error) {
	if err := ids.Check(ids.Delivery, delivery); err != nil {
		return store.Notification{}, fmt.Errorf("%w: %v", belay.ErrInvalid, err)
	}
	if s.isClosed() {
		return store.Notification{}, belay.ErrStoreClosed
	}
	n, err := readNotification(ctx, s.pool, delivery, target)
	if err != nil && !errors.Is(err, belay.ErrNotFound) {
		err = s.wrap(err)
	}
	return n, err
}

// ClaimNotification claims a notification for owner under the delivery's
// session lock; the claim's expiry is the database's now() plus ttl.
func (s *Store) ClaimNotification(ctx context.Context, delivery, target, owner string, ttl time.Duration) (store.NotificationClaim, error) {
	if err := store.CheckClaim(delivery, target, owner, ttl); err != nil {
		return store.NotificationClaim{}, err
	}
	session, err := s.notificationSession(ctx, delivery)
	if err != nil {
		return store.NotificationClaim{}, err
	}
	var c store.NotificationClaim
	err = s.withSession(ctx, session, belay.Sync, func(t *tx) error {
		n, err := readNotification(ctx, t, delivery, target)
		if err != nil {
			return err
		}
		switch {
		case n.State.Settled():
			return fmt.Errorf("%w: the notification of %s to %s is %s", belay.ErrTerminal, delivery, target, n.State)
		case n.State == store.NotifyClaimed && !n.Claim.Expired(t.now):
			return fmt.Errorf("%w: the notification of %s to %s is claimed by %s until %s",
				belay.ErrLeaseHeld, delivery, target, n.Claim.Owner, n.Claim.ExpiresAt.Format(time.RFC3339))
		case n.State == store.NotifyPending && t.now.Before(n.NotBefore):
			return fmt.Errorf("%w: the notification of %s to %s is retried from %s",
				store.ErrNotificationNotDue, delivery, target, n.NotBefore.Format(time.RFC3339))
		}
		c = store.NotificationClaim{Delivery: delivery, Session: session, Target: target, Owner: owner,
			Epoch: n.Epoch + 1, Attempt: n.Attempts + 1, ExpiresAt: t.now.Add(ttl)}
		data, err := marshal(store.NotifyClaimedData{Delivery: delivery, Target: target, Owner: owner, ExpiresAt: c.ExpiresAt, Attempt: c.Attempt})
		if err != nil {
			return err
		}
		if _, err := t.emit(belay.Event{Type: belay.EventNotifyClaimed, Epoch: c.Epoch, Data: data}); err != nil {
			return err
		}
		t.queue(`INSERT INTO belay_notifications (delivery, target, session, state, attempts, epoch, claim_owner, claim_granted_at, claim_expires_at)
			VALUES ($1, $2, $3, 'claimed', $4, $5, $6, $7, $8)
			ON CONFLICT (delivery, target) DO UPDATE SET state = 'claimed', attempts = $4, epoch = $5,
				claim_owner = $6, claim_granted_at = $7, claim_expires_at = $8, not_before = NULL`,
			delivery, target, session, c.Attempt, int64(c.Epoch), owner, t.now, c.ExpiresAt)
		return nil
	})
	return c, err
}

// SettleNotification records a claimed attempt's outcome under the
// delivery's session lock.
func (s *Store) SettleNotification(ctx context.Context, c store.NotificationClaim, o store.NotificationOutcome) (store.Notification, error) {
	if err := o.Check(); err != nil {
		return store.Notification{}, err
	}
	session, err := s.notificationSession(ctx, c.Delivery)
	if err != nil {
		return store.Notification{}, err
	}
	var out store.Notification
	err = s.withSession(ctx, session, belay.Sync, func(t *tx) error {
		n, err := readNotification(ctx, t, c.Delivery, c.Target)
		if err != nil {
			return err
		}
		switch {
		case n.State.Settled():
			return fmt.Errorf("%w: the notification of %s to %s is %s", belay.ErrTerminal, c.Delivery, c.Target, n.State)
		case c.Epoch != n.Epoch:
			return &belay.StaleEpochError{Kind: "notification", ID: c.Delivery + "/" + c.Target, Got: c.Epoch, Current: n.Epoch}
		case n.State != store.NotifyClaimed:
			return fmt.Errorf("%w: the notification of %s to %s at epoch %d is not claimed", belay.ErrNotLeased, c.Delivery, c.Target, c.Epoch)
		}
		p := store.NotifySettledData{Delivery: c.Delivery, Target: c.Target, Outcome: o.Kind, Error: o.Error, Attempt: n.Attempts}
		out = n
		out.State, out.Claim, out.Error, out.NotBefore = o.State(), nil, o.Error, time.Time{}
		var settled, notBefore any
		if o.Kind == store.NotifyOutcomeRetry {
			p.NotBefore = t.now.Add(o.RetryAfter)
			out.NotBefore, notBefore = p.NotBefore, p.NotBefore
		}
		if out.State.Settled() {
			out.SettledAt, settled = t.now, t.now
		}
		data, err := marshal(p)
		if err != nil {
			return err
		}
		if _, err := t.emit(belay.Event{Type: belay.EventNotifySettled, Epoch: c.Epoch, Data: data}); err != nil {
			return err
		}
		t.queue(`UPDATE belay_notifications SET state = $3, error = $4, not_before = $5, settled_at = $6,
			claim_owner = NULL, claim_granted_at = NULL, claim_expires_at = NULL WHERE delivery = $1 AND target = $2`,
			c.Delivery, c.Target, string(out.State), o.Error, notBefore, settled)
		return nil
	})
	return out, err
}

// DueNotifications lists the notifications for target that may be claimed
// now, by the database's clock: deliveries the target wants with no
// notification row yet, retries whose time came and expired claims.
func (s *Store) DueNotifications(ctx context.Context, target store.NotificationTarget, limit int) ([]store.Notification, time.Time, error) {
	if target.Name == "" || limit <= 0 {
		return nil, time.Time{}, fmt.Errorf("%w: a notification listing needs a target name and a positive limit", belay.ErrInvalid)
	}
	if s.isClosed() {
		return nil, time.Time{}, belay.ErrStoreClosed
	}
	var sessions, types []string
	if len(target.Sessions) > 0 {
		sessions = target.Sessions
	}
	if len(target.Types) > 0 {
		types = target.Types
	}
	now := `coalesce($5::timestamptz, now())`
	rows, err := s.pool.Query(ctx, `SELECT d.id, d.session, `+notificationCols+`
		FROM belay_deliveries d LEFT JOIN belay_notifications n ON n.delivery = d.id AND n.target = $1
		WHERE ($2::text[] IS NULL OR d.session = ANY($2)) AND ($3::text[] IS NULL OR d.type = ANY($3))
			AND (n.delivery IS NULL
				OR n.state = 'pending' AND (n.not_before IS NULL OR n.not_before <= `+now+`)
				OR n.state = 'claimed' AND n.claim_expires_at <= `+now+`)
		ORDER BY d.created_at, d.session, d.seq LIMIT $4`, target.Name, sessions, types, limit+1, s.nowArg())
	if err != nil {
		return nil, time.Time{}, s.wrap(err)
	}
	var due []store.Notification
	for rows.Next() {
		n := store.Notification{Target: target.Name}
		var r notifyRow
		if err := rows.Scan(append([]any{&n.Delivery, &n.Session}, r.dest()...)...); err != nil {
			rows.Close()
			return nil, time.Time{}, s.wrap(err)
		}
		r.into(&n)
		due = append(due, n)
	}
	if err := rows.Err(); err != nil {
		return nil, time.Time{}, s.wrap(err)
	}
	var next *time.Time
	if len(due) > limit {
		due = due[:limit]
		err = s.pool.QueryRow(ctx, `SELECT coalesce($1::timestamptz, now())`, s.nowArg()).Scan(&next)
	} else {
		err = s.pool.QueryRow(ctx, `SELECT min(coalesce(claim_expires_at, not_before)) FROM belay_notifications
			WHERE target = $1 AND state IN ('pending', 'claimed') AND coalesce(claim_expires_at, not_before) > coalesce($2::timestamptz, now())`,
			target.Name, s.nowArg()).Scan(&next)
	}
	if err != nil {
		return nil, time.Time{}, s.wrap(err)
	}
	return due, utc(next), nil
}
