package pgstore

import (
	"context"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/belayhq/belay"
)

// SharedAppend is one write of ShareNow: an event appended to Session
// (checked against its run's lease when it names one), and SQL queued
// with it when not empty.
type SharedAppend struct {
	Session string
	Event   belay.Event
	SQL     string
}

// ShareNow makes the writes in ONE shared transaction (combine.go), as if
// they had all waited for it, and returns each one's error.
func ShareNow(s *Store, d belay.Durability, ws []SharedAppend) []error {
	ops := make([]*sharedOp, len(ws))
	for i, w := range ws {
		var fence map[string]fenceRow
		after := func(b *pgx.Batch, t *tx) { fence = queueFenceRead(b, w.Session, []string{w.Event.Run}) }
		ops[i] = &sharedOp{ctx: context.Background(), session: w.Session, missing: belay.ErrNotFound, after: after, done: make(chan error, 1),
			fn: func(t *tx) error {
				e := w.Event
				if e.Run != "" {
					if err := checkFence(t.session, &e, fence); err != nil {
						return err
					}
				}
				if _, err := t.emit(e); err != nil {
					return err
				}
				if w.SQL != "" {
					t.queue(w.SQL)
				}
				return nil
			}}
	}
	s.runShared(d, slices.Clone(ops))
	errs := make([]error, len(ops))
	for i, op := range ops {
		errs[i] = <-op.done
	}
	return errs
}

// SequenceNow makes a sequencer pass (see sequence).
func SequenceNow(ctx context.Context, s *Store, wait bool) (int64, error) {
	return s.sequence(ctx, wait)
}

// OnSequenced sets a hook called in each sequencer pass after it numbered
// rows (n of them), before its commit lets the lock go.
func OnSequenced(s *Store, f func(n int64)) { s.sequencedHook.Store(&f) }

// RepairReadyNow looks for runs that should be marked ready and are not
// (repairReady, without waiting for its period), and returns how many it
// marked since the store opened.
func RepairReadyNow(ctx context.Context, s *Store) (int64, error) {
	s.claimMu.Lock()
	defer s.claimMu.Unlock()
	s.readyRepairedAt = time.Time{}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	if err := s.repairReady(ctx, conn.Conn()); err != nil {
		return 0, err
	}
	return s.readyRepaired.Load(), nil
}

// RequireServerVersion sets the oldest server version Open accepts, until
// the test ends.
func RequireServerVersion(t interface{ Cleanup(func()) }, v int) {
	old := minServerVersion
	minServerVersion = v
	t.Cleanup(func() { minServerVersion = old })
}
