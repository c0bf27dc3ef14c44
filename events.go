package belay

import (
	"encoding/json"
	"time"
)

// Event is one journal record of a session: gap-free seq, time, type,
// optional idempotency id, optional run and epoch, and data. Its JSON form
// is the journal line (journal/doc.go) and the API's event.
type Event struct {
	Seq   uint64          `json:"seq"`
	TS    time.Time       `json:"ts"`
	Type  string          `json:"type"`
	ID    string          `json:"id,omitempty"`
	Run   string          `json:"run,omitempty"`
	Epoch uint64          `json:"epoch,omitempty"`
	Data  json.RawMessage `json:"data"`
}

// MaxRecordSize caps one event as a journal line (its JSON, checksum
// trailer and terminator): the largest record any store keeps, and so the
// bound of a run's input and of a line of an event stream.
const MaxRecordSize = 1 << 20

// Durability is the class of an append.
type Durability uint8

// Durability classes.
const (
	// Sync appends return only after fdatasync covered them.
	Sync Durability = iota
	// Buffered appends return at once; they are written and synced with the
	// next commit, within the journal's buffered delay. A crash may lose
	// them back to the last sync, never reorder or corrupt them.
	Buffered
)

func (d Durability) String() string {
	if d == Buffered {
		return "buffered"
	}
	return "sync"
}

// Event types a store journals for its own state changes, with their
// data. Every store writes the same JSON (docs/journal-format.md), so that
// watchers, transcripts and exports read all stores alike.
const (
	EventSessionCreated = "session.created" // SessionCreatedData
	EventRunCreated     = "run.created"     // RunCreatedData
	EventRunLeased      = "run.leased"      // RunLeasedData
	EventRunRenewed     = "run.renewed"     // RunRenewedData
	EventRunReleased    = "run.released"    // {}
	EventRunUpdated     = "run.updated"     // RunUpdatedData
	// EventRunCancelRequested records a durable cancel request on a
	// running run (a cancel, or a submit with policy interrupt).
	EventRunCancelRequested = "run.cancel_requested" // CancelRequestedData
	EventDeliveryPosted     = "delivery.posted"      // DeliveryPostedData
	EventDeliveryLeased     = "delivery.leased"      // DeliveryLeasedData
	EventDeliverySettled    = "delivery.settled"     // DeliverySettledData
	EventDeliveryExpired    = "delivery.expired"     // DeliveryExpiredData
	EventDeliveryReturned   = "delivery.returned"    // reserved: no store writes it today
)

// Event types a store journals, in the delivery's session, for the
// notification of a delivery to a target (a webhook or an exec hook).
const (
	EventNotifyClaimed = "notify.claimed"
	EventNotifySettled = "notify.settled"
)

// StoreEventType reports whether typ is an event type only a store
// writes: an append of one is refused.
func StoreEventType(typ string) bool {
	switch typ {
	case EventSessionCreated, EventRunCreated, EventRunLeased,
		EventRunRenewed, EventRunReleased, EventRunUpdated, EventRunCancelRequested,
		EventDeliveryPosted, EventDeliveryLeased, EventDeliverySettled,
		EventDeliveryExpired, EventDeliveryReturned,
		EventNotifyClaimed, EventNotifySettled:
		return true
	}
	return false
}

