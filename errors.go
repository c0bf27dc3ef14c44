package belay

import (
	"errors"
	"fmt"
)

// Sentinel errors shared by stores and the runtime.
var (
	ErrNotFound      = errors.New("belay: not found")
	ErrExists        = errors.New("belay: already exists")
	ErrInvalid       = errors.New("belay: invalid argument")
	ErrStaleEpoch    = errors.New("belay: stale epoch")
	ErrLeaseHeld     = errors.New("belay: lease held")
	ErrNotLeased     = errors.New("belay: not leased")
	ErrLeaseExpired  = errors.New("belay: lease expired")
	ErrTerminal      = errors.New("belay: already finished")
	ErrActive        = errors.New("belay: active")
	ErrReadOnly      = errors.New("belay: read-only")
	ErrStoreLocked   = errors.New("belay: data dir in use")
	ErrStoreClosed   = errors.New("belay: store closed")
	ErrCorruptRecord = errors.New("belay: corrupt record")
	// ErrStillRunning is a local wait's timeout: the run goes on (G8). It is
	// never a failure of the run.
	ErrStillRunning = errors.New("belay: still running")
)

// ErrorClass classifies every failure a provider or the runtime reports.
type ErrorClass string

// Error classes (DESIGN section 6).
const (
	ClassAuth             ErrorClass = "auth"
	ClassChallenge        ErrorClass = "challenge"
	ClassRateLimited      ErrorClass = "rate_limited"
	ClassOverloaded       ErrorClass = "overloaded"
	ClassTransient        ErrorClass = "transient"
	ClassInvalidRequest   ErrorClass = "invalid_request"
	ClassContextOverflow  ErrorClass = "context_overflow"
	ClassPermissionDenied ErrorClass = "permission_denied"
	ClassTargetLost       ErrorClass = "target_lost"
	ClassUIDrift          ErrorClass = "ui_drift"
	ClassCancelled        ErrorClass = "cancelled"
	ClassTimeout          ErrorClass = "timeout"
	ClassInternal         ErrorClass = "internal"
	// ClassQuota: the account is out of quota or its billing is not set
	// up (OpenAI insufficient_quota). Not retryable: a person must act.
	ClassQuota ErrorClass = "quota"
)

// Retryable reports whether failures of this class are retried with backoff.
func (c ErrorClass) Retryable() bool {
	return c == ClassRateLimited || c == ClassOverloaded || c == ClassTransient
}

// StaleEpochError is returned for a write, ack or completion that names an
// epoch older than the current one.
type StaleEpochError struct {
	Kind    string // "run" or "delivery"
	ID      string
	Got     uint64
	Current uint64
}

func (e *StaleEpochError) Error() string {
	return fmt.Sprintf("belay: %s %s: epoch %d is stale (current %d); another worker holds it now", e.Kind, e.ID, e.Got, e.Current)
}

// Is makes errors.Is(err, ErrStaleEpoch) hold.
func (e *StaleEpochError) Is(target error) bool { return target == ErrStaleEpoch }
