package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/store"
)

// Write-behind (store.WriteBehind). A runner's buffered writes (its phase
// while it streams, the streamed text, usage, the turn's end) are the
// writes a crash may take back (docs/journal-format.md). Each alone still
// cost a place in a transaction: the session's lock, its events, the
// session's counter, and for a phase the run's row. Instead they wait in
// a queue per session, and the whole queue is committed as one write: the
// run's row is updated once, to the last phase queued.
//
// A queue is committed with the session's next write of any kind, in its
// transaction (shared calls carryBehind; withSession and SubmitBatch
// commit it just before, as a write of its own), or
// behindDelay after its first write when no other write comes, or at once
// when it holds maxBehindOps writes. Its writes are checked against the
// run's lease when it commits; the refusal, or the failure of the commit,
// is kept for the run's lease (behindErrs) and returned by that lease's
// next write (see store.WriteBehind).

const (
	// behindDelay bounds how long a queued write waits for another write
	// to the session: how late a watcher sees streamed text at most.
	behindDelay = 20 * time.Millisecond
	// maxBehindOps is the longest queue: a longer one is committed at once.
	maxBehindOps = 256
	// maxBehindErrs bounds the errors kept for leases that did not write
	// again; a full map starts over.
	maxBehindErrs = 1 << 16
)

// behindOp is one queued write of a run under the lease of epoch: a
// phase (an update) or events (an append; an update's run.updated too).
type behindOp struct {
	run   string
	epoch uint64
	phase belay.RunPhase
	evs   []belay.Event
}

// behindQueue is a session's queued writes.
type behindQueue struct {
	ops   []behindOp
	timer *time.Timer
	// flushing is closed when the commit in flight ends.
	flushing chan struct{}
}

// behindKey is a run's lease.
type behindKey struct {
	run   string
	epoch uint64
}

// leaseErr is the error a lease's queued writes met: it stays until the
// run is leased again or ends on this node (every later write of the
// lease fails with it, and its later queued writes are dropped), so that
// what the lease journals after a lost queued write never follows the gap.
type leaseErr struct {
	epoch uint64
	err   error
}

// UpdateRunBehind queues a buffered phase change of a running run.
func (s *Store) UpdateRunBehind(session, id string, epoch uint64, u belay.RunUpdate) error {
	if err := checkSession(session); err != nil {
		return err
	}
	if err := checkRun(id); err != nil {
		return err
	}
	if epoch == 0 {
		return fmt.Errorf("%w: a write-behind update needs its lease's epoch", belay.ErrInvalid)
	}
	if u.Phase.Status() != belay.RunRunning || u.Attempt != 0 || u.Error != nil || u.Reason != "" || u.Ref != nil || u.Deliver != nil {
		return fmt.Errorf("%w: a write-behind update sets a running phase and its data, nothing else", belay.ErrInvalid)
	}
	if err := checkJSON("run update data", u.Data); err != nil {
		return err
	}
	data, err := marshal(belay.RunUpdatedData{Phase: u.Phase, Data: u.Data})
	if err != nil {
		return err
	}
	e := belay.Event{Type: belay.EventRunUpdated, Run: id, Epoch: epoch, Data: data}
	if err := checkSize(&e); err != nil {
		return err
	}
	return s.enqueueBehind(session, behindOp{run: id, epoch: epoch, phase: u.Phase, evs: []belay.Event{e}})
}

// AppendBehind queues events of one run's lease.
func (s *Store) AppendBehind(session string, evs ...belay.Event) error {
	if err := checkSession(session); err != nil {
		return err
	}
	if len(evs) == 0 {
		return nil
	}
	run, epoch := evs[0].Run, evs[0].Epoch
	for i := range evs {
		e := &evs[i]
		if e.Run == "" || e.Epoch == 0 || e.Run != run || e.Epoch != epoch {
			return fmt.Errorf("%w: write-behind events name one run and its lease epoch", belay.ErrInvalid)
		}
		if e.ID != "" {
			return fmt.Errorf("%w: a write-behind event has no idempotency id", belay.ErrInvalid)
		}
		if err := checkCallerEvent(e); err != nil {
			return err
		}
		if err := checkSize(e); err != nil {
			return err
		}
	}
	if err := checkRun(run); err != nil {
		return err
	}
	return s.enqueueBehind(session, behindOp{run: run, epoch: epoch, evs: slices.Clone(evs)})
}

