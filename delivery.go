package belay

import (
	"encoding/json"
	"time"
)

// DeliveryStatus is the state of an inbox item.
type DeliveryStatus string

// Delivery statuses: pending -> leased -> done|error; leased -> pending on
// release, retry or expiry.
const (
	DeliveryPending DeliveryStatus = "pending"
	DeliveryLeased  DeliveryStatus = "leased"
	DeliveryDone    DeliveryStatus = "done"
	DeliveryError   DeliveryStatus = "error"
)

// Settled reports whether the delivery is finished.
func (s DeliveryStatus) Settled() bool { return s == DeliveryDone || s == DeliveryError }

// Valid reports whether s is a known status.
func (s DeliveryStatus) Valid() bool {
	return s == DeliveryPending || s == DeliveryLeased || s.Settled()
}

// Delivery is an inbox item a consumer must handle and settle.
type Delivery struct {
	ID      string `json:"id"`
	Session string `json:"session"`
	Type    string `json:"type"`
	// Key is the poster's idempotency id: (Key, Type) is posted once.
	Key      string          `json:"key,omitempty"`
	Priority int             `json:"priority"`
	Data     json.RawMessage `json:"data,omitempty"`
	// To addresses the item to one consumer: only a lease for that
	// addressee (LeaseDeliveriesTo) takes it, never a general one.
	To string `json:"to,omitempty"`
	// AfterRun holds the item back until that run of the session has ended.
	AfterRun string         `json:"afterRun,omitempty"`
	Status   DeliveryStatus `json:"status"`
	// Seq is the seq of the event that posted it; order is priority, then seq.
	Seq       uint64    `json:"seq"`
	Epoch     uint64    `json:"epoch"`
	Lease     *Lease    `json:"lease,omitempty"`
	Attempts  int       `json:"attempts"`
	NotBefore time.Time `json:"notBefore,omitzero"`
	Result    string    `json:"result,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	SettledAt time.Time `json:"settledAt,omitzero"`
}

// HoldsRetention reports whether the delivery keeps its session from being
// pruned or deleted without force (G12): it is unsettled, unless it is an
// outcome notice no consumer ever took (pending, never leased, addressed
// to nobody). Such a notice repeats what the session's journal holds, and
// a session nobody polls (the command line's) would otherwise be kept
// forever. A notice that was leased, or addressed to a subscriber, holds
// it like any item.
func (d *Delivery) HoldsRetention() bool {
	if d.Status.Settled() {
		return false
	}
	return !(OutcomeType(d.Type) && d.Status == DeliveryPending && d.Attempts == 0 && d.To == "")
}

// DeliveryInput posts a delivery.
type DeliveryInput struct {
	Session  string
	Type     string
	Key      string
	Priority int
	Data     json.RawMessage
	// To and AfterRun: see Delivery.
	To       string
	AfterRun string
}

// SettleKind says how a leased delivery is settled.
type SettleKind string

// Settlements.
const (
	// SettleDone acks the delivery as handled.
	SettleDone SettleKind = "done"
	// SettleError acks it as failed for good.
	SettleError SettleKind = "error"
	// SettleRelease hands it back for immediate redelivery.
	SettleRelease SettleKind = "release"
	// SettleRetry hands it back for redelivery after a delay.
	SettleRetry SettleKind = "retry"
)

// Settlement settles a leased delivery, naming its lease epoch.
type Settlement struct {
	Kind   SettleKind
	Epoch  uint64
	Result string
	// Delay is the retry delay for SettleRetry.
	Delay time.Duration
}

// DeliveryFilter selects deliveries. Zero values match everything.
type DeliveryFilter struct {
	Session string
	Status  DeliveryStatus
}
