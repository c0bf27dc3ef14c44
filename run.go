package belay

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// RunStatus is the coarse status of a run.
type RunStatus string

// Run statuses.
const (
	RunQueued    RunStatus = "queued"
	RunRunning   RunStatus = "running"
	RunComplete  RunStatus = "complete"
	RunFailed    RunStatus = "failed"
	RunCancelled RunStatus = "cancelled"
	RunStranded  RunStatus = "stranded"
)

// Terminal reports whether a run in this status is finished.
func (s RunStatus) Terminal() bool {
	switch s {
	case RunComplete, RunFailed, RunCancelled, RunStranded:
		return true
	}
	return false
}

// Valid reports whether s is a known status.
func (s RunStatus) Valid() bool { return s == RunQueued || s == RunRunning || s.Terminal() }

// RunPhase is the fine-grained phase of a run.
type RunPhase string

// Run phases.
const (
	PhaseQueued           RunPhase = "queued"
	PhaseAdmitted         RunPhase = "admitted"
	PhaseStarting         RunPhase = "starting"
	PhaseAwaitingResponse RunPhase = "awaiting_response"
	PhaseStreaming        RunPhase = "streaming"
	PhaseToolRunning      RunPhase = "tool_running"
	PhaseRetryWait        RunPhase = "retry_wait"
	PhaseRecovering       RunPhase = "recovering"
	PhaseFinishing        RunPhase = "finishing"
	PhaseComplete         RunPhase = "complete"
	PhaseFailed           RunPhase = "failed"
	PhaseCancelled        RunPhase = "cancelled"
	PhaseStranded         RunPhase = "stranded"
)

// Status returns the coarse status a phase belongs to.
func (p RunPhase) Status() RunStatus {
	switch p {
	case PhaseQueued:
		return RunQueued
	case PhaseComplete:
		return RunComplete
	case PhaseFailed:
		return RunFailed
	case PhaseCancelled:
		return RunCancelled
	case PhaseStranded:
		return RunStranded
	case PhaseAdmitted, PhaseStarting, PhaseAwaitingResponse, PhaseStreaming,
		PhaseToolRunning, PhaseRetryWait, PhaseRecovering, PhaseFinishing:
		return RunRunning
	}
	return ""
}

