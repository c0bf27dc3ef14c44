// Package store defines the Store interface the runtime consumes, and the
// shapes shared by its implementations: fsstore (the embedded default) and,
// later, pgstore. It is a seam between the runtime and storage, not a
// promise to outside callers; storetest is the conformance suite every
// implementation passes.
//
// Every state change a Store makes is a Sync event in the session's journal
// (G1), applied to the session's state only after it is durable. Reads see
// synced events only. The one exception a caller asks for is a buffered
// run update (belay.RunUpdate.Buffered: a phase change within a running
// run): a store may let it ride on the session's next synced write, and
// still applies it only once it is durable.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/belayhq/belay"
)

// Store is durable storage for sessions, their events, runs and deliveries.
// Implementations are safe for concurrent use.
type Store interface {
	// CreateSession creates a session and journals session.created.
	CreateSession(ctx context.Context, in belay.SessionInput) (belay.Session, error)
	// Session returns one session, or belay.ErrNotFound.
	Session(ctx context.Context, id string) (belay.Session, error)
	// Sessions lists sessions, newest first.
	Sessions(ctx context.Context, f belay.SessionFilter) ([]belay.Session, error)

	// Append journals events in a session and returns their seqs. An event
	// with an idempotency ID already in the session returns the original seq
	// (G3). An event that names a Run and an Epoch is refused with a
	// *belay.StaleEpochError unless the epoch is the run's current lease
	// epoch (G6).
	Append(ctx context.Context, session string, d belay.Durability, evs ...belay.Event) ([]uint64, error)
	// Events returns up to limit events with seq > after (limit <= 0: all).
	Events(ctx context.Context, session string, after uint64, limit int) ([]belay.Event, error)
	// ScanEvents calls fn for each event with seq > after, in order, until
	// the events end or fn returns an error, which it returns. It holds one
	// event in memory at a time, so a session of any size is read in
	// bounded memory, and it stops with ctx's error when ctx is done. An
	// event's Data is valid only until fn returns.
	ScanEvents(ctx context.Context, session string, after uint64, fn func(belay.Event) error) error
	// WaitEvents blocks until the session has an event with seq > after, or
	// ctx is done.
	WaitEvents(ctx context.Context, session string, after uint64) error

	// CreateRun creates a queued run. With an IdempotencyKey already used in
	// the session it returns the original run and created=false.
	CreateRun(ctx context.Context, in belay.RunInput) (run belay.Run, created bool, err error)
	// Run returns one run, or belay.ErrNotFound.
	Run(ctx context.Context, id string) (belay.Run, error)
	// RunInput returns the input a run was created with.
	RunInput(ctx context.Context, id string) (json.RawMessage, error)
	// Runs lists runs in creation order.
	Runs(ctx context.Context, f belay.RunFilter) ([]belay.Run, error)
	// AcquireRunLease grants owner a lease on a non-terminal run and
	// increments its epoch. It fails with belay.ErrLeaseHeld while another
	// unexpired lease is held, unless takeover names that lease's epoch (the
	// caller proved its owner dead).
	AcquireRunLease(ctx context.Context, id, owner string, ttl time.Duration, takeover uint64) (belay.Run, error)
	// RenewRunLease extends the lease of the given epoch, and records the
	// run's activity (Run.Activity) when act is not nil.
	RenewRunLease(ctx context.Context, id string, epoch uint64, ttl time.Duration, act *belay.RunActivity) (belay.Run, error)
	// ReleaseRunLease drops the lease of the given epoch.
	ReleaseRunLease(ctx context.Context, id string, epoch uint64) (belay.Run, error)
	// UpdateRun changes a run's phase and details under the lease of the
	// given epoch; a terminal phase ends the run and drops its lease.
	UpdateRun(ctx context.Context, id string, epoch uint64, u belay.RunUpdate) (belay.Run, error)
	// CancelQueuedRun ends a queued (never leased) run as cancelled.
	CancelQueuedRun(ctx context.Context, id, reason string) (belay.Run, error)

	// Submit creates a queued run in an existing session under a
	// follow-up policy, in one atomic step (G3, G4): reject refuses it
	// with ErrConversationBusy while the session has a run queued or
	// running; replace cancels the session's queued runs in the same
	// write; interrupt queues it ahead of them and records a cancel
	// request on the running run in the same write. An IdempotencyKey
	// already used in the session returns the original run and
	// Created=false, whatever the policy (the caller compares inputs).
	Submit(ctx context.Context, in SubmitInput) (SubmitResult, error)
	// SubmitBatch makes many submissions at once (POST /v1/runs:batch),
	// each exactly as Submit would and with its own outcome: errs[i] is
	// nil or why submission i was refused (results[i] is then zero).
	// Submissions to one session are made in the order given. Stores
	// write a batch in as few durable writes as they can (PostgreSQL: one
	// transaction for up to 256 sessions); every submission that has a
	// result is durable when SubmitBatch returns (G1).
	SubmitBatch(ctx context.Context, ins []SubmitInput) (results []SubmitResult, errs []error)
	// ClaimRuns leases up to c.Max runs to c.Owner, judged by the store's
	// clock, in one atomic step per run: first runs to rescue (running
	// runs whose lease expired or whose owner is not live, never a live
	// owner's run under an unexpired lease), then queued runs, priority
	// then FIFO, at most one active run per session (the conversation
	// lease) and never more active runs than c.Limits allow, counting
	// every owner's runs. A run whose session cannot be written is
	// skipped. Each claimed run comes back under its new lease.
	ClaimRuns(ctx context.Context, c Claim) ([]Claimed, error)
	// HeartbeatOwner records that owner is alive for ttl more (by the
	// store's clock). Runs leased to an owner whose record expired, or
	// that never had one, are rescued by ClaimRuns.
	HeartbeatOwner(ctx context.Context, owner string, ttl time.Duration) error
	// RetireOwner ends owner's record: its runs may be rescued at once. The
	// owner must have stopped writing for them.
	RetireOwner(ctx context.Context, owner string) error
	// Owners lists the owner records, live or not (for doctor and status).
	Owners(ctx context.Context) ([]Owner, error)
	// RequestCancel cancels a queued run at once, and records a durable
	// cancel request on a running one (Run.CancelRequest) that the owner
	// of its lease carries out. It is idempotent; a finished run is
	// refused with belay.ErrTerminal.
	RequestCancel(ctx context.Context, id, reason string) (belay.Run, error)
	// Counts returns how many runs are queued and running, in all sessions.
	Counts(ctx context.Context) (Counts, error)

	// Changes returns up to max state changes committed after cursor
	// after, in commit order, and the cursor to pass next: the change feed
	// every instance follows (cancel requests, new runs, ended runs, inbox
	// changes). Within a session, changes come in seq order; the feed has
	// no gaps. A cursor older than what the store keeps fails with
	// ErrCursorExpired: the caller rereads the state it follows and goes
	// on from ChangeHead. Only the state changes a follower acts on are in
	// the feed (InFeed); a session's other events, a running run's phase
	// changes and lease renewals among them, are read with Events.
	Changes(ctx context.Context, after uint64, max int) (changes []Change, next uint64, err error)
	// ChangeHead is the cursor of the last committed change.
	ChangeHead(ctx context.Context) (uint64, error)
	// WaitChanges blocks until a change after cursor after is committed,
	// or ctx is done.
	WaitChanges(ctx context.Context, after uint64) error

	// PostDelivery adds an inbox item. A second post with the same (Key,
	// Type) in the session returns the first and created=false.
	PostDelivery(ctx context.Context, in belay.DeliveryInput) (d belay.Delivery, created bool, err error)
	// Delivery returns one delivery, or belay.ErrNotFound.
	Delivery(ctx context.Context, id string) (belay.Delivery, error)
	// Deliveries lists deliveries in delivery order (priority, then seq).
	Deliveries(ctx context.Context, f belay.DeliveryFilter) ([]belay.Delivery, error)
	// LeaseDeliveries leases up to max deliverable items of a session, in
	// order of priority class, then seq. An item is deliverable when it is
	// pending and past NotBefore, or leased with an expired lease, and
	// addressed to no one, and, if it waits for a run (AfterRun), that run
	// has ended. Each grant increments the item's epoch.
	LeaseDeliveries(ctx context.Context, session, owner string, ttl time.Duration, max int) ([]belay.Delivery, error)
	// SettleDelivery acks, releases or retries a leased item, naming the
	// epoch of its lease; a stale or expired lease is refused.
	SettleDelivery(ctx context.Context, id string, s belay.Settlement) (belay.Delivery, error)
	// ExpireDeliveryLeases returns every leased item whose lease expired by
	// now to pending, and reports the earliest lease expiry still ahead (zero
	// if none) so the caller can arm a timer for it (G7).
	ExpireDeliveryLeases(ctx context.Context) (expired []belay.Delivery, next time.Time, err error)

	NotificationStore // claims and settles webhook and hook notifications (notify.go)

	// Prune deletes terminal sessions by age policy (G12). Unless it is a
	// dry run, it also drops the owner records whose heartbeat expired more
	// than OwnerRecordKeep ago and that hold no lease on a queued or
	// running run: a node that is gone for good leaves the listing.
	Prune(ctx context.Context, p PrunePolicy) (belay.PruneReport, error)

	// Close releases the store. It is safe to call more than once.
	Close() error
}

