package journal

import (
	"sync"

	"github.com/belayhq/belay/internal/vfs"
)

// Syncer makes data written to a file durable.
type Syncer interface {
	// Sync returns once everything written to f before the call is durable.
	Sync(f vfs.File) error
}

// Log is a store-wide commit log that journals commit through
// (Options.Log); package commitlog implements it.
type Log interface {
	// Commit returns once data, just written at off to the journal's file,
	// is durable in the log.
	Commit(name string, off int64, data []byte) error
	// Cut returns once it is durable that the journal's file is being cut
	// back to size.
	Cut(name string, size int64) error
}

// GroupSyncer makes every waiting journal's writes durable with one
// filesystem-wide sync (syncfs(2) on Linux) instead of one fdatasync per
// journal: when many sessions commit at once, one sync serves them all.
// Callers that arrive while a sync is running wait for the next one, which
// covers their writes; a failed sync fails every caller it was to cover.
//
// The cost of one sync is the dirty data of the whole filesystem: on a
// filesystem shared with heavy writers, per-file fdatasync (the default)
// keeps belay's latency independent of theirs.
type GroupSyncer struct {
	syncfs func() error

	mu      sync.Mutex
	cond    *sync.Cond
	started uint64 // rounds started
	done    uint64 // rounds finished
	running bool
	errs    map[uint64]error // failed rounds, kept until their callers read them
	waiting map[uint64]int   // callers per round
}

// NewGroupSyncer returns a GroupSyncer calling syncfs for each round.
func NewGroupSyncer(syncfs func() error) *GroupSyncer {
	g := &GroupSyncer{syncfs: syncfs, errs: map[uint64]error{}, waiting: map[uint64]int{}}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// Sync waits for a filesystem sync that started after the call.
func (g *GroupSyncer) Sync(vfs.File) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	// The round that covers this caller is the first one to start from now.
	mine := g.started + 1
	g.waiting[mine]++
	for g.done < mine {
		if !g.running {
			g.running = true
			g.started++
			round := g.started
			g.mu.Unlock()
			err := g.syncfs()
			g.mu.Lock()
			g.running = false
			g.done = round
			if err != nil {
				g.errs[round] = err
			}
			g.cond.Broadcast()
			continue
		}
		g.cond.Wait()
	}
	err := g.errs[mine]
	if g.waiting[mine]--; g.waiting[mine] == 0 {
		delete(g.waiting, mine)
		delete(g.errs, mine)
	}
	return err
}