// Lease is time-bounded ownership with a fencing epoch.
type Lease struct {
	Owner     string    `json:"owner"`
	Epoch     uint64    `json:"epoch"`
	GrantedAt time.Time `json:"grantedAt"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// Expired reports whether the lease has expired at now.
func (l *Lease) Expired(now time.Time) bool { return l == nil || !now.Before(l.ExpiresAt) }

// RunError is why a run failed, in one of the error classes. Message is
// the provider's message with secrets scrubbed.
type RunError struct {
	Class   ErrorClass `json:"class"`
	Message string     `json:"message"`
	// Status is the provider's HTTP status, when the failure was an HTTP
	// answer.
	Status int `json:"status,omitempty"`
	// RetryAfterSeconds is the delay the provider asked for before a new
	// try (Retry-After), when it gave one.
	RetryAfterSeconds float64 `json:"retryAfterSeconds,omitempty"`
}

// Run is one turn or job inside a session.
type Run struct {
	ID             string    `json:"id"`
	Session        string    `json:"session"`
	IdempotencyKey string    `json:"idempotencyKey,omitempty"`
	Status         RunStatus `json:"status"`
	Phase          RunPhase  `json:"phase"`
	Priority       int       `json:"priority"`
	Provider       string    `json:"provider"`
	Model          string    `json:"model,omitempty"`
	// Tags and Meta were given when the run was sent, so that agents and
	// teams can find their runs (GET /v1/runs?tag=).
	Tags []string          `json:"tags,omitempty"`
	Meta map[string]string `json:"meta,omitempty"`
	// Epoch is the fencing token of the latest lease grant (0: never leased).
	Epoch uint64 `json:"epoch"`
	// Lease is the current lease, nil when none is held.
	Lease *Lease `json:"lease,omitempty"`
	// CancelRequest is set once someone asked to cancel the run while it
	// was running: the instance holding its lease carries it out, whichever
	// instance received the request.
	CancelRequest *CancelRequest `json:"cancelRequest,omitempty"`
	// Activity is the last progress its runner reported, persisted with
	// lease renewals so that any instance can tell how long a run has been
	// silent (nil until the first renewal).
	Activity *RunActivity `json:"activity,omitempty"`
	Attempt  int          `json:"attempt"`
	Error    *RunError    `json:"error,omitempty"`
	Reason   string       `json:"reason,omitempty"`
	Deadline time.Time    `json:"deadline,omitzero"`
	// InputSeq is the seq of the run.created event that holds the input.
	InputSeq  uint64          `json:"inputSeq"`
	Ref       ConversationRef `json:"ref"`
	CreatedAt time.Time       `json:"createdAt"`
	UpdatedAt time.Time       `json:"updatedAt"`
	StartedAt time.Time       `json:"startedAt,omitzero"`
	EndedAt   time.Time       `json:"endedAt,omitzero"`
}

// CancelRequest is a durable request to cancel a running run.
type CancelRequest struct {
	Reason string `json:"reason"`
	// By names the run that interrupted this one (policy interrupt), if any.
	By string    `json:"by,omitempty"`
	At time.Time `json:"at"`
}

// RunActivity is a run's liveness as its runner last reported it.
type RunActivity struct {
	LastProgress time.Time `json:"lastProgress"`
	Tier         string    `json:"tier,omitempty"`
}

// RunInput creates a run. Input (the prompt and options) is journaled in
// the run.created event, not kept on the Run.
type RunInput struct {
	Session        string
	IdempotencyKey string
	Priority       int
	Provider       string
	Model          string
	Deadline       time.Time
	Input          json.RawMessage
	Tags           []string
	Meta           map[string]string
}

// RunUpdate changes a run under its lease. Zero fields are left alone.
type RunUpdate struct {
	Phase   RunPhase
	Attempt int
	Error   *RunError
	Reason  string
	Ref     *ConversationRef
	// Data is journaled with the update event.
	Data json.RawMessage
	// Deliver, if set, posts this delivery in the same durable write as the
	// update (idempotent by its Key and Type), so that a run never ends
	// without the inbox item that announces it.
	Deliver *DeliveryInput
	// Buffered lets the store make the update durable with the next synced
	// write of the session (or within its buffered delay) instead of before
	// it returns: a crash may take it back, never reorder it. Only a phase
	// change within a running run may be buffered (no attempt, error,
	// reason, ref, delivery or terminal phase); see "What a crash may take
	// back" in docs/journal-format.md. Readers of the run see it once it is
	// durable. A store may make it durable at once.
	Buffered bool
}

// CheckBuffered reports why u may not be buffered, or nil.
func (u RunUpdate) CheckBuffered() error {
	if !u.Buffered {
		return nil
	}
	switch {
	case u.Phase == "" || u.Phase.Status() != RunRunning:
		return fmt.Errorf("%w: only a phase change within a running run may be buffered, not phase %q", ErrInvalid, u.Phase)
	case u.Attempt != 0 || u.Error != nil || u.Reason != "" || u.Ref != nil || u.Deliver != nil:
		return fmt.Errorf("%w: a buffered run update carries only a phase and data (an attempt, error, reason, ref or delivery is synced)", ErrInvalid)
	}
	return nil
}

// RunFilter selects runs. Zero values match everything.
type RunFilter struct {
	Session string
	Status  RunStatus
	// Provider, Tag and Since (created at or after) narrow the selection;
	// Failed keeps failed and stranded runs only.
	Provider string
	Tag      string
	Since    time.Time
	Failed   bool
}

// Match reports whether r passes the filter.
func (f RunFilter) Match(r *Run) bool {
	switch {
	case f.Session != "" && r.Session != f.Session,
		f.Status != "" && r.Status != f.Status,
		f.Provider != "" && r.Provider != f.Provider,
		!f.Since.IsZero() && r.CreatedAt.Before(f.Since),
		f.Failed && r.Status != RunFailed && r.Status != RunStranded:
		return false
	}
	return f.Tag == "" || slices.Contains(r.Tags, f.Tag)
}

// Limits on a run's tags and metadata.
const (
	MaxTags    = 16
	MaxTagLen  = 64
	MaxMeta    = 32
	MaxMetaKey = 64
	MaxMetaVal = 1024
)

// MaxPriority bounds a run's or an inbox item's priority, either way:
// what every store keeps (PostgreSQL's integer).
const MaxPriority = 1<<31 - 1

// CheckPriority refuses a priority beyond ±MaxPriority.
func CheckPriority(p int) error {
	if p > MaxPriority || p < -MaxPriority {
		return fmt.Errorf("%w: priority %d is out of range (at most %d either way)", ErrInvalid, p, MaxPriority)
	}
	return nil
}

// CheckTags validates tags and metadata: tags are 1-64 of [A-Za-z0-9._:/@-],
// at most 16; metadata has at most 32 keys of 1-64 such characters and
// values of at most 1024 bytes.
func CheckTags(tags []string, meta map[string]string) error {
	if len(tags) > MaxTags {
		return fmt.Errorf("%w: at most %d tags, got %d", ErrInvalid, MaxTags, len(tags))
	}
	for _, t := range tags {
		if !tagName(t) {
			return fmt.Errorf("%w: tag %q: want 1-%d of letters, digits and ._:/@-", ErrInvalid, t, MaxTagLen)
		}
	}
	if len(meta) > MaxMeta {
		return fmt.Errorf("%w: at most %d metadata keys, got %d", ErrInvalid, MaxMeta, len(meta))
	}
	for k, v := range meta {
		if !tagName(k) {
			return fmt.Errorf("%w: metadata key %q: want 1-%d of letters, digits and ._:/@-", ErrInvalid, k, MaxTagLen)
		}
		if len(v) > MaxMetaVal || !utf8.ValidString(v) {
			return fmt.Errorf("%w: metadata %q: the value must be valid UTF-8 of at most %d bytes", ErrInvalid, k, MaxMetaVal)
		}
	}
	return nil
}

func tagName(s string) bool {
	if s == "" || len(s) > MaxTagLen {
		return false
	}
	for _, c := range []byte(s) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("._:/@-", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// Policy says what a new run does when its session already has a run
// queued or running (G4).
type Policy string

// Follow-up policies.
const (
	// PolicyEnqueue queues the new run behind the session's others (FIFO).
	PolicyEnqueue Policy = "enqueue"
	// PolicyReject refuses the new run: the session is busy (ErrActive).
	PolicyReject Policy = "reject"
	// PolicyInterrupt cancels the active run and runs the new one next.
	PolicyInterrupt Policy = "interrupt"
	// PolicyReplace cancels the session's queued runs; the active one goes
	// on and the new one runs after it.
	PolicyReplace Policy = "replace"
)

// Valid reports whether p is a known policy ("" counts as enqueue).
func (p Policy) Valid() bool {
	switch p {
	case "", PolicyEnqueue, PolicyReject, PolicyInterrupt, PolicyReplace:
		return true
	}
	return false
}

// Tier names which inactivity timeout of the watchdog applies.
type Tier string

// Tiers of the watchdog.
const (
	TierAwaitingFirst Tier = "awaiting_first_token"
	TierStreaming     Tier = "streaming"
	TierToolRunning   Tier = "tool_running"
	TierAfterTurnEnd  Tier = "after_turn_end"
)

// Activity is what the runtime knows of an active run's liveness.
type Activity struct {
	Run          string    `json:"run"`
	Phase        RunPhase  `json:"phase"`
	Attempt      int       `json:"attempt"`
	LastProgress time.Time `json:"lastProgress"`
	Tier         Tier      `json:"tier"`
}
