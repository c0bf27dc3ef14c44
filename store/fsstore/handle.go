package fsstore

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/belayhq/belay/internal/vfs"
	"github.com/belayhq/belay/journal"
)

// DefaultMaxOpen is how many session journals stay open when idle.
const DefaultMaxOpen = 512

// Journals are opened on demand and closed when idle, so that a store can
// hold far more sessions than a process may have open files, and an idle
// session costs only its folded state. acquire opens (or reuses) a
// session's journal and pins it; release unpins it. Pinned journals are
// never closed; beyond MaxOpen, the least recently used unpinned ones are
// (after a snapshot, so that reopening them is cheap).

// acquire returns the session's journal, opening it if needed, pinned
// until release.
func (ss *session) acquire() (*journal.Journal, error) {
	ss.jmu.Lock()
	if ss.j != nil && !ss.store.opts.ReadOnly && ss.j.Failed() != nil {
		// A commit failed (a full disk, an I/O error): the journal is
		// read-only until reopened. Heal it now: cut it back to what was
		// acknowledged and open it again. Whoever still reads the old one
		// goes on reading what was acknowledged; it is closed when the
		// last of them lets go. If the cause is still there, the next
		// write fails the same way and the next acquire tries again;
		// nothing waits for a restart.
		old := ss.j
		if err := old.Rollback(); err != nil {
			ss.jmu.Unlock()
			return nil, fmt.Errorf("fsstore: heal session %s: %w", ss.id, err)
		}
		if ss.refs > 0 {
			if ss.retired == nil {
				ss.retired = map[*journal.Journal]int{}
			}
			ss.retired[old] = ss.refs
		} else {
			_ = old.Close() // failed: nothing left to commit
		}
		ss.j, ss.refs = nil, 0
	}
	if ss.j != nil {
		ss.refs++
		j := ss.j
		ss.jmu.Unlock()
		return j, nil
	}
	if ss.pruned.Load() {
		ss.jmu.Unlock()
		return nil, journal.ErrClosed
	}
	jo := ss.store.journalOptions(ss.store.opts.ReadOnly)
	jo.MustExist = true // a deleted journal is missing, never silently empty
	jo.LogName = ss.id
	jo.OnCommit = ss.committed
	jo.OnQuarantine = ss.store.invalidateIndex
	j, err := journal.Open(ss.dir, jo)
	var q *journal.QuarantineError
	switch {
	case errors.As(err, &q):
		// Damage found on reopen: the journal still serves what precedes it.
		ss.setProblem(q)
	case err != nil:
		ss.jmu.Unlock()
		err = fmt.Errorf("fsstore: open session %s: %w", ss.id, err)
		if !transient(err) {
			ss.setProblem(err)
		}
		return nil, err
	}
	ss.j = j
	ss.refs++
	ss.jmu.Unlock()
	ss.store.opened(ss)
	return j, nil
}

// release unpins j, which acquire returned.
func (ss *session) release(j *journal.Journal) {
	ss.jmu.Lock()
	defer ss.jmu.Unlock()
	if j != ss.j {
		// A journal replaced by a heal: close it after its last reader.
		if n := ss.retired[j] - 1; n > 0 {
			ss.retired[j] = n
		} else {
			delete(ss.retired, j)
			_ = j.Close() // failed: nothing left to commit
		}
		return
	}
	ss.refs--
	ss.lastUse = time.Now()
	ss.noteLast(ss.j)
}

// closeIdle closes the journal if nothing pins it. It reports whether the
// journal is closed afterwards.
func (ss *session) closeIdle() bool {
	ss.jmu.Lock()
	defer ss.jmu.Unlock()
	if ss.j == nil {
		return true
	}
	if ss.refs > 0 {
		return false
	}
	// A journal that failed otherwise than by a commit (fenced, damaged)
	// stays open: its failure must stay visible until the store is
	// reopened. One whose commit failed is cut back and closed; the next
	// acquire opens it again.
	if err := ss.j.Err(); err != nil && !ss.store.opts.ReadOnly && ss.j.Failed() == nil {
		return false
	}
	if err := ss.j.Abandon(); err != nil {
		// Closed all the same. Its cut failed (or its close did): the
		// next open judges its tail as usual, and the session stays out
		// of the store index; the failure is the session's last write
		// failure until a write succeeds.
		ss.unclean.Store(true)
		ss.noteWrite(&journal.CommitError{Path: ss.j.Path(), Op: "close", Err: err})
	}
	// After Abandon: its Close commits what was queued.
	ss.noteLast(ss.j)
	ss.j = nil
	ss.store.idx.closed.Add(1) // the live index may take it now
	return true
}

// opened records an open journal and closes idle ones beyond the cap.
func (s *Store) opened(ss *session) {
	s.openMu.Lock()
	s.open[ss] = struct{}{}
	if len(s.open) <= s.opts.MaxOpen {
		s.openMu.Unlock()
		return
	}
	// Evict the least recently used idle journals, down to the cap.
	type cand struct {
		ss  *session
		use time.Time
	}
	var cands []cand
	for o := range s.open {
		if o == ss {
			continue
		}
		o.jmu.Lock()
		if o.refs == 0 {
			cands = append(cands, cand{o, o.lastUse})
		}
		o.jmu.Unlock()
	}
	excess := len(s.open) - s.opts.MaxOpen
	s.openMu.Unlock()
	for excess > 0 && len(cands) > 0 {
		oldest := 0
		for i := range cands {
			if cands[i].use.Before(cands[oldest].use) {
				oldest = i
			}
		}
		c := cands[oldest]
		cands = append(cands[:oldest], cands[oldest+1:]...)
		if c.ss.evict() {
			excess--
		}
	}
}

// evict snapshots and closes an idle journal.
func (ss *session) evict() bool {
	ss.mu.Lock()
	ss.snapshotLocked()
	ss.mu.Unlock()
	if !ss.closeIdle() {
		return false
	}
	ss.store.openMu.Lock()
	delete(ss.store.open, ss)
	ss.store.openMu.Unlock()
	return true
}

// openJournals returns how many session journals are open.
func (s *Store) openJournals() int {
	s.openMu.Lock()
	defer s.openMu.Unlock()
	return len(s.open)
}

// transient reports whether a failure to open a journal passes by itself
// (a full disk, no file descriptors left), so that the session is not
// marked damaged for it: the next use tries again.
func transient(err error) bool {
	return vfs.IsNoSpace(err) || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}