// ErrConversationBusy is returned for a run submitted with
// belay.PolicyReject to a session that has a run queued or running.
var ErrConversationBusy = fmt.Errorf("%w: the session already has a run; submit with policy enqueue, interrupt or replace", belay.ErrActive)

// ErrCursorExpired is a change-feed cursor older than the store keeps.
var ErrCursorExpired = errors.New("belay: change cursor expired")

// SubmitInput is a run to create under a follow-up policy.
type SubmitInput struct {
	belay.RunInput
	Policy belay.Policy
	// Claim, when set, asks the store to lease the new run to
	// Claim.Owner in the same write, when a ClaimRuns by that owner would
	// lease it first anyway: no run waits to be rescued or claimed, the
	// session has no other run queued or running, and Claim.Limits leave
	// room. The lease is then in SubmitResult.Claimed, and the run is
	// durable already leased: one write where a submit and a claim take
	// two. A store may always leave the run queued (a claim leases it as
	// usual). Claim.Max is not used.
	Claim *Claim
}

// SubmitResult is what Submit did.
type SubmitResult struct {
	Run     belay.Run
	Created bool
	// Cancelled lists the queued runs a replace or interrupt cancelled;
	// Interrupted the running run that was asked to cancel.
	Cancelled   []string
	Interrupted string
	// Claimed is the new run as leased to SubmitInput.Claim's owner, nil
	// when it was left queued.
	Claimed *Claimed
}

