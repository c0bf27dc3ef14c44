package belay

import (
	"encoding/json"
	"time"
)

// SessionState is the coarse state of a session.
type SessionState string

// Session states.
const (
	// SessionIdle has no queued or running run.
	SessionIdle SessionState = "idle"
	// SessionActive has a queued or running run.
	SessionActive SessionState = "active"
	// SessionQuarantined has a damaged journal: it is read-only.
	SessionQuarantined SessionState = "quarantined"
)

// Valid reports whether s is a known state.
func (s SessionState) Valid() bool {
	return s == SessionIdle || s == SessionActive || s == SessionQuarantined
}

// ConversationRef points at the provider-side conversation a session is
// bound to: a conversation or response id, a URL, a browser target, and the
// cursor to resume from. Providers fill in what they have.
type ConversationRef struct {
	Kind   string `json:"kind,omitempty"`
	ID     string `json:"id,omitempty"`
	URL    string `json:"url,omitempty"`
	Target string `json:"target,omitempty"`
	Cursor string `json:"cursor,omitempty"`
}

// Session is a durable handle to one provider conversation.
type Session struct {
	ID        string            `json:"id"`
	Provider  string            `json:"provider"`
	Model     string            `json:"model,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	Ref       ConversationRef   `json:"ref"`
	State     SessionState      `json:"state"`
	CreatedAt time.Time         `json:"createdAt"`
	UpdatedAt time.Time         `json:"updatedAt"`
	// LastSeq is the seq of the session's last synced event.
	LastSeq uint64 `json:"lastSeq"`
	// Problem says why a quarantined session is read-only.
	Problem string `json:"problem,omitempty"`
	// Options are provider options kept with the session.
	Options json.RawMessage `json:"options,omitempty"`
}

// SessionInput creates a session.
type SessionInput struct {
	// ID, if set, must be a valid session id not in use; otherwise one is made.
	ID       string
	Provider string
	Model    string
	Labels   map[string]string
	Options  json.RawMessage
	// IdempotencyKey makes creation idempotent: a second create with the
	// same key returns the first session.
	IdempotencyKey string
	// FirstRun, if set, is created with the session in the same durable
	// write (its Session field is ignored): a failed create leaves neither
	// the session nor the run. Find it with Runs or, by its key, CreateRun.
	FirstRun *RunInput
}

// SessionFilter selects sessions to list. Zero values match everything.
type SessionFilter struct {
	State    SessionState
	Provider string
	// Limit caps the result (0: no cap); sessions come newest first.
	Limit int
	// Before, a session id, lists only sessions older than it: the cursor
	// of the next page is the last id of the page before.
	Before string
}

// PruneReport lists what Prune deleted (or would delete) and kept.
type PruneReport struct {
	Pruned []PrunedSession `json:"pruned"`
	Kept   int             `json:"kept"`
	DryRun bool            `json:"dryRun"`
}

// PrunedSession is one session Prune deleted.
type PrunedSession struct {
	ID         string        `json:"id"`
	LastActive time.Time     `json:"lastActive"`
	Age        time.Duration `json:"age"`
	Rule       string        `json:"rule"`
	Bytes      int64         `json:"bytes"`
}
