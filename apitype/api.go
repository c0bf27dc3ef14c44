package apitype

import (
	"strconv"
	"time"

	"github.com/belayhq/belay"
)

// Error codes: the stable "code" of error responses.
const (
	CodeInvalid          = "invalid_argument"
	CodeNotFound         = "not_found"
	CodeExists           = "already_exists"
	CodeStaleEpoch       = "stale_epoch"
	CodeLeaseExpired     = "lease_expired"
	CodeLeaseHeld        = "lease_held"
	CodeNotLeased        = "not_leased"
	CodeTerminal         = "already_finished"
	CodeConversationBusy = "conversation_busy"
	CodeReadOnly         = "read_only"
	CodeUnavailable      = "unavailable"
	// CodeStoreUnreachable: the daemon is up but cannot reach its store
	// (a database); nothing was written. Retry once /healthz says ok.
	CodeStoreUnreachable = "store_unreachable"
	CodeUnauthenticated  = "unauthenticated"
	CodeTooLarge         = "too_large"
	CodeOverloaded       = "overloaded"
	CodeMethod           = "method_not_allowed"
	CodeTimeout          = "timeout"
	CodeSideEffects      = "side_effects_settled"
	CodeDiskFull         = "disk_full"
	CodeInternal         = "internal"
)

// Trailers of a streamed body. A streamed body is whole only when it ends
// with the status trailer "ok"; otherwise the error trailer says why it
// stopped (a damaged journal, the daemon stopping), and a body with neither
// was cut off.
const (
	TrailerStatus = "Belay-Status"
	TrailerError  = "Belay-Error"
	// TrailerExportNotes ends a transcript export that changed something
	// to make the conversation valid for its format: a
	// transcript.ExportSummary as JSON (the count of each kind of change
	// and the first ones in full). It is absent when nothing changed.
	TrailerExportNotes = "Belay-Export-Notes"
)

// List pages: every list endpoint answers at most a page, DefaultPage items
// unless ?limit= asks for up to MaxPage, and a nextCursor when there is
// more; ?cursor= asks for the page after it.
const (
	DefaultPage = 100
	MaxPage     = 1000
)

// Paging of GET /v1/runs.
const (
	DefaultRunsLimit = 100
	MaxRunsLimit     = 1000
)

// Run orders of GET /v1/runs (sort=).
const (
	SortNewest  = "newest"  // created, newest first (the default)
	SortOldest  = "oldest"  // created, oldest first
	SortUpdated = "updated" // last change, most recent first
)

// RunPage is the body of GET /v1/runs: one page of runs and the cursor of
// the next ("" after the last page).
type RunPage struct {
	Runs       []Run  `json:"runs"`
	NextCursor string `json:"nextCursor,omitempty"`
}

// RunQuery is what GET /v1/runs selects: the filter, the order, the page
// size and the cursor of the page (from a previous nextCursor).
type RunQuery struct {
	belay.RunFilter
	Sort   string
	Limit  int
	Cursor string
}

// Values encodes q as the query string of GET /v1/runs.
func (q RunQuery) Values() map[string][]string {
	v := map[string][]string{}
	set := func(k, val string) {
		if val != "" {
			v[k] = []string{val}
		}
	}
	set("session", q.Session)
	set("status", string(q.Status))
	set("provider", q.Provider)
	set("tag", q.Tag)
	if !q.Since.IsZero() {
		set("since", q.Since.UTC().Format(time.RFC3339Nano))
	}
	if q.Failed {
		set("failed", "true")
	}
	set("sort", q.Sort)
	if q.Limit > 0 {
		set("limit", strconv.Itoa(q.Limit))
	}
	set("cursor", q.Cursor)
	return v
}

// TranscriptChange is one thing a transcript repair or export changed (or,
// in a dry run, would change). Kind is one of the transcript package's
// Change* kinds (docs/transcripts.md).
type TranscriptChange struct {
	Kind string `json:"kind"`
	// Line is the 1-based line (JSONL) or array element of the source
	// entry, when there is one.
	Line int `json:"line,omitempty"`
	// Message is the 0-based index of the message in the conversation as
	// read (-1 or absent for file-level changes).
	Message *int   `json:"message,omitempty"`
	CallID  string `json:"call_id,omitempty"`
	Tool    string `json:"tool,omitempty"`
	Reason  string `json:"reason"`
}

// ExportSummary is what a streaming export changed to make the
// conversation valid for its format (the TrailerExportNotes of GET
// /v1/sessions/{id}/transcript): how many changes of each kind, and the
// first ones (transcript.MaxSummaryChanges) in full.
type ExportSummary struct {
	Counts  map[string]int     `json:"counts,omitempty"`
	Changes []TranscriptChange `json:"changes,omitempty"`
}

// Total is the number of changes.
func (s ExportSummary) Total() int {
	n := 0
	for _, c := range s.Counts {
		n += c
	}
	return n
}