// SessionCreatedData is the data of session.created.
type SessionCreatedData struct {
	ID       string            `json:"id"`
	Provider string            `json:"provider"`
	Model    string            `json:"model,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
	Options  json.RawMessage   `json:"options,omitempty"`
	Key      string            `json:"key,omitempty"`
}

// RunCreatedData is the data of run.created. Input holds the run's
// InputData.
type RunCreatedData struct {
	ID       string            `json:"id"`
	Key      string            `json:"key,omitempty"`
	Priority int               `json:"priority"`
	Provider string            `json:"provider"`
	Model    string            `json:"model,omitempty"`
	Deadline time.Time         `json:"deadline,omitzero"`
	Input    json.RawMessage   `json:"input,omitempty"`
	Tags     []string          `json:"tags,omitempty"`
	Meta     map[string]string `json:"meta,omitempty"`
	// Front: submitted with policy interrupt, it runs next.
	Front bool `json:"front,omitempty"`
}

// CancelRequestedData is the data of run.cancel_requested. By names the
// run that interrupted this one (policy interrupt), if any.
type CancelRequestedData struct {
	Reason string `json:"reason"`
	By     string `json:"by,omitempty"`
}

// RunLeasedData is the data of run.leased; the event's epoch is the new
// lease's. Takeover is the epoch of the lease it replaced, if any.
type RunLeasedData struct {
	Owner     string    `json:"owner"`
	ExpiresAt time.Time `json:"expiresAt"`
	Takeover  uint64    `json:"takeover,omitempty"`
}

// RunRenewedData is the data of run.renewed.
type RunRenewedData struct {
	ExpiresAt time.Time    `json:"expiresAt"`
	Activity  *RunActivity `json:"activity,omitempty"`
}

// RunUpdatedData is the data of run.updated: the fields of a RunUpdate
// that were set. Data is the runtime's AttemptData when an attempt starts
// and TurnEndData when a turn ends.
type RunUpdatedData struct {
	Phase   RunPhase         `json:"phase,omitempty"`
	Attempt int              `json:"attempt,omitempty"`
	Error   *RunError        `json:"error,omitempty"`
	Reason  string           `json:"reason,omitempty"`
	Ref     *ConversationRef `json:"ref,omitempty"`
	Data    json.RawMessage  `json:"data,omitempty"`
}

// DeliveryPostedData is the data of delivery.posted.
type DeliveryPostedData struct {
	ID       string          `json:"id"`
	Type     string          `json:"type"`
	Key      string          `json:"key,omitempty"`
	Priority int             `json:"priority"`
	Data     json.RawMessage `json:"data,omitempty"`
	To       string          `json:"to,omitempty"`
	AfterRun string          `json:"afterRun,omitempty"`
}

// DeliveryLeasedData is the data of delivery.leased; the event's epoch is
// the new lease's.
type DeliveryLeasedData struct {
	ID        string    `json:"id"`
	Owner     string    `json:"owner"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// DeliverySettledData is the data of delivery.settled.
type DeliverySettledData struct {
	ID        string     `json:"id"`
	Kind      SettleKind `json:"kind"`
	Result    string     `json:"result,omitempty"`
	NotBefore time.Time  `json:"notBefore,omitzero"`
}

// DeliveryExpiredData is the data of delivery.expired.
type DeliveryExpiredData struct {
	ID string `json:"id"`
}

// Event types the runtime journals about a run, besides the store's own
// state changes: run.updated carries the attempt start as its data
// (AttemptData), and the turn end as TurnEndData with phase finishing.
// Text, thinking and usage are Buffered; the rest are Sync.
const (
	EventRunText       = "run.text"        // answer text: TextData
	EventRunThinking   = "run.thinking"    // reasoning text: TextData
	EventRunToolCall   = "run.tool_call"   // a tool call's intent: ToolCall
	EventRunToolResult = "run.tool_result" // a tool call's settlement: ToolResult
	EventRunUsage      = "run.usage"       // token counts: Tokens
	EventRunError      = "run.error"       // an attempt failed: ErrorData
	EventRunWatchdog   = "run.watchdog"    // an inactivity tier expired: WatchdogData
	EventRunRecovery   = "run.recovery"    // what the runtime decided: RecoveryData
	EventRunSuspended  = "run.suspended"   // the daemon stopped with the run in flight: SuspendedData
	// EventRunAnswer is the run's final answer as the provider took it
	// when the turn ended (a chat site's copy button): it supersedes the
	// run.text deltas as the run's answer. It is Sync, journaled in parts
	// of at most AnswerPart bytes: AnswerData.
	EventRunAnswer = "run.answer"
)

// Delivery types the runtime posts to a session's inbox when a run ends,
// with OutcomeData.
const (
	DeliveryRunCompleted = "run.completed"
	DeliveryRunFailed    = "run.failed"
	DeliveryRunStranded  = "run.stranded"
)

// OutcomeType reports whether typ is one of the delivery types the runtime
// posts when a run ends (DeliveryRunCompleted, DeliveryRunFailed,
// DeliveryRunStranded). Clients may not post them (Runtime.Post).
func OutcomeType(typ string) bool {
	switch typ {
	case DeliveryRunCompleted, DeliveryRunFailed, DeliveryRunStranded:
		return true
	}
	return false
}

// InputData is the input of a run, journaled whole in its run.created
// event.
type InputData struct {
	Prompt string `json:"prompt"`
	// Script drives the fake provider; other providers ignore it.
	Script json.RawMessage `json:"script,omitempty"`
	// Options are per-run provider options.
	Options json.RawMessage `json:"options,omitempty"`
}

// AttemptData is the data of the run.updated event that starts an attempt.
type AttemptData struct {
	Attempt int  `json:"attempt"`
	Resume  bool `json:"resume,omitempty"`
}

// TurnEndData is the data of the run.updated event that ends a turn.
type TurnEndData struct {
	StopReason string `json:"stopReason,omitempty"`
}

// TextData is the data of run.text and run.thinking.
type TextData struct {
	Text string `json:"text"`
}

// AnswerData is the data of a run.answer event: one part of a final
// answer of Size bytes whose sha256 is SHA256, the bytes at Offset. The
// answer is whole once parts of the same SHA256 cover 0 to Size in order;
// the last whole one after the attempt that last started from scratch
// is the run's answer, in place of its run.text deltas.
type AnswerData struct {
	Text   string `json:"text"`
	Offset int64  `json:"offset"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// Source says where the provider took it ("copy": a copy button;
	// "dom": the page's text), Note why not from the first choice.
	Source string `json:"source,omitempty"`
	Note   string `json:"note,omitempty"`
}

// AnswerPart bounds the text of one run.answer event, so that each fits
// a journal record whatever its JSON escaping.
const AnswerPart = 128 << 10

// ErrorData is the data of run.error.
type ErrorData struct {
	Class   ErrorClass `json:"class"`
	Message string     `json:"message"`
	// RetryAfterSeconds is the delay the provider asked for, when it gave
	// one (as RunError.RetryAfterSeconds).
	RetryAfterSeconds float64 `json:"retryAfterSeconds,omitempty"`
}

// WatchdogData is the data of run.watchdog.
type WatchdogData struct {
	Tier        Tier    `json:"tier"`
	IdleSeconds float64 `json:"idleSeconds"`
}

// Recovery decisions of RecoveryData.
const (
	DecisionResume = "resume" // reattach through the provider from its cursor
	DecisionResend = "resend" // start the turn again: no side effect settled
	DecisionStrand = "strand" // stop: resending would repeat side effects
	DecisionFail   = "fail"   // stop: not recoverable, or attempts exhausted
	DecisionFinish = "finish" // the turn had ended: finish as complete
)

// RecoveryData is the data of run.recovery.
type RecoveryData struct {
	Decision string `json:"decision"`
	Reason   string `json:"reason"`
	Attempt  int    `json:"attempt"`
}

// SuspendedData is the data of run.suspended.
type SuspendedData struct {
	Reason string `json:"reason"`
}

// OutcomeData is the data of the deliveries the runtime posts when a run
// ends (run.completed, run.failed, run.stranded).
type OutcomeData struct {
	Run    string     `json:"run"`
	Status RunStatus  `json:"status"`
	Class  ErrorClass `json:"class,omitempty"`
	Reason string     `json:"reason,omitempty"`
	At     time.Time  `json:"at"`
}

// ToolCall is a tool call's intent (run.tool_call).
type ToolCall struct {
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input,omitempty"`
	// SideEffect: running it changes the world (writes a file, sends a
	// message), so it must never run twice. A call whose side-effect status
	// is unknown must be reported as a side effect.
	SideEffect bool `json:"sideEffect"`
}

// ToolResult is a tool call's settlement (run.tool_result).
type ToolResult struct {
	CallID  string `json:"callId"`
	Content string `json:"content,omitempty"`
	IsError bool   `json:"isError,omitempty"`
	// Class classifies a failed call (permission_denied: it did not run).
	Class ErrorClass `json:"class,omitempty"`
}

// NotExecuted reports whether the call failed before it could have had any
// effect.
func (r *ToolResult) NotExecuted() bool {
	return r.IsError && r.Class == ClassPermissionDenied
}

// Tokens counts usage (run.usage).
type Tokens struct {
	Input  int `json:"input"`
	Output int `json:"output"`
}
