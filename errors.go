package belay

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
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
	// ErrTooLarge is an input bigger than belay can store (see
	// TooLargeError).
	ErrTooLarge = errors.New("belay: too large")
	// ErrDiskFull: a write failed because the filesystem or quota is full.
	// Nothing is lost; writes succeed again once space is free.
	ErrDiskFull = errors.New("belay: disk full")
	// ErrStoreUnreachable: the store (a database) cannot be reached, or
	// this node cannot prove it may write to it now. Nothing was written
	// unless the error says the outcome is unknown; the daemon stays up
	// and writes again once the store answers.
	ErrStoreUnreachable = errors.New("belay: store unreachable")
	// ErrStillRunning is a local wait's timeout: the run goes on (G8). It is
	// never a failure of the run.
	ErrStillRunning = errors.New("belay: still running")
)

// TooLargeError says an input is bigger than belay can store, and the
// limit. It matches ErrTooLarge.
type TooLargeError struct {
	What  string
	Size  int
	Limit int
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("%s is %d bytes; belay stores at most %d bytes (one journal record)", e.What, e.Size, e.Limit)
}

// Is matches ErrTooLarge.
func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge }

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

// DiskFullError is a write refused because the filesystem holding Path is
// full. errors.Is(err, ErrDiskFull) holds.
type DiskFullError struct {
	Path string
	// Free is how many bytes were free when the write failed (-1: unknown).
	Free int64
	Err  error
}

func (e *DiskFullError) Error() string {
	// The cause is named by its errno ("no space left on device"), not by
	// the chain of layers it went through.
	cause := e.Err
	var errno syscall.Errno
	if errors.As(e.Err, &errno) {
		cause = errno
	}
	if e.Free >= 0 {
		return fmt.Sprintf("belay: disk full (%v): %d bytes free on the filesystem of %s; free space and the write succeeds again, nothing acknowledged was lost", cause, e.Free, e.Path)
	}
	return fmt.Sprintf("belay: disk full (%v) on the filesystem of %s; free space and the write succeeds again, nothing acknowledged was lost", cause, e.Path)
}

// Unwrap returns the cause.
func (e *DiskFullError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrDiskFull) hold.
func (e *DiskFullError) Is(target error) bool { return target == ErrDiskFull }

// StaleEpochError is returned for a write, ack or completion that names an
// epoch older than the current one.
type StaleEpochError struct {
	Kind    string // "run" or "delivery"
	ID      string
	Got     uint64
	Current uint64
}

func (e *StaleEpochError) Error() string {
	if e.Got > e.Current {
		return fmt.Sprintf("belay: %s %s: epoch %d was never granted (current %d); use the epoch its lease returned", e.Kind, e.ID, e.Got, e.Current)
	}
	return fmt.Sprintf("belay: %s %s: epoch %d is stale (current %d); it was leased again since", e.Kind, e.ID, e.Got, e.Current)
}

// Is makes errors.Is(err, ErrStaleEpoch) hold.
func (e *StaleEpochError) Is(target error) bool { return target == ErrStaleEpoch }

// SideEffectsError refuses a retry that could repeat side effects (G9);
// errors.Is(err, ErrSideEffects) holds.
type SideEffectsError struct {
	Run   string
	Tools []string
}

// ErrSideEffects is the sentinel of SideEffectsError.
var ErrSideEffects = errors.New("belay: side effects settled")

func (e *SideEffectsError) Error() string {
	return fmt.Sprintf("run %s settled side-effecting tool call(s) %s; a retry could run them again", e.Run, strings.Join(e.Tools, ", "))
}

// Is makes errors.Is(err, ErrSideEffects) hold.
func (e *SideEffectsError) Is(target error) bool { return target == ErrSideEffects }
