package apitype

import (
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/belayhq/belay"
)

// CreateSessionRequest is the body of POST /v1/sessions.
type CreateSessionRequest struct {
	Provider string            `json:"provider"`
	Model    string            `json:"model,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
	Options  json.RawMessage   `json:"options,omitempty"`
}

// SessionList is the body of GET /v1/sessions.
type SessionList struct {
	Sessions []belay.Session `json:"sessions"`
	// NextCursor, when set, asks for the next page (?cursor=).
	NextCursor string `json:"nextCursor,omitempty"`
}

// CreateRunRequest is the body of POST /v1/runs (and of POST
// /v1/sessions/{id}/runs, where Session comes from the path).
type CreateRunRequest struct {
	Session  string            `json:"session,omitempty"`
	Provider string            `json:"provider,omitempty"`
	Model    string            `json:"model,omitempty"`
	Prompt   string            `json:"prompt"`
	Script   json.RawMessage   `json:"script,omitempty"`
	Options  json.RawMessage   `json:"options,omitempty"`
	Policy   belay.Policy      `json:"policy,omitempty"`
	Priority int               `json:"priority,omitempty"`
	Deadline Duration          `json:"deadline,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
	// Tags and Meta are kept with the run, to find it by (GET /v1/runs?tag=).
	Tags []string          `json:"tags,omitempty"`
	Meta map[string]string `json:"meta,omitempty"`
}

// BatchRun is one submission of POST /v1/runs:batch: a CreateRunRequest
// and its own idempotency key (the Idempotency-Key header of a single
// POST /v1/runs).
type BatchRun struct {
	CreateRunRequest
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
}

// BatchRequest is the body of POST /v1/runs:batch: 1 to MaxBatchRuns
// submissions.
type BatchRequest struct {
	Runs []BatchRun `json:"runs"`
}

// BatchResult is the outcome of one submission of a batch: the run (HTTP
// status 201, as POST /v1/runs would answer) or the error (its status and
// body).
type BatchResult struct {
	Status int        `json:"status"`
	Run    *Run       `json:"run,omitempty"`
	Error  *ErrorBody `json:"error,omitempty"`
}

// BatchResponse is the answer of POST /v1/runs:batch: one result per
// submission, in the order of the request.
type BatchResponse struct {
	Results []BatchResult `json:"results"`
}

// Run is a run with its live activity, when the daemon is executing it.
type Run struct {
	belay.Run
	Activity *belay.Activity `json:"activity,omitempty"`
}

// RunList is the body of GET /v1/sessions/{id}/runs.
type RunList struct {
	Runs       []Run  `json:"runs"`
	NextCursor string `json:"nextCursor,omitempty"`
}

// EventList is the body of a long-poll GET /v1/sessions/{id}/events.
type EventList struct {
	Events []belay.Event `json:"events"`
	// LastSeq is the session's last synced seq when the response was made.
	LastSeq uint64 `json:"lastSeq"`
	// State is the session's state then.
	State belay.SessionState `json:"state"`
}

// PostRequest is the body of POST /v1/sessions/{id}/inbox. The key may also
// come from the Idempotency-Key header.
type PostRequest struct {
	Type     string          `json:"type"`
	Key      string          `json:"key,omitempty"`
	Priority int             `json:"priority,omitempty"`
	Data     json.RawMessage `json:"data,omitempty"`
	// To addresses the item to one consumer (a lease with the same "to");
	// AfterRun holds it back until that run of the session has ended.
	To       string `json:"to,omitempty"`
	AfterRun string `json:"afterRun,omitempty"`
}

// LeaseRequest is the body of POST /v1/inbox/lease.
type LeaseRequest struct {
	Session string `json:"session,omitempty"`
	// To leases the items addressed to it, in every session, instead of
	// the items addressed to no one.
	To    string   `json:"to,omitempty"`
	Owner string   `json:"owner"`
	TTL   Duration `json:"ttl,omitempty"`
	Max   int      `json:"max,omitempty"`
	Wait  Duration `json:"wait,omitempty"`
}