// Limits are the admission caps (G5). Zero means unlimited.
type Limits struct {
	Global      int            `json:"global"`
	PerProvider map[string]int `json:"perProvider,omitempty"`
}

// Capped reports whether l caps anything.
func (l Limits) Capped() bool {
	if l.Global > 0 {
		return true
	}
	for _, c := range l.PerProvider {
		if c > 0 {
			return true
		}
	}
	return false
}

// Claim asks ClaimRuns for runs.
type Claim struct {
	Owner  string
	Max    int
	TTL    time.Duration
	Limits Limits
}

// Check refuses a claim that names no owner or no positive TTL.
func (c Claim) Check() error {
	if c.Owner == "" || c.TTL <= 0 {
		return fmt.Errorf("%w: a claim needs an owner and a positive ttl", belay.ErrInvalid)
	}
	return nil
}

// Claimed is a run ClaimRuns leased to its owner. Rescued says the run was
// running under an owner that is gone: its new owner recovers it (G9).
type Claimed struct {
	Run     belay.Run
	Rescued bool
	// Input is what RunInput returns for the run, and Session the run's
	// session, both read by the claim itself (under the session's lock),
	// so that the runner need not read them again; nil when the store did
	// not read them.
	Input   json.RawMessage
	Session *belay.Session
}

