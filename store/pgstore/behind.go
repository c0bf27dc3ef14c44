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
// A queue is committed before the session's next write of any kind (that
// write waits for it: shared and withSession call flushBehind first), or
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
	for {
		s.behindMu.Lock()
		q := s.behind[session]
		if q == nil {
			s.behindMu.Unlock()
			return nil
		}
		if ch := q.flushing; ch != nil {
			s.behindMu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return ctx.Err()
			}
			continue
		}
		ops := q.ops
		if q.timer != nil {
			q.timer.Stop()
			q.timer = nil
		}
		if len(ops) == 0 {
			delete(s.behind, session)
			s.behindMu.Unlock()
			return nil
		}
		q.ops = nil
		// A lease whose earlier queued write was lost writes nothing more.
		live := ops[:0]
		for _, op := range ops {
			if s.leaseErrLocked(op.run, op.epoch) == nil {
				live = append(live, op)
			}
		}
		ops = live
		done := make(chan struct{})
		q.flushing = done
		s.behindMu.Unlock()

		var refused map[behindKey]error
		var err error
		if len(ops) > 0 {
			refused, err = s.commitBehind(session, ops)
		}

		s.behindMu.Lock()
		for k, rerr := range refused {
			s.setLeaseErrLocked(k.run, k.epoch, rerr)
		}
		if err != nil {
			for _, op := range ops {
				s.setLeaseErrLocked(op.run, op.epoch, err)
			}
		}
		q.flushing = nil
		close(done)
		if len(q.ops) == 0 && q.timer == nil {
			delete(s.behind, session)
		}
		s.behindMu.Unlock()
		return err
	}
}

// commitBehind commits ops (one session's queue) as one write: each
// lease's writes are checked against its run under the session's lock, the
// accepted ones journaled in order, and each run's row takes its last
// queued phase. It returns the refusals by lease, or err when nothing was
// committed.
func (s *Store) commitBehind(session string, ops []behindOp) (map[behindKey]error, error) {
	var runs []string
	for _, op := range ops {
		if !slices.Contains(runs, op.run) {
			runs = append(runs, op.run)
		}
	}
	slices.Sort(runs)
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
		refused = map[behindKey]error{}
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
					return err
				}
			}
			if op.phase != "" {
				last[op.run] = op.phase
			}
		}
		for _, run := range runs {
			if phase, ok := last[run]; ok {
				t.queue(`UPDATE belay_runs SET phase = $2, status = $3, updated_at = $4 WHERE id = $1`,
					run, string(phase), string(phase.Status()), t.now)
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
