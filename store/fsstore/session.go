package fsstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/journal"
)

// storeIDPrefix starts the idempotency ids of the store's own events;
// callers may not use it, so their ids never collide with the store's.
const storeIDPrefix = "belay/"

// session is one loaded session: its folded state, and its journal while
// it is open (see handle.go).
type session struct {
	id    string
	dir   string
	store *Store

	jmu     sync.Mutex // guards j, refs, retired and lastUse
	j       *journal.Journal
	refs    int
	lastUse time.Time
	// retired are journals a heal replaced while they were pinned, with
	// their pin counts; each is closed when its last pin is released.
	retired map[*journal.Journal]int

	mu        sync.Mutex // guards st, sinceSnap and pending
	st        *state
	sinceSnap int
	// pending are buffered state changes (belay.RunUpdate.Buffered),
	// appended but not yet folded: st is always the fold of the durable
	// journal, so they are folded once their journal says they are
	// synced, in seq order, and dropped if their commit failed.
	pending []pendingChange
	// npending mirrors len(pending) for the journal's commit hook, which
	// runs without mu; folding is set while a fold of pending is queued.
	npending atomic.Int32
	folding  atomic.Bool

	// problem, once set, makes the session read-only: a damaged journal or
	// an event that does not fold. It is read without mu.
	problem atomic.Pointer[error]
	// pruned is set when the session was deleted under a caller.
	pruned atomic.Bool
	// lastSeq is the journal's last synced seq as of its last use.
	lastSeq atomic.Uint64
	// lastEvent is the time (unix nanos) of the newest event, raw events
	// included; the folded state only tracks the store's own events.
	lastEvent atomic.Int64
	// lastTS is the time (unix nanos) of the journal's last event as of
	// its last use, as a fold finds it: what the store index records
	// (lastEvent may be later: an event time taken before another's).
	lastTS atomic.Int64
	// lastWriteErr is why the last write failed, until one succeeds.
	lastWriteErr atomic.Pointer[error]
	// unclean is set when Close found the journal failed or could not
	// close it: the store index leaves the session out.
	unclean atomic.Bool
}

// openSession loads a session: it opens its journal (recovering it), folds
// the state, and closes the journal again.
func (s *Store) openSession(id string) (*session, error) {
	ss := &session{id: id, dir: filepath.Join(s.dir, SessionsName, id), store: s}
	j, err := ss.acquire()
	if err != nil {
		return nil, err
	}
	defer func() {
		ss.release(j)
		ss.evict()
	}()
	if err := ss.fold(j); err != nil {
		ss.setProblem(err)
	}
	if ss.st.Session.ID != id {
		if j.LastSeq() == 0 {
			ss.setProblem(fmt.Errorf("%w: the journal of %s is empty: its history is gone", belay.ErrCorruptRecord, id))
		} else {
			ss.setProblem(fmt.Errorf("%w: journal of %s does not start with its session.created event", belay.ErrCorruptRecord, id))
		}
		ss.st.Session.ID = id
	}
	if t := j.LastTS(); !t.IsZero() {
		ss.lastEvent.Store(t.UnixNano())
	}
	return ss, nil
}

// setProblem records the first reason the session is read-only. Once the
// store is open, the store index is dropped too: an index written before
// would bring the session back without it after a kill.
func (ss *session) setProblem(err error) {
	if ss.problem.CompareAndSwap(nil, &err) && ss.store.ready.Load() {
		ss.store.invalidateIndex()
	}
}

// fault returns why the session cannot be written, or nil: a recorded
// problem, or an open journal that failed (a write or fsync error, or
// damage found by a read).
func (ss *session) fault() error {
	if p := ss.problem.Load(); p != nil {
		return *p
	}
	ss.jmu.Lock()
	j := ss.j
	ss.jmu.Unlock()
	if j == nil || ss.store.opts.ReadOnly {
		return nil
	}
	if err := j.Err(); err != nil && !errors.Is(err, journal.ErrClosed) && j.Failed() == nil {
		return err
	}
	return nil
}

// writeFailure returns why the last write to the session failed (a full
// disk, an I/O error), or nil once a write succeeded since. Such a failure
// is healed by the next acquire, not a quarantine.
func (ss *session) writeFailure() error {
	if p := ss.lastWriteErr.Load(); p != nil {
		return *p
	}
	return nil
}