// Owner is a runtime instance's liveness record.
type Owner struct {
	ID        string    `json:"id"`
	Since     time.Time `json:"since"`
	Heartbeat time.Time `json:"heartbeat"`
	ExpiresAt time.Time `json:"expiresAt"`
	Live      bool      `json:"live"`
}

// Counts counts runs by status.
type Counts struct {
	Queued  int `json:"queued"`
	Running int `json:"running"`
}

// Change is one committed state change in the change feed.
type Change struct {
	Cursor  uint64 `json:"cursor"`
	Session string `json:"session"`
	Seq     uint64 `json:"seq"`
	Type    string `json:"type"`
	Run     string `json:"run,omitempty"`
	// Delivery names the inbox item a delivery.* change is about.
	Delivery string `json:"delivery,omitempty"`
	// Ended says a run.updated change ended the run.
	Ended bool `json:"ended,omitempty"`
}

// InFeed reports whether a store event's change is in the change feed:
// what a follower acts on (a new session or run, a lease released, a
// cancel request, a run's end, an inbox change). A lease granted, a
// running run's phase changes, lease renewals and notification claims
// are not: they concern only the run's owner (the claim that granted the
// lease returns it) or the notifier, which read them from the session,
// and leaving them out spares every store a feed record per step of
// every run.
func InFeed(c Change) bool {
	switch c.Type {
	case belay.EventRunUpdated:
		return c.Ended
	case belay.EventRunLeased, belay.EventRunRenewed, belay.EventNotifyClaimed, belay.EventNotifySettled:
		return false
	}
	return belay.StoreEventType(c.Type)
}

// Default retention ages (G12).
const (
	DefaultKeepComplete = 14 * 24 * time.Hour
	DefaultKeepFailed   = 30 * 24 * time.Hour
	DefaultPruneGrace   = 24 * time.Hour
	// OwnerRecordKeep is how long the record of an owner that stopped
	// heartbeating stays listed (Owners, doctor) before Prune drops it.
	OwnerRecordKeep = 24 * time.Hour
)

// PrunePolicy says which terminal sessions Prune deletes. A session is
// pruned only when it has no queued or running run, no unsettled delivery
// (but the runtime's notices of run ends that no consumer took:
// belay.Delivery.HoldsRetention), no delivery settled within Grace, is not quarantined, and its last
// activity is older than the age for its worst run outcome: KeepFailed if
// any run failed or was stranded, else KeepComplete.
type PrunePolicy struct {
	KeepComplete time.Duration
	KeepFailed   time.Duration
	Grace        time.Duration
	// DryRun reports what would be pruned without deleting.
	DryRun bool
}

// WithDefaults fills zero fields with the defaults.
func (p PrunePolicy) WithDefaults() PrunePolicy {
	if p.KeepComplete <= 0 {
		p.KeepComplete = DefaultKeepComplete
	}
	if p.KeepFailed <= 0 {
		p.KeepFailed = DefaultKeepFailed
	}
	if p.Grace <= 0 {
		p.Grace = DefaultPruneGrace
	}
	return p
}

// AddressedLeaser is implemented by stores that keep addressed and held
// inbox items (Delivery.To, Delivery.AfterRun; MCP wake-ups): it is
// LeaseDeliveries for the items addressed to to, in every session, which
// LeaseDeliveries never takes. A store without it refuses such items.
type AddressedLeaser interface {
	LeaseDeliveriesTo(ctx context.Context, to, owner string, ttl time.Duration, max int) ([]belay.Delivery, error)
}

// RunLister is implemented by stores that select a page of runs across
// sessions without copying every run (GET /v1/runs): the first limit runs
// that match f and for which after holds, in the order less, and whether
// more such runs exist. less and after order runs by their ID, CreatedAt
// and UpdatedAt alone: a store may call them with a run that holds only
// those fields and its Session, Status and InputSeq.
type RunLister interface {
	ListRuns(ctx context.Context, f belay.RunFilter, less func(a, b *belay.Run) bool, after func(*belay.Run) bool, limit int) (page []belay.Run, more bool, err error)
}

