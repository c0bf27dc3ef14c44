package fsstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/journal"
)

// session is one loaded session: its journal and folded state.
type session struct {
	id    string
	dir   string
	store *Store
	j     *journal.Journal

	mu        sync.Mutex // guards st, problem, sinceSnap
	st        *state
	problem   error // non-nil: quarantined (read-only)
	sinceSnap int
	// lastRaw is the time (unix nanos) of the latest raw append, which
	// does not take mu.
	lastRaw atomic.Int64
}

// openSession opens a session's journal and folds its state.
func (s *Store) openSession(id string) (*session, error) {
	dir := filepath.Join(s.dir, SessionsName, id)
	ss := &session{id: id, dir: dir, store: s}
	j, err := journal.Open(dir, s.journalOptions(s.opts.ReadOnly))
	var q *journal.QuarantineError
	switch {
	case errors.As(err, &q):
		ss.problem = q
	case err != nil:
		return nil, fmt.Errorf("fsstore: open session %s: %w", id, err)
	}
	ss.j = j
	if err := ss.fold(); err != nil && ss.problem == nil {
		ss.problem = err
	}
	if ss.st.Session.ID != id && ss.problem == nil {
		ss.problem = fmt.Errorf("%w: journal of %s does not start with its session.created event", belay.ErrCorruptRecord, id)
	}
	if ss.st.Session.ID == "" {
		ss.st.Session.ID = id
	}
	return ss, nil
}

// fold rebuilds the state from the snapshot (if trusted) and the journal.
func (ss *session) fold() error {
	ss.st = newState()
	var after uint64
	if raw, seq, ok := ss.j.Snapshot(); ok {
		if st, err := decodeState(raw); err == nil {
			ss.st, after = st, seq
		}
	}
	for {
		evs, rerr := ss.j.Read(after, 4096)
		for i := range evs {
			if err := ss.st.apply(&evs[i]); err != nil {
				return err
			}
			after = evs[i].Seq
		}
		if rerr != nil {
			return rerr
		}
		if len(evs) == 0 {
			return nil
		}
	}
}

// snapshotSession returns a copy of the session with derived fields set.
func (ss *session) snapshotSession() belay.Session {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	sess := ss.st.Session
	sess.LastSeq = max(sess.LastSeq, ss.j.LastSeq())
	if t := ss.lastRaw.Load(); t > sess.UpdatedAt.UnixNano() {
		sess.UpdatedAt = unixNano(t)
	}
	switch {
	case ss.problem != nil:
		sess.State = belay.SessionQuarantined
		sess.Problem = ss.problem.Error()
	case ss.st.active():
		sess.State = belay.SessionActive
	default:
		sess.State = belay.SessionIdle
	}
	return sess
}

// appendRaw appends caller events (not store state changes).
func (ss *session) appendRaw(ctx context.Context, d belay.Durability, evs []belay.Event) ([]uint64, error) {
	seqs, err := ss.j.Append(ctx, d, evs...)
	if err != nil {
		return nil, wrapJournal(err)
	}
	ss.lastRaw.Store(ss.store.clock.Now().UnixNano())
	return seqs, nil
}

// checkFence refuses an event naming a run that is not in this session,
// is finished, or whose lease epoch is not the one named. ss.mu is held.
func (ss *session) checkFence(e *belay.Event) error {
	if e.Run == "" {
		return fmt.Errorf("%w: an event with an epoch must name its run", belay.ErrInvalid)
	}
	r, ok := ss.st.runs[e.Run]
	if !ok {
		return fmt.Errorf("%w: run %s in session %s", belay.ErrNotFound, e.Run, ss.id)
	}
	if e.Epoch == 0 {
		return nil // an unfenced note about a run
	}
	if r.Status.Terminal() {
		return fmt.Errorf("%w: run %s is %s", belay.ErrTerminal, r.ID, r.Status)
	}
	if r.Lease == nil || r.Epoch != e.Epoch {
		return &belay.StaleEpochError{Kind: "run", ID: r.ID, Got: e.Epoch, Current: r.Epoch}
	}
	return nil
}

// writable fails for a quarantined session or a read-only store. ss.mu is
// held.
func (ss *session) writable() error {
	if err := ss.store.writable(); err != nil {
		return err
	}
	if ss.problem != nil {
		return fmt.Errorf("%w: session %s is quarantined: %v", belay.ErrReadOnly, ss.id, ss.problem)
	}
	return nil
}

// commit journals one state change as a Sync event and applies it once it
// is durable. ss.mu is held.
func (ss *session) commit(ctx context.Context, e belay.Event) (belay.Event, error) {
	e.TS = ss.store.clock.Now().UTC()
	seqs, err := ss.j.Append(ctx, journal.Sync, e)
	if err != nil {
		return e, wrapJournal(err)
	}
	e.Seq = seqs[0]
	if err := ss.st.apply(&e); err != nil {
		// The event is durable but does not fold: stop writing to this
		// session rather than diverge from its journal.
		ss.problem = err
		return e, err
	}
	ss.sinceSnap++
	if ss.sinceSnap >= ss.store.opts.SnapshotEvery {
		ss.snapshotLocked()
	}
	return e, nil
}

// snapshotLocked writes a snapshot of the state. A failure is not an
// error: the journal is canonical and the next open rebuilds. ss.mu is held.
func (ss *session) snapshotLocked() {
	if ss.problem != nil || ss.store.opts.ReadOnly || ss.sinceSnap == 0 {
		return
	}
	raw, err := json.Marshal(ss.st)
	if err != nil {
		return
	}
	// Raw events after the last state change do not alter the state, so
	// the state is valid through the journal's current synced seq.
	if ss.j.WriteSnapshot(raw, ss.j.LastSeq()) == nil {
		ss.sinceSnap = 0
	}
}

// close snapshots and closes the journal.
func (ss *session) close() error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.snapshotLocked()
	return ss.j.Close()
}

func marshal(v any) (json.RawMessage, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("fsstore: encode event: %w", err)
	}
	return b, nil
}

func unixNano(n int64) time.Time { return time.Unix(0, n).UTC() }
