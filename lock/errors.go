package lock

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

var (
	// ErrHeld matches every [*HeldError]: the lock is held by a live owner.
	ErrHeld = errors.New("lock: held by another owner")
	// ErrLost means the lock file on disk is no longer ours: it was removed
	// or replaced by another owner (who judged ours stale).
	ErrLost = errors.New("lock: lost")
	// ErrNotHeld means the Lock does not hold the lock (never acquired,
	// released, or lost earlier).
	ErrNotHeld = errors.New("lock: not held")
	// ErrAlreadyHeld means TryAcquire or Acquire was called on a Lock that
	// already holds the lock.
	ErrAlreadyHeld = errors.New("lock: already held by this Lock")
	// ErrMalformed means an owner record does not decode.
	ErrMalformed = errors.New("lock: malformed owner record")
	// ErrFenced means the holder can no longer prove that it owns the
	// lock (see "Self-fencing" in the package doc) and must not write
	// again: every writer checks [Lock.Check] before a durable write.
	ErrFenced = errors.New("lock: fenced: ownership not proven")
)

// HeldError reports that a lock is held by a live owner (or by a file whose
// metadata is still in its grace period). errors.Is(err, ErrHeld) matches it.
type HeldError struct {
	Path    string
	Holder  *Owner        // nil when the file has no readable record yet
	Reason  Reason        // ReasonHeld, ReasonHung, ReasonMetadataInGrace or ReasonContended
	Stopped bool          // with ReasonHung: the holder is stopped by a signal
	Age     time.Duration // age of the lock file by its mtime
	Now     time.Time     // when the holder was judged
}

func (e *HeldError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "lock: %s is held", e.Path)
	h := e.Holder
	if h == nil {
		switch e.Reason {
		case ReasonContended:
			b.WriteString(" (contended: the holder changed on every attempt)")
		default:
			fmt.Fprintf(&b, " (lock file has no readable owner record yet, %s old)", roundDuration(e.Age))
		}
		return b.String()
	}
	if e.Reason == ReasonHung {
		fmt.Fprintf(&b, " by pid %d on host %s", h.PID, h.Host)
		if h.Purpose != "" {
			b.WriteString(" (" + h.Purpose + ")")
		}
		if e.Stopped {
			fmt.Fprintf(&b, ", which is alive but stopped (SIGSTOP or suspended) and has not heartbeaten for %s: resume it with `kill -CONT %d`, or end it with `kill -9 %d`", roundDuration(e.Now.Sub(h.HeartbeatAt)), h.PID, h.PID)
		} else {
			fmt.Fprintf(&b, ", which is alive but has not heartbeaten for %s (hung): end it with `kill %d` (`kill -9 %d` if it does not exit)", roundDuration(e.Now.Sub(h.HeartbeatAt)), h.PID, h.PID)
		}
		return b.String()
	}
	fmt.Fprintf(&b, " by pid %d on host %s (", h.PID, h.Host)
	if h.Purpose != "" {
		b.WriteString(h.Purpose + ", ")
	}
	fmt.Fprintf(&b, "since %s", h.AcquiredAt.UTC().Format(time.RFC3339))
	if !h.HeartbeatAt.IsZero() {
		fmt.Fprintf(&b, ", heartbeat %s ago", roundDuration(e.Now.Sub(h.HeartbeatAt)))
	}
	b.WriteString(")")
	return b.String()
}

// Is makes errors.Is(err, ErrHeld) true.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// roundDuration keeps human durations short: 3s, 450ms.
func roundDuration(d time.Duration) time.Duration {
	switch {
	case d >= 10*time.Second:
		return d.Round(time.Second)
	case d >= time.Second:
		return d.Round(100 * time.Millisecond)
	default:
		return d.Round(time.Millisecond)
	}
}
