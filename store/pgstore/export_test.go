package pgstore

import (
	"context"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/ids"
	"github.com/belayhq/belay/store"
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
	return runOps(s, d, ops)
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

// MergedAway counts the statements of shared transactions merged into
// others (mergeQueued).
func MergedAway(s *Store) int64 { return s.mergedAway.Load() }

// MergeFailed counts the shared transactions whose statements mergeQueued
// refused.
func MergeFailed(s *Store) int64 { return s.mergeFailed.Load() }

// ShareSubmits makes the submissions (each to its own session) in ONE
// shared transaction, and returns each one's result and error.
func ShareSubmits(s *Store, ins []store.SubmitInput) ([]store.SubmitResult, []error) {
	res := make([]store.SubmitResult, len(ins))
	ops := make([]*sharedOp, len(ins))
	for i, in := range ins {
		ops[i] = &sharedOp{ctx: context.Background(), session: in.Session, missing: belay.ErrNotFound, done: make(chan error, 1),
			fn: func(t *tx) error {
				var existing string
				return s.submit(t, in, ids.New(ids.Run), &res[i], &existing)
			}}
	}
	return res, runOps(s, belay.Sync, ops)
}

// SharedUpdate is one write of ShareUpdates: an update of a running run
// at Epoch (its session Session), its row read back.
type SharedUpdate struct {
	Session, Run string
	Epoch        uint64
	Update       belay.RunUpdate
}

// ShareUpdates makes the updates (each to its own session) in ONE shared
// transaction, and returns the runs as each left them and its error.
func ShareUpdates(s *Store, us []SharedUpdate) ([]belay.Run, []error) {
	out := make([]belay.Run, len(us))
	ops := make([]*sharedOp, len(us))
	for i, u := range us {
		ops[i] = &sharedOp{ctx: context.Background(), session: u.Session, missing: belay.ErrNotFound, done: make(chan error, 1),
			fn: func(t *tx) error {
				r := &lockedRun{status: belay.RunRunning, phase: belay.PhaseAdmitted, epoch: u.Epoch, out: &out[i]}
				return s.updateRun(t, u.Run, u.Epoch, r, u.Update)
			}}
	}
	return out, runOps(s, belay.Sync, ops)
}

// runOps makes ops in one shared transaction, and returns their errors.
func runOps(s *Store, d belay.Durability, ops []*sharedOp) []error {
	s.runShared(d, slices.Clone(ops))
	errs := make([]error, len(ops))
	for i, op := range ops {
		errs[i] = <-op.done
	}
	return errs
}

// SetStatements are the statements that change a set of rows given as
// arrays, by key (planRobust), each with genericPlans' settings.
func SetStatements() (settings string, sqls []string) {
	return genericPlans, []string{insertRun, insertRun + returningRun, updateRunPhase, updateRunPhase + returningRun,
		setPhase, insertDelivery, leaseRuns, unreadyRuns, leaseCounters, setCounters, markReady, refreshReady}
}

// FullScans counts the claims that looked through every running run for
// runs of dead owners (rescuable).
func FullScans(s *Store) int64 { return s.fullScans.Load() }

// DeadScanEvery is deadScanEvery.
const DeadScanEvery = deadScanEvery

// ExpiredWalk is expiredWalk, the claim's read of expired leases.
const ExpiredWalk = expiredWalk

// ClaimLock is the advisory lock key claims take turns on.
const ClaimLock = claimLock

// RefusedBy is refusedBy: the refusal among a connection's attempts.
var RefusedBy = refusedBy
