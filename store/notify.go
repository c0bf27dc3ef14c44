package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/belayhq/belay"
)

// ErrNotificationNotDue is a claim of a notification whose retry time has
// not come yet: the backoff holds for every instance, not just the one that
// failed.
var ErrNotificationNotDue = errors.New("store: notification not due yet")

// NotificationStore decides which instance sends each notification of a
// delivery to a target, so that exactly one sends it at a time and a
// settled one is never sent again, whichever instance and whatever restart.
//
// A notification is claimed by an owner for a TTL judged by the store's
// clock (for a database, its now()), then settled naming the claim's
// epoch: sent, retry after a delay, or abandoned. A claim whose TTL passed
// unsettled means its owner died: another owner may claim it again (so a
// send is at least once; receivers dedupe by the webhook-id header).
type NotificationStore interface {
	// ClaimNotification claims the notification of delivery to target for
	// owner until ttl passes, and increments its epoch and attempts. It is
	// refused with belay.ErrLeaseHeld while an unexpired claim exists, with
	// belay.ErrTerminal once the notification is settled for good, and with
	// ErrNotificationNotDue before the retry time of a failed attempt.
	ClaimNotification(ctx context.Context, delivery, target, owner string, ttl time.Duration) (NotificationClaim, error)
	// SettleNotification records the outcome of a claimed attempt. A claim
	// whose epoch is not the notification's current one is refused with a
	// *belay.StaleEpochError; an expired claim nobody claimed again is
	// still the current one and may settle.
	SettleNotification(ctx context.Context, c NotificationClaim, o NotificationOutcome) (Notification, error)
	// DueNotifications returns up to limit notifications for target that
	// may be claimed now (never claimed, a retry whose time came, or a
	// claim that expired), oldest delivery first, and the earliest moment
	// another one becomes due (zero if none is waiting), without reading
	// every delivery of every session.
	DueNotifications(ctx context.Context, target NotificationTarget, limit int) (due []Notification, next time.Time, err error)
	// Notification returns the notification of delivery to target; one
	// never claimed is pending with no attempts. An unknown delivery is
	// belay.ErrNotFound.
	Notification(ctx context.Context, delivery, target string) (Notification, error)
}

// NotificationTarget is where notifications go: a stable name and which
// deliveries it wants.
type NotificationTarget struct {
	// Name identifies the target in the store; it is journaled, so it
	// must not hold secrets.
	Name string `json:"name"`
	// Sessions and Types select deliveries (empty: all).
	Sessions []string `json:"sessions,omitempty"`
	Types    []string `json:"types,omitempty"`
}

// Wants reports whether the target is notified of d.
func (t NotificationTarget) Wants(d *belay.Delivery) bool {
	return (len(t.Sessions) == 0 || slices.Contains(t.Sessions, d.Session)) &&
		(len(t.Types) == 0 || slices.Contains(t.Types, d.Type))
}

// NotificationState is where a notification is.
type NotificationState string

// Notification states.
const (
	// NotifyPending is never claimed, or to be retried after NotBefore.
	NotifyPending NotificationState = "pending"
	// NotifyClaimed is being sent by the claim's owner.
	NotifyClaimed NotificationState = "claimed"
	// NotifySent and NotifyAbandoned are settled for good.
	NotifySent      NotificationState = "sent"
	NotifyAbandoned NotificationState = "abandoned"
)

// Settled reports whether the state is final.
func (s NotificationState) Settled() bool { return s == NotifySent || s == NotifyAbandoned }

// Notification is the notification of one delivery to one target.
type Notification struct {
	Delivery string            `json:"delivery"`
	Session  string            `json:"session"`
	Target   string            `json:"target"`
	State    NotificationState `json:"state"`
	// Attempts counts the claims made so far.
	Attempts int    `json:"attempts"`
	Epoch    uint64 `json:"epoch"`
	// Claim is the current claim while State is claimed.
	Claim *belay.Lease `json:"claim,omitempty"`
	// NotBefore is when a pending retry may be claimed.
	NotBefore time.Time `json:"notBefore,omitzero"`
	// Error is why the last attempt failed.
	Error     string    `json:"error,omitempty"`
	SettledAt time.Time `json:"settledAt,omitzero"`
}

// NotificationClaim is a granted claim: settle it naming its epoch.
type NotificationClaim struct {
	Delivery  string    `json:"delivery"`
	Session   string    `json:"session"`
	Target    string    `json:"target"`
	Owner     string    `json:"owner"`
	Epoch     uint64    `json:"epoch"`
	Attempt   int       `json:"attempt"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// NotifyOutcomeKind is how an attempt ended.
type NotifyOutcomeKind string

// Outcome kinds.
const (
	NotifyOutcomeSent      NotifyOutcomeKind = "sent"
	NotifyOutcomeRetry     NotifyOutcomeKind = "retry"
	NotifyOutcomeAbandoned NotifyOutcomeKind = "abandoned"
)

// NotificationOutcome settles a claimed attempt.
type NotificationOutcome struct {
	Kind NotifyOutcomeKind
	// RetryAfter is, for a retry, how long after now (the store's clock)
	// the notification may be claimed again.
	RetryAfter time.Duration
	// Error is why the attempt failed (retry, abandoned).
	Error string
}

// Check validates an outcome.
func (o NotificationOutcome) Check() error {
	switch o.Kind {
	case NotifyOutcomeSent, NotifyOutcomeRetry, NotifyOutcomeAbandoned:
	default:
		return fmt.Errorf("%w: a notification outcome is sent, retry or abandoned", belay.ErrInvalid)
	}
	if o.RetryAfter < 0 {
		return fmt.Errorf("%w: a negative retry delay", belay.ErrInvalid)
	}
	return nil
}

// State returns the notification state the outcome leads to.
func (o NotificationOutcome) State() NotificationState {
	switch o.Kind {
	case NotifyOutcomeSent:
		return NotifySent
	case NotifyOutcomeAbandoned:
		return NotifyAbandoned
	}
	return NotifyPending
}

// CheckClaim validates the arguments of a claim.
func CheckClaim(delivery, target, owner string, ttl time.Duration) error {
	if delivery == "" || target == "" || owner == "" || ttl <= 0 {
		return fmt.Errorf("%w: a notification claim needs a delivery, a target, an owner and a positive ttl", belay.ErrInvalid)
	}
	if len(target) > MaxNotifyTarget {
		return fmt.Errorf("%w: a notification target name is at most 256 bytes", belay.ErrInvalid)
	}
	return nil
}

// MaxNotifyTarget caps a target's name.
const MaxNotifyTarget = 256

// NotifyClaimedData and NotifySettledData are the payloads of the
// notification events (docs/journal-format.md); the event's epoch is the
// claim's.
type (
	NotifyClaimedData struct {
		Delivery  string    `json:"delivery"`
		Target    string    `json:"target"`
		Owner     string    `json:"owner,omitempty"`
		ExpiresAt time.Time `json:"expiresAt,omitzero"`
		Attempt   int       `json:"attempt,omitempty"`
	}
	NotifySettledData struct {
		Delivery  string            `json:"delivery"`
		Target    string            `json:"target"`
		Outcome   NotifyOutcomeKind `json:"outcome,omitempty"`
		NotBefore time.Time         `json:"notBefore,omitzero"`
		Error     string            `json:"error,omitempty"`
		Attempt   int               `json:"attempt,omitempty"`
		// OK is set by journals written before notifications were store
		// state (epoch 0): they journaled only final settlements.
		OK bool `json:"ok,omitempty"`
	}
)