// noteWrite records the outcome of a write for writeFailure.
func (ss *session) noteWrite(err error) {
	var ce *journal.CommitError
	switch {
	case err == nil:
		if ss.lastWriteErr.Load() != nil {
			ss.lastWriteErr.Store(nil)
		}
	case errors.Is(err, belay.ErrDiskFull), errors.As(err, &ce):
		ss.lastWriteErr.Store(&err)
	}
}

// fold rebuilds the state from the snapshot (if trusted) and the journal.
func (ss *session) fold(j *journal.Journal) error {
	ss.st = newState()
	var after uint64
	if raw, seq, ok := j.Snapshot(); ok {
		if st, err := decodeState(raw); err == nil {
			ss.st, after = st, seq
		}
	}
	for {
		evs, rerr := j.Read(after, 4096)
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
	sess := ss.st.Session
	active := ss.st.active()
	ss.mu.Unlock()
	sess.LastSeq = ss.lastSeqNow()
	if t := ss.lastEvent.Load(); t > 0 && t > sess.UpdatedAt.UnixNano() { // 0: no event read (a journal that could not be opened)
		sess.UpdatedAt = unixNano(t)
	}
	switch err := ss.fault(); {
	case err != nil:
		sess.State = belay.SessionQuarantined
		sess.Problem = err.Error()
	case ss.writeFailure() != nil:
		// Not damage: the last write failed and the next one retries.
		sess.Problem = ss.writeFailure().Error()
		sess.State = belay.SessionIdle
		if active {
			sess.State = belay.SessionActive
		}
	case active:
		sess.State = belay.SessionActive
	default:
		sess.State = belay.SessionIdle
	}
	return sess
}

// appendRaw appends caller events (not store state changes).
func (ss *session) appendRaw(ctx context.Context, d belay.Durability, evs []belay.Event) ([]uint64, error) {
	if err := ss.writable(); err != nil {
		return nil, err
	}
	j, err := ss.acquire()
	if err != nil {
		return nil, ss.wrap(err)
	}
	defer ss.release(j)
	seqs, err := j.Append(ctx, d, evs...)
	if err != nil {
		return nil, ss.wrap(err)
	}
	if d == belay.Sync {
		ss.noteWrite(nil)
	}
	// The journal stamps events without a time with the store's clock; one
	// that carries a later time of its own is the newest.
	newest := ss.store.clock.Now()
	for i := range evs {
		if evs[i].TS.After(newest) {
			newest = evs[i].TS
		}
	}
	ss.touch(newest)
	return seqs, nil
}

func (ss *session) touch(t time.Time) {
	n := t.UnixNano()
	for {
		old := ss.lastEvent.Load()
		if n <= old || ss.lastEvent.CompareAndSwap(old, n) {
			return
		}
	}
}

// checkFence refuses an event naming a run that is not in this session,
// is finished, or whose lease epoch is not the one named. ss.mu is held.
func (ss *session) checkFence(e *belay.Event) error {
	if e.Run == "" {
		return fmt.Errorf("%w: an event with an epoch must name its run", belay.ErrInvalid)
	}
	r, ok := ss.st.runs[e.Run]
	if !ok {
		i := ss.st.done.find(e.Run)
		switch {
		case i < 0:
			return fmt.Errorf("%w: run %s in session %s", belay.ErrNotFound, e.Run, ss.id)
		case e.Epoch == 0:
			return nil // an unfenced note about a run
		}
		return fmt.Errorf("%w: run %s is %s", belay.ErrTerminal, e.Run, ss.st.done.status(i))
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

// writable fails for a faulted session or a store that cannot write.
func (ss *session) writable() error {
	if err := ss.store.writable(); err != nil {
		return err
	}
	if ss.pruned.Load() {
		return fmt.Errorf("%w: session %s was pruned", belay.ErrNotFound, ss.id)
	}
	if err := ss.fault(); err != nil {
		return fmt.Errorf("%w: session %s is quarantined: %v", belay.ErrReadOnly, ss.id, err)
	}
	return nil
}

// wrap maps a journal error of this session onto belay's sentinels.
func (ss *session) wrap(err error) error {
	if errors.Is(err, journal.ErrClosed) && ss.pruned.Load() {
		return fmt.Errorf("%w: session %s was pruned", belay.ErrNotFound, ss.id)
	}
	err = ss.store.classify(err)
	ss.noteWrite(err)
	return err
}

// pendingChange is a buffered state change and the journal it went to,
// with its payload hint (applyWith).
type pendingChange struct {
	j    *journal.Journal
	e    belay.Event
	hint any
}

// committed is the journal's commit hook: buffered state changes may have
// become durable; fold them (without blocking the committer).
func (ss *session) committed() {
	if ss.npending.Load() == 0 || !ss.folding.CompareAndSwap(false, true) {
		return
	}
	ss.store.folds.Add(1)
	go func() {
		defer ss.store.folds.Done()
		ss.mu.Lock()
		defer ss.mu.Unlock()
		ss.folding.Store(false)
		ss.foldPendingLocked()
	}()
}

// foldPendingLocked folds the buffered state changes that are durable, in
// order, and drops those whose commit failed (their journal failed or
// closed without them): the state stays the fold of what is on disk, and
// the seqs they had are taken by the next appends to the healed journal.
// ss.mu is held.
func (ss *session) foldPendingLocked() {
	n := 0
	var done []belay.Event
	for _, p := range ss.pending {
		if synced, never := p.j.Durable(p.e.Seq); !synced {
			if never {
				// Failed or closed without it: nothing after it was
				// written either (a failed commit fails everything queued
				// behind it).
				n = len(ss.pending)
			}
			break // else still to be committed
		}
		n++
		e := p.e
		if err := ss.st.applyWith(&e, p.hint); err != nil {
			// Durable but does not fold: stop writing, as commitAll does.
			ss.setProblem(err)
			n = len(ss.pending)
			break
		}
		done = append(done, e)
	}
	if n == 0 {
		return
	}
	clear(ss.pending[:n])
	ss.pending = ss.pending[n:]
	if len(ss.pending) == 0 {
		ss.pending = nil
	}
	ss.npending.Store(int32(len(ss.pending)))
	if len(done) > 0 {
		ss.store.afterCommit(ss, done)
		ss.sinceSnap += len(done)
	}
}

// commitBuffered journals state changes as one Buffered append: they are
// folded once durable (foldPendingLocked), by the next synced commit of
// the session at the latest. The caller checked that a crash may take
// them back (belay.RunUpdate.CheckBuffered). hints are the events' payload
// hints (applyWith), by index; nil for none. ss.mu is held.
func (ss *session) commitBuffered(ctx context.Context, hints []any, evs ...belay.Event) error {
	now := ss.store.clock.Now().UTC()
	for i := range evs {
		evs[i].TS = now
	}
	j, err := ss.acquire()
	if err != nil {
		return ss.wrap(err)
	}
	defer ss.release(j)
	// Drop what a failed journal lost before appending to its successor.
	ss.foldPendingLocked()
	seqs, err := j.AppendUnique(ctx, journal.Buffered, evs...)
	if err != nil {
		return ss.wrap(err)
	}
	ss.touch(now)
	for i := range evs {
		evs[i].Seq = seqs[i]
		ss.pending = append(ss.pending, pendingChange{j: j, e: evs[i], hint: hintAt(hints, i)})
	}
	ss.npending.Store(int32(len(ss.pending)))
	return nil
}

// commit journals one state change as a Sync event and applies it once it
// is durable. ss.mu is held.
func (ss *session) commit(ctx context.Context, e belay.Event) (belay.Event, error) {
	return ss.commitHinted(ctx, nil, e)
}

// commitHinted is commit with the event's payload hint (applyWith).
func (ss *session) commitHinted(ctx context.Context, hint any, e belay.Event) (belay.Event, error) {
	var hints []any
	if hint != nil {
		hints = []any{hint}
	}
	evs, err := ss.commitAll(ctx, hints, e)
	if len(evs) == 1 {
		e = evs[0]
	}
	return e, err
}

// hintAt returns hints[i], nil past its end.
func hintAt(hints []any, i int) any {
	if i < len(hints) {
		return hints[i]
	}
	return nil
}

// commitAll journals state changes in one Sync append, so that they are
// durable together (one fdatasync), and applies them. hints are the
// events' payload hints (applyWith), by index; nil for none. ss.mu is
// held.
func (ss *session) commitAll(ctx context.Context, hints []any, evs ...belay.Event) ([]belay.Event, error) {
	now := ss.store.clock.Now().UTC()
	for i := range evs {
		evs[i].TS = now
	}
	j, err := ss.acquire()
	if err != nil {
		return evs, ss.wrap(err)
	}
	defer ss.release(j)
	// Drop what a failed journal lost before appending to its successor.
	ss.foldPendingLocked()
	seqs, err := j.AppendUnique(ctx, journal.Sync, evs...)
	if err != nil {
		return evs, ss.wrap(err)
	}
	ss.noteWrite(nil)
	ss.touch(now)
	// The buffered changes before these are durable with them: fold them
	// first, in seq order.
	ss.foldPendingLocked()
	for i := range evs {
		evs[i].Seq = seqs[i]
		if err := ss.st.applyWith(&evs[i], hintAt(hints, i)); err != nil {
			// The event is durable but does not fold: stop writing to this
			// session rather than diverge from its journal.
			ss.setProblem(err)
			return evs, err
		}
	}
	ss.store.afterCommit(ss, evs)
	ss.sinceSnap += len(evs)
	if ss.sinceSnap >= ss.store.opts.SnapshotEvery {
		ss.snapshotLocked()
	}
	return evs, nil
}

// snapshotLocked writes a snapshot of the state if its journal is open. A
// failure is not an error: the journal is canonical and the next open
// rebuilds. ss.mu is held.
func (ss *session) snapshotLocked() {
	ss.foldPendingLocked()
	if ss.sinceSnap == 0 || ss.writable() != nil {
		return
	}
	ss.jmu.Lock()
	j := ss.j
	if j != nil {
		ss.refs++
	}
	ss.jmu.Unlock()
	if j == nil {
		return
	}
	defer ss.release(j)
	raw, err := ss.st.MarshalJSON() // not json.Marshal: it would compact it again
	if err != nil {
		return
	}
	// The state folds only the store's own events, so it is the fold of the
	// journal through any seq up to the next state change: the current
	// synced seq will do, unless a buffered change not folded yet is
	// synced by now: then the seq just before it.
	seq := j.LastSeq()
	if len(ss.pending) > 0 && ss.pending[0].e.Seq <= seq {
		seq = ss.pending[0].e.Seq - 1
	}
	if j.WriteSnapshot(raw, seq) == nil {
		ss.sinceSnap = 0
	}
}

// lastSeqNow returns the journal's last synced seq.
func (ss *session) lastSeqNow() uint64 {
	ss.jmu.Lock()
	defer ss.jmu.Unlock()
	if ss.j != nil {
		return ss.j.LastSeq()
	}
	return ss.lastSeq.Load()
}

// close snapshots and closes the journal, whatever pins it.
func (ss *session) close() error {
	ss.mu.Lock()
	ss.snapshotLocked()
	ss.mu.Unlock()
	ss.jmu.Lock()
	defer ss.jmu.Unlock()
	if ss.j == nil {
		return nil
	}
	healthy := ss.j.Err() == nil
	// A journal whose commit failed (before or while closing) is cut back
	// to what was acknowledged by its Close, so that an append reported as
	// failed does not come back at the next open.
	err := ss.j.Close()
	if err != nil || !healthy || ss.j.Failed() != nil {
		// Its file may hold bytes its state does not: not for the index.
		ss.unclean.Store(true)
	}
	ss.noteLast(ss.j)
	ss.j = nil
	return err
}

// noteLast records the journal's last seq and last event time, as of now.
func (ss *session) noteLast(j *journal.Journal) {
	ss.lastSeq.Store(j.LastSeq())
	ss.lastTS.Store(j.LastTS().UnixNano())
}

func marshal(v any) (json.RawMessage, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("fsstore: encode event: %w", err)
	}
	return b, nil
}

// checkJSON refuses caller JSON that is present but invalid.
func checkJSON(what string, raw json.RawMessage) error {
	if len(raw) > 0 && !json.Valid(raw) {
		return fmt.Errorf("%w: %s is not valid JSON", belay.ErrInvalid, what)
	}
	return nil
}

// checkCallerIDs refuses caller events that use the store's id namespace.
func checkCallerIDs(evs []belay.Event) error {
	for i := range evs {
		if strings.HasPrefix(evs[i].ID, storeIDPrefix) {
			return fmt.Errorf("%w: event ids starting with %q are the store's", belay.ErrInvalid, storeIDPrefix)
		}
	}
	return nil
}

func unixNano(n int64) time.Time { return time.Unix(0, n).UTC() }