// checkSize refuses an event larger than a record may be.
func checkSize(e *belay.Event) error {
	if len(e.Data)+len(e.Type)+len(e.ID)+len(e.Run)+128 > belay.MaxRecordSize {
		return fmt.Errorf("%w: event of %d bytes exceeds %d", belay.ErrInvalid, len(e.Data), belay.MaxRecordSize)
	}
	return nil
}

// enqueueBehind queues op in its session's queue, unless an earlier
// write of its lease was refused or lost: then it returns that error.
func (s *Store) enqueueBehind(session string, op behindOp) error {
	s.behindMu.Lock()
	defer s.behindMu.Unlock()
	if s.behindClosed {
		return belay.ErrStoreClosed
	}
	if err := s.leaseErrLocked(op.run, op.epoch); err != nil {
		return err
	}
	q := s.behind[session]
	if q == nil {
		q = &behindQueue{}
		s.behind[session] = q
	}
	q.ops = append(q.ops, op)
	switch {
	case len(q.ops) >= maxBehindOps && q.flushing == nil:
		if q.timer != nil {
			q.timer.Stop()
			q.timer = nil
		}
		go s.flushBehindAsync(session)
	case q.timer == nil:
		// Real time, not the injected clock: this bounds a latency, and
		// tests wait on conditions, not on this delay.
		q.timer = time.AfterFunc(behindDelay, func() { s.flushBehindAsync(session) })
	}
	return nil
}

// behindErr returns the error a queued write of the lease met, if any.
func (s *Store) behindErr(run string, epoch uint64) error {
	s.behindMu.Lock()
	defer s.behindMu.Unlock()
	return s.leaseErrLocked(run, epoch)
}

func (s *Store) leaseErrLocked(run string, epoch uint64) error {
	if len(s.behindErrs) == 0 {
		return nil
	}
	if le, ok := s.behindErrs[run]; ok && le.epoch == epoch {
		return le.err
	}
	return nil
}

// setLeaseErrLocked keeps err for the lease, unless a newer lease of the
// run already has one.
func (s *Store) setLeaseErrLocked(run string, epoch uint64, err error) {
	if le, ok := s.behindErrs[run]; ok && le.epoch > epoch {
		return
	}
	if len(s.behindErrs) >= maxBehindErrs {
		// Leases that never wrote again on this node (their runs were
		// rescued elsewhere); far more than the runs a node holds.
		clear(s.behindErrs)
	}
	s.behindErrs[run] = leaseErr{epoch, err}
}

// forgetLease drops what was kept for the run's leases: it was leased
// again, or ended.
func (s *Store) forgetLease(run string) {
	s.behindMu.Lock()
	defer s.behindMu.Unlock()
	delete(s.behindErrs, run)
}

// flushBehindAsync commits a session's queue for a timer or a full queue;
// what fails is kept for the leases (flushBehind).
func (s *Store) flushBehindAsync(session string) {
	_ = s.flushBehind(context.Background(), session)
}

// flushBehind commits the session's queued writes, after any commit of
// them already in flight. A refused write is kept for its lease and does
// not fail the flush; the error of a commit that failed is kept for every
// lease it carried and returned.
func (s *Store) flushBehind(ctx context.Context, session string) error {
	ops, done, err := s.takeBehind(ctx, session)
	if err != nil || done == nil {
		return err
	}
	refused, err := s.commitBehind(session, ops)
	done(refused, err)
	return err
}

