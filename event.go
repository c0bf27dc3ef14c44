package belay

import "github.com/belayhq/belay/journal"

// Event is one journal record of a session: gap-free seq, time, type,
// optional idempotency id, optional run and epoch, and data.
type Event = journal.Event

// Durability is the class of an append: Sync or Buffered.
type Durability = journal.Durability

// Durability classes.
const (
	Sync     = journal.Sync
	Buffered = journal.Buffered
)
