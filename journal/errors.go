package journal

import (
	"errors"
	"fmt"
)

var (
	// ErrCorrupt marks a record that fails its checksum or does not decode.
	ErrCorrupt = errors.New("journal: corrupt record")
	// ErrQuarantined is matched by *QuarantineError.
	ErrQuarantined = errors.New("journal: quarantined")
	// ErrReadOnly is returned by appends after a write or sync failure, on a
	// quarantined journal, or on one opened read-only.
	ErrReadOnly = errors.New("journal: read-only")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("journal: closed")
	// ErrTooLarge is returned for an event whose line exceeds MaxRecordSize.
	ErrTooLarge = errors.New("journal: record too large")
	// ErrDuplicate is returned by AppendUnique for an id already appended.
	ErrDuplicate = errors.New("journal: duplicate id")
	// ErrInvalidEvent is returned for an event that cannot be appended.
	ErrInvalidEvent = errors.New("journal: invalid event")
)

// QuarantineError reports damage before the tail of a journal. The journal
// is read-only: events before Offset are readable, nothing is rewritten.
type QuarantineError struct {
	Path    string
	Offset  int64  // byte offset of the first damaged line
	LastSeq uint64 // last good seq before the damage
	Reason  string
}

func (e *QuarantineError) Error() string {
	return fmt.Sprintf("journal: %s quarantined: damage at offset %d after seq %d (%s); the journal is read-only and nothing was changed", e.Path, e.Offset, e.LastSeq, e.Reason)
}

// Is makes errors.Is(err, ErrQuarantined) and errors.Is(err, ErrReadOnly) hold.
func (e *QuarantineError) Is(target error) bool {
	return target == ErrQuarantined || target == ErrReadOnly
}

// CommitError is a commit that failed: its write or its sync returned an
// error (ENOSPC, EIO, a short write). The journal turns read-only; what
// was acknowledged before is intact. errors.Is(err, ErrReadOnly) holds, and
// the cause (a syscall.Errno such as ENOSPC) stays in the chain.
type CommitError struct {
	Path string
	Op   string // "write", "fdatasync", or "commit" (through a commit log)
	Err  error
}

func (e *CommitError) Error() string {
	return fmt.Sprintf("journal: %s %s: %v", e.Op, e.Path, e.Err)
}

// Unwrap returns the cause.
func (e *CommitError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrReadOnly) hold.
func (e *CommitError) Is(target error) bool { return target == ErrReadOnly }