// takeBehind takes the session's queued writes for a commit, after any
// commit of them already in flight (waiting for it is bounded by ctx).
// Writes of a lease whose earlier queued write was lost are dropped. With
// writes to commit it returns them and done, which the commit must call
// with its outcome: the refusals by lease, or the error that failed it
// for every lease it carried. Until then the session's next commit waits.
func (s *Store) takeBehind(ctx context.Context, session string) (ops []behindOp, done func(map[behindKey]error, error), err error) {
	s.behindMu.Lock()
	defer s.behindMu.Unlock()
	for {
		q := s.behind[session]
		if q == nil {
			return nil, nil, nil
		}
		ch := q.flushing
		if ch == nil {
			break
		}
		s.behindMu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			s.behindMu.Lock()
			return nil, nil, ctx.Err()
		}
		s.behindMu.Lock()
	}
	q := s.behind[session]
	if q.timer != nil {
		q.timer.Stop()
		q.timer = nil
	}
	for _, op := range q.ops {
		if s.leaseErrLocked(op.run, op.epoch) == nil {
			ops = append(ops, op)
		}
	}
	clear(q.ops)
	q.ops = q.ops[:0]
	if len(ops) == 0 {
		delete(s.behind, session)
		return nil, nil, nil
	}
	ch := make(chan struct{})
	q.flushing = ch
	return ops, func(refused map[behindKey]error, err error) {
		s.behindMu.Lock()
		defer s.behindMu.Unlock()
		for k, rerr := range refused {
			s.setLeaseErrLocked(k.run, k.epoch, rerr)
		}
		if err != nil {
			for _, op := range ops {
				s.setLeaseErrLocked(op.run, op.epoch, err)
			}
		}
		q.flushing = nil
		close(ch)
		if len(q.ops) == 0 && q.timer == nil {
			delete(s.behind, session)
		}
	}, nil
}

// behindRuns are the runs ops write to, in id order.
func behindRuns(ops []behindOp) []string {
	var runs []string
	for _, op := range ops {
		if !slices.Contains(runs, op.run) {
			runs = append(runs, op.run)
		}
	}
	slices.Sort(runs)
	return runs
}

// journalBehind journals ops (one session's queue) in t: each lease's
// writes checked against its run as read under the session's lock
// (fence), the accepted ones emitted in order. It returns the refusals by
// lease and each run's last accepted phase.
func journalBehind(t *tx, session string, ops []behindOp, fence map[string]fenceRow) (map[behindKey]error, map[string]belay.RunPhase, error) {
	refused := map[behindKey]error{}
	last := map[string]belay.RunPhase{}
	for _, op := range ops {
		k := behindKey{op.run, op.epoch}
		if _, ok := refused[k]; ok {
			continue
		}
		if err := checkFence(session, &belay.Event{Run: op.run, Epoch: op.epoch}, fence); err != nil {
			refused[k] = err
			continue
		}
		for _, e := range op.evs {
			if _, err := t.emit(e); err != nil {
				return nil, nil, err
			}
		}
		if op.phase != "" {
			last[op.run] = op.phase
		}
	}
	return refused, last, nil
}

// setPhase is the update of runs' rows to running phases: their ids,
// phases, statuses and the times.
var setPhase = merged(`UPDATE belay_runs r SET phase = k.to_phase, status = k.to_status, updated_at = k.at
	FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[]) AS k(run, to_phase, to_status, at) WHERE r.id = k.run`)

// commitBehind commits ops (one session's queue) as one write: each
// lease's writes are checked against its run under the session's lock, the
// accepted ones journaled in order, and each run's row takes its last
// queued phase. It returns the refusals by lease, or err when nothing was
// committed.
func (s *Store) commitBehind(session string, ops []behindOp) (map[behindKey]error, error) {
	runs := behindRuns(ops)
	var fence map[string]fenceRow
	var refused map[behindKey]error
	missing := fmt.Errorf("%w: session %s", belay.ErrNotFound, session)
	// Bounded like a shared transaction: every writer of the session
	// waits for it.
	ctx, cancel := context.WithTimeout(context.Background(), sharedTimeout)
	defer cancel()
	err := s.share(ctx, session, belay.Buffered, missing, func(b *pgx.Batch, t *tx) {
		fence = queueFenceRead(b, session, runs)
	}, func(t *tx) error {
		var last map[string]belay.RunPhase
		var err error
		refused, last, err = journalBehind(t, session, ops, fence)
		if err != nil {
			return err
		}
		for _, run := range runs {
			if phase, ok := last[run]; ok {
				t.queue(setPhase, []string{run}, []string{string(phase)}, []string{string(phase.Status())}, []time.Time{t.now})
			}
		}
		return nil
	})
	if errors.Is(err, belay.ErrNotFound) {
		// The session is gone: so are its runs' leases.
		refused = map[behindKey]error{}
		for _, op := range ops {
			refused[behindKey{op.run, op.epoch}] = err
		}
		return refused, nil
	}
	return refused, err
}

