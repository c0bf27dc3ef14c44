package journal

import (
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"
)

// Event is one journal record.
type Event struct {
	Seq   uint64          `json:"seq"`
	TS    time.Time       `json:"ts"`
	Type  string          `json:"type"`
	ID    string          `json:"id,omitempty"`
	Run   string          `json:"run,omitempty"`
	Epoch uint64          `json:"epoch,omitempty"`
	Data  json.RawMessage `json:"data"`
}

// Durability is the class of an append.
type Durability uint8

const (
	// Sync appends return only after fdatasync covered them.
	Sync Durability = iota
	// Buffered appends return at once; they are written and synced with the
	// next commit, within Options.BufferedDelay. A crash may lose them back
	// to the last sync, never reorder or corrupt them.
	Buffered
)

func (d Durability) String() string {
	if d == Buffered {
		return "buffered"
	}
	return "sync"
}

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