// DeliveryList is the body of a lease response and of GET
// /v1/sessions/{id}/inbox.
type DeliveryList struct {
	Deliveries []belay.Delivery `json:"deliveries"`
	NextCursor string           `json:"nextCursor,omitempty"`
}

// SettleRequest is the body of POST /v1/inbox/{id}/settle.
type SettleRequest struct {
	Kind   belay.SettleKind `json:"kind"`
	Epoch  uint64           `json:"epoch"`
	Result string           `json:"result,omitempty"`
	Delay  Duration         `json:"delay,omitempty"`
}

// PruneRequest is the body of POST /v1/prune.
type PruneRequest struct {
	DryRun bool `json:"dryRun"`
}

// Health statuses.
const (
	HealthOK = "ok"
	// HealthDegraded: the daemon answers but cannot write (its store is
	// unreachable); /healthz answers 503 so that load balancers take the
	// node out, and Problems say why.
	HealthDegraded = "degraded"
)

// Health is the body of GET /healthz: 200 with status ok, or 503 with
// status degraded and the problems.
type Health struct {
	Status string `json:"status"`
	// Problems say why the daemon is degraded, e.g. "store unreachable:
	// ...".
	Problems    []string  `json:"problems,omitempty"`
	Version     string    `json:"version"`
	Incarnation string    `json:"incarnation"`
	PID         int       `json:"pid"`
	DataDir     string    `json:"dataDir"`
	StartedAt   time.Time `json:"startedAt"`
	Active      int       `json:"active"`
	Queued      int       `json:"queued"`
	// Watchers counts the open event streams and long polls.
	Watchers int `json:"watchers"`
}

// Error is the body of every error response.
type Error struct {
	Error ErrorBody `json:"error"`
}

// ErrorBody is an API error.
type ErrorBody struct {
	Code    string         `json:"code"`
	Message string         `json:"message"`
	Details map[string]any `json:"details,omitempty"`
}

// Duration is a time.Duration written as a Go duration string ("30s") or
// a number of seconds.
type Duration time.Duration

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads "1m30s" or 90. A negative duration, or one beyond
// time.Duration's range (about 292 years), is an error, never a default.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("bad duration %q: want a Go duration like \"90s\" or a number of seconds", s)
		}
		if v < 0 {
			return fmt.Errorf("bad duration %q: must not be negative", s)
		}
		*d = Duration(v)
		return nil
	}
	var secs float64
	if err := json.Unmarshal(b, &secs); err != nil {
		return fmt.Errorf("bad duration %s: want a Go duration like \"90s\" or a number of seconds", b)
	}
	// float64(math.MaxInt64) is 2^63: every product below it converts.
	ns := secs * float64(time.Second)
	if secs < 0 || ns >= float64(math.MaxInt64) {
		return fmt.Errorf("bad duration %s: want seconds from 0 to %d (about 292 years)", b, math.MaxInt64/int64(time.Second))
	}
	*d = Duration(ns)
	return nil
}

// RetryRequest is the body of POST /v1/runs/{id}/retry (optional). The
// Idempotency-Key header defaults to "retry-" + the run id.
type RetryRequest struct {
	// AllowSideEffects retries even though side-effecting tool calls of
	// the run settled; they may run again.
	AllowSideEffects bool         `json:"allowSideEffects,omitempty"`
	Policy           belay.Policy `json:"policy,omitempty"`
	// Deadline bounds the new run from now; omitted, it has the time the
	// original run had from its creation to its deadline.
	Deadline Duration `json:"deadline,omitempty"`
}

// RetryResponse is the new run of a retry, with the side-effecting tools
// of the original run that may run again.
type RetryResponse struct {
	Run
	MayRepeat []string `json:"mayRepeat,omitempty"`
}