// carryBehind makes a write to session as share does, with the session's
// queued writes ops (taken by takeBehind, done its outcome) committed in
// the same transaction, journaled before the write's own events: one
// transaction, and for a run the write updates with its phase (updateRun)
// one update of its row. The write finds the run at its carried phase
// (tx.behindPhase).
//
// A refused queued write is kept for its lease (at once, so that the
// lease's own write in this transaction fails with it) and the write goes
// on. A write that refuses keeps its statements out and the queued writes
// still commit. When the transaction fails and nothing of it committed,
// the queued writes are committed alone (commitBehind) and then the write
// alone, as without this; when its outcome is unknown, every lease it
// carried keeps that error.
func (s *Store) carryBehind(ctx context.Context, session string, d belay.Durability, missing error, after func(b *pgx.Batch, t *tx), fn func(t *tx) error, ops []behindOp, done func(map[behindKey]error, error)) error {
	if ctx.Err() != nil {
		// Not started: the queue alone.
		refused, err := s.commitBehind(session, ops)
		done(refused, err)
		return ctx.Err()
	}
	// Once started it is carried out whatever the caller's context says,
	// bounded as a shared transaction: the queue is other writes' too,
	// and a caller that gave up must not leave its outcome unknown.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sharedTimeout)
	defer cancel()
	runs := behindRuns(ops)
	var fence map[string]fenceRow
	var refused map[behindKey]error
	var carried error
	// outcome is what came of the last transaction that carried ops: 0
	// unknown (or none carried them yet: reached is false), 1 committed,
	// 2 refused by the server (nothing of it committed).
	outcome, reached := 0, false
	err := s.share(cctx, session, d, missing, func(b *pgx.Batch, t *tx) {
		fence = queueFenceRead(b, session, runs)
		if after != nil {
			after(b, t)
		}
	}, func(t *tx) error {
		carried, outcome, reached = nil, 0, false
		var last map[string]belay.RunPhase
		var err error
		refused, last, err = journalBehind(t, session, ops, fence)
		if err != nil {
			return err
		}
		if len(refused) > 0 {
			s.behindMu.Lock()
			for k, rerr := range refused {
				s.setLeaseErrLocked(k.run, k.epoch, rerr)
			}
			s.behindMu.Unlock()
		}
		// Each run's phase update first, so that the write's reads of its
		// rows (RETURNING) see them; one the write makes itself is dropped.
		at := map[string]int{}
		for _, run := range runs {
			if phase, ok := last[run]; ok {
				at[run] = len(t.final.QueuedQueries)
				t.queue(setPhase, []string{run}, []string{string(phase)}, []string{string(phase.Status())}, []time.Time{t.now})
			}
		}
		t.behindPhase = last
		m := t.mark()
		if ferr := fn(t); ferr != nil {
			if t.IsClosed() || t.PgConn().TxStatus() != 'T' {
				return ferr // a read failed on the server: nothing commits
			}
			t.reset(m)
			carried = ferr
		}
		for i := len(runs) - 1; i >= 0; i-- {
			if k, ok := at[runs[i]]; ok && slices.Contains(t.phaseSet, runs[i]) {
				t.final.QueuedQueries = slices.Delete(t.final.QueuedQueries, k, k+1)
			}
		}
		t.behindPhase = nil
		reached = true
		t.onEnd = func(committed bool) {
			outcome = 2
			if committed {
				outcome = 1
			}
		}
		return nil
	})
	switch {
	case outcome == 1 || err == nil:
		// Committed (or, with every write refused, nothing to commit).
		done(refused, nil)
		if err != nil {
			return err
		}
		return carried
	case reached && outcome == 0:
		// Its outcome is unknown: the leases it carried write no more.
		done(nil, err)
		return err
	}
	// Nothing committed: each alone, the queued writes first.
	refused, berr := s.commitBehind(session, ops)
	done(refused, berr)
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.share(ctx, session, d, missing, after, fn)
}

// flushAllBehind commits every session's queue (Close), after refusing
// new queued writes.
func (s *Store) flushAllBehind() error {
	s.behindMu.Lock()
	s.behindClosed = true
	sessions := make([]string, 0, len(s.behind))
	for id := range s.behind {
		sessions = append(sessions, id)
	}
	s.behindMu.Unlock()
	slices.SortFunc(sessions, strings.Compare)
	var errs []error
	for _, id := range sessions {
		if err := s.flushBehind(context.Background(), id); err != nil {
			errs = append(errs, fmt.Errorf("session %s: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

var _ store.WriteBehind = (*Store)(nil)
