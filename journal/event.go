package journal

import (
	"fmt"
	"unicode/utf8"

	"github.com/belayhq/belay"
)

// Event is one journal record: the event of the belay vocabulary, whose
// JSON form is the journal line (doc.go).
type Event = belay.Event

// Durability is the class of an append (belay.Sync or belay.Buffered).
type Durability = belay.Durability

// Durability classes, as named in package belay.
const (
	Sync     = belay.Sync
	Buffered = belay.Buffered
)

const (
	maxTypeLen = 64
	maxIDLen   = 256
)

// validate checks the caller-settable fields of an event to append; its
// data is checked when it is encoded.
func validate(e *Event) error {
	if n := len(e.Type); n == 0 || n > maxTypeLen {
		return fmt.Errorf("%w: type must be 1-%d characters, got %d", ErrInvalidEvent, maxTypeLen, n)
	}
	for i := 0; i < len(e.Type); i++ {
		c := e.Type[i]
		ok := c >= 'a' && c <= 'z' || i > 0 && (c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-')
		if !ok {
			return fmt.Errorf("%w: type %q must match [a-z][a-z0-9._-]*", ErrInvalidEvent, e.Type)
		}
	}
	if len(e.ID) > maxIDLen || !utf8.ValidString(e.ID) {
		return fmt.Errorf("%w: id must be at most %d bytes of UTF-8", ErrInvalidEvent, maxIDLen)
	}
	if len(e.Run) > maxIDLen || !utf8.ValidString(e.Run) {
		return fmt.Errorf("%w: run must be at most %d bytes of UTF-8", ErrInvalidEvent, maxIDLen)
	}
	return nil
}

// Validate checks the caller-settable fields of an event (type, id, run) as
// Append does, for stores that keep events elsewhere than in a journal.
func Validate(e *Event) error { return validate(e) }