// RunStatusCounter is implemented by stores that count runs by status
// without reading each run (the /metrics gauges).
type RunStatusCounter interface {
	RunStatusCounts(ctx context.Context) (map[belay.RunStatus]int, error)
}

// WriteBehind is implemented by stores whose every commit costs a round
// trip to a server (pgstore). A runner's buffered writes (its phase
// while it streams, the streamed text, usage, the turn's end: the writes
// a crash may take back, docs/journal-format.md) are queued there instead
// of committed one by one. The store commits a session's queue, in
// order, before that session's next write of any kind, and a short delay
// after the first write queued (pgstore: 20 ms) when no write comes.
//
// A queued write is checked against the run's lease when its queue is
// committed. A refused one (a stale epoch, a run that ended) is dropped
// with the rest of that lease's queue, and so is a queue whose commit
// failed. From then on every write of that lease, behind or not, fails
// with that error and nothing more of it is journaled, so nothing it
// writes follows the gap; the runner stops as after any failed write, and
// its retry takes a new lease and rereads the journal before it goes on
// (scanRunText): a dropped queue costs only what a crash would. Other
// writers of the session are not failed by it.
type WriteBehind interface {
	// UpdateRunBehind queues a buffered run update: a phase of a running
	// run (streaming, tool running, finishing) and its data, nothing else.
	UpdateRunBehind(session, id string, epoch uint64, u belay.RunUpdate) error
	// AppendBehind queues events that each name a run and its lease epoch,
	// and carry no idempotency ID.
	AppendBehind(session string, evs ...belay.Event) error
}

// JournalInspector is implemented by stores that keep a journal file per
// session (fsstore), for doctor.
type JournalInspector interface {
	JournalInfo(session string) (JournalInfo, error)
}

// JournalInfo is what a session's journal files say.
type JournalInfo struct {
	Path string `json:"path"`
	// Quarantined, QuarantineOffset and LastGoodSeq describe damage that
	// made the session read-only.
	Quarantined      bool   `json:"quarantined"`
	QuarantineOffset int64  `json:"quarantineOffset,omitempty"`
	LastGoodSeq      uint64 `json:"lastGoodSeq,omitempty"`
	// BrokenCopies are the .broken-<time> copies kept when torn tails were
	// cut, oldest first.
	BrokenCopies []string `json:"brokenCopies,omitempty"`
	// Missing and Empty say the journal file is gone or has no events:
	// the session's history is lost (restore the file, or delete the
	// session).
	Missing bool `json:"missing,omitempty"`
	Empty   bool `json:"empty,omitempty"`
	// OpenError is why the journal could not be read when that is not
	// damage to its bytes (a permission, an I/O error): a repair cannot
	// fix it.
	OpenError string `json:"openError,omitempty"`
	// WriteError is why the last write to the journal failed, when it did
	// and the journal is not yet healed (the next write retries).
	WriteError string `json:"writeError,omitempty"`
	// DiskFull says that failure was a full disk; FreeBytes is the free
	// space then (-1: unknown).
	DiskFull  bool  `json:"diskFull,omitempty"`
	FreeBytes int64 `json:"freeBytes,omitempty"`
}

// Repairable reports whether belay repair can rebuild the journal: its
// bytes are damaged after a good first event (LastGoodSeq 0 is a damaged
// first event, which a repair refuses), and it is there and readable.
func (j JournalInfo) Repairable() bool {
	return j.Quarantined && j.LastGoodSeq > 0 && !j.Missing && !j.Empty && j.OpenError == ""
}

// SessionDeleter is implemented by stores that delete one session on
// request (fsstore). DeleteSession refuses a session with a queued or
// running run, or (unless force) a delivery that holds retention
// (belay.Delivery.HoldsRetention), with
// belay.ErrActive; a session whose journal is damaged, missing or empty is
// always deleted.
type SessionDeleter interface {
	DeleteSession(ctx context.Context, id string, force bool) error
}
