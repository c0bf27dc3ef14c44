package doctor

import (
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/lock"
	"github.com/belayhq/belay/store"
)

// Input is everything Diagnose judges. The caller fills in what it knows:
// the daemon from its own state, the offline CLI from the files. Zero values
// mean "unknown" and make the diagnosis more cautious, never wrong.
//
// Input holds no event data and no run input. Of the domain values it holds,
// Diagnose never reads Session.Options, Session.Labels, Delivery.Data,
// Delivery.Result, Delivery.Key, Run.IdempotencyKey or RunError.Message, so
// callers may pass them as the store returns them.
type Input struct {
	// Now is the time of the diagnosis; Diagnose reads no clock.
	Now time.Time
	// Session is the session diagnosed.
	Session belay.Session
	// Runs are the session's runs, in creation order.
	Runs []belay.Run
	// Deliveries are the session's inbox items.
	Deliveries []belay.Delivery
	// Facts holds what is known about each run beyond belay.Run, by run id.
	Facts map[string]RunFacts
	// LastEventAt is the time of the session's last journal event, if
	// known; retention counts idle time from it (as store.Prune does).
	LastEventAt time.Time
	// Daemon is what the caller knows about the daemon and the data dir.
	Daemon Daemon
	// Offline says the report was made from the files, without a daemon.
	Offline bool
	// Journal holds what opening the session's journal found.
	Journal Journal
	// Retention is the prune policy in force; zero fields take the store
	// defaults (store.PrunePolicy.WithDefaults).
	Retention store.PrunePolicy
	// Thresholds tune the diagnosis; zero fields take the defaults.
	Thresholds Thresholds
}

// RunFacts is what the caller knows about a run beyond its record. Every
// field is optional.
type RunFacts struct {
	// LastActivity is the time of the run's last progress event (a delta,
	// a tool call, a phase change; not usage or keepalive noise, G8).
	LastActivity time.Time
	// InactivityDeadline is when the watchdog's tier for the current phase
	// fires if no progress arrives before it.
	InactivityDeadline time.Time
	// SideEffects names the side-effecting tool calls that settled in the
	// run's current turn (G9): names only, never arguments or results.
	SideEffects []string
	// RetryAt is the earliest time a resend may succeed, from the
	// provider's Retry-After or the runtime's backoff.
	RetryAt time.Time
}

// Daemon is what the caller knows about the daemon and the data-dir lock.
type Daemon struct {
	// Reachable says a daemon answered on the data dir's socket.
	Reachable bool
	// Incarnation is the answering daemon's incarnation id. A run lease
	// whose owner is neither this incarnation nor a worker of it (the
	// incarnation followed by "/" or ":") belongs to a previous incarnation,
	// which is dead (G6).
	Incarnation string
	// Lock is the inspection of the data-dir lock (lock.Inspect); nil when
	// not inspected.
	Lock *lock.Status
	// OwnerAlive holds verdicts on lease owners the caller could judge
	// itself (for example other nodes of a shared store): owner -> alive.
	// It takes precedence over the incarnation rule.
	OwnerAlive map[string]bool
}

// Journal is what opening the session's journal found (G10).
type Journal struct {
	// Path is the journal file, for the repair command.
	Path string
	// Quarantined says damage before the tail made the session read-only.
	Quarantined bool
	// QuarantineOffset is the byte offset of the first damaged line.
	QuarantineOffset int64
	// LastGoodSeq is the last good seq before the damage.
	LastGoodSeq uint64
	// BrokenCopy is the .broken-<time> copy kept when a torn tail was cut;
	// empty when no tail was cut.
	BrokenCopy string
	// Missing and Empty say the journal file is gone or holds no event:
	// the session's history is lost.
	Missing, Empty bool
	// WriteError is why the last write to the journal failed, while it is
	// not healed (the next write retries); not damage.
	WriteError string
	// DiskFull says that failure was a full disk, with FreeBytes free
	// then (-1: unknown).
	DiskFull  bool
	FreeBytes int64
	// OpenError is why the journal could not be read when that is not
	// damage to its bytes (a permission, an I/O error).
	OpenError string
}

// Thresholds tune the diagnosis.
type Thresholds struct {
	// Quiet is how long a running run may go without progress and still be
	// reported as watch; past it the run is reported as wait (never as
	// failed: a quiet run is judged by the watchdog, G8).
	Quiet time.Duration
	// RetryBackoff is how long after a failure in a retryable class a resend
	// is advised against, when RunFacts.RetryAt is not known.
	RetryBackoff time.Duration
	// MaxUnsettled caps Report.Unsettled.
	MaxUnsettled int
}

// Default thresholds.
const (
	DefaultQuiet        = 2 * time.Minute
	DefaultRetryBackoff = time.Minute
	DefaultMaxUnsettled = 20
)

func (t Thresholds) withDefaults() Thresholds {
	if t.Quiet <= 0 {
		t.Quiet = DefaultQuiet
	}
	if t.RetryBackoff <= 0 {
		t.RetryBackoff = DefaultRetryBackoff
	}
	if t.MaxUnsettled <= 0 {
		t.MaxUnsettled = DefaultMaxUnsettled
	}
	return t
}
