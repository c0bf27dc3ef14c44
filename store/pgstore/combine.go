package pgstore

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/belayhq/belay"
)

// Shared transactions (group commit). The runtime makes many small writes
// at once, each to its own session: a run's phase changes, its events, new
// runs. Each alone costs a transaction: two round trips, a commit record
// and a wait for the WAL flush. Writes that arrive while the node already
// has maxShared transactions in flight wait and then go together, up to
// maxSharedOps of them, in ONE transaction: their session locks are taken
// in one round trip (in session-id order, so two shared transactions never
// deadlock), each write decides under its lock exactly as alone, and the
// writes of all that decided to write commit together in the second round
// trip. A write that refuses (a stale epoch, a finished run) leaves the
// others alone: it only queued statements, which are dropped.
//
// Every write still commits before it returns, with the durability asked
// for (only writes of the same durability share), and still sees the
// state the previous write to its session left: two writes to one session
// never share a transaction. When the shared transaction fails on the
// server (a constraint, a deadlock, a lock timeout), nothing of it was
// committed and each write is made again alone, so that one bad write
// fails alone. A commit whose outcome is unknown (the connection cut while
// COMMIT was in flight) fails every write of it with ErrUnreachable, as a
// write alone does.

// maxShared bounds the shared transactions in flight per node and
// durability; maxSharedOps the writes in one. Two in flight rather than
// four (measured with `belay bench runs --store postgres://...`, 6,000
// runs, alternated): the same runs/s with 1 node and 1.07x with 3, p50
// 0.7x-0.8x and p99 0.6x, as a write waits for one of fewer
// transactions and goes in a fuller one; one in flight was slower.
const (
	maxShared    = 2
	maxSharedOps = 64
)

// sharedOp is one write waiting to share a transaction.
type sharedOp struct {
	ctx     context.Context
	session string
	// missing is the error when the session is not there; after queues
	// the write's reads, run once the session is locked (nil: none).
	missing error
	after   func(b *pgx.Batch, t *tx)
	fn      func(t *tx) error
	done    chan error
}

// alone makes op's write in its own transaction.
func (s *Store) alone(op *sharedOp, d belay.Durability) error {
	return s.write(op.ctx, op.session, d, s.lockThen(op.session, op.missing, op.after), op.fn)
}

// sharer queues the writes of one durability.
type sharer struct {
	d       belay.Durability
	queue   []*sharedOp
	running int
}

// shared runs a write to session like write (the session locked, then
// after's reads, then fn decides), sharing its transaction with other
// writes in flight (see above); missing is its error when the session is
// not there. fn must only read on t's connection and queue its writes
// (t.queue, t.emit, t.tail): what it executes itself would be committed
// with the others even if it then failed.
func (s *Store) shared(ctx context.Context, session string, d belay.Durability, missing error, after func(b *pgx.Batch, t *tx), fn func(t *tx) error) error {
	// The session's queued writes go first, in the same transaction
	// (behind.go). Their failure is kept for their lease, not this
	// write's: it goes on after them.
	ops, done, err := s.takeBehind(ctx, session)
	if err != nil {
		return err
	}
	if done != nil {
		return s.carryBehind(ctx, session, d, missing, after, fn, ops, done)
	}
	return s.share(ctx, session, d, missing, after, fn)
}

// share is shared without the session's write-behind queue.
func (s *Store) share(ctx context.Context, session string, d belay.Durability, missing error, after func(b *pgx.Batch, t *tx), fn func(t *tx) error) error {
	if err := s.writable(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	op := &sharedOp{ctx: ctx, session: session, missing: missing, after: after, fn: fn, done: make(chan error, 1)}
	if s.writeAlone {
		return s.alone(op, d)
	}
	sh := &s.sharers[0]
	if d == belay.Buffered {
		sh = &s.sharers[1]
	}
	s.shareMu.Lock()
	sh.queue = append(sh.queue, op)
	if sh.running < maxShared {
		sh.running++
		go s.drain(sh)
	}
	s.shareMu.Unlock()
	// Once queued the write is carried out whatever ctx says: an answer
	// that raced the commit would leave its outcome unknown.
	return <-op.done
}

// drain runs shared transactions while writes wait.
func (s *Store) drain(sh *sharer) {
	for {
		s.shareMu.Lock()
		if len(sh.queue) == 0 {
			sh.running--
			s.shareMu.Unlock()
			return
		}
		// The first writes of distinct sessions, in arrival order; a
		// second write to a session waits for the next transaction.
		var ops []*sharedOp
		seen := map[string]bool{}
		rest := sh.queue[:0]
		for _, op := range sh.queue {
			if len(ops) < maxSharedOps && !seen[op.session] {
				seen[op.session] = true
				ops = append(ops, op)
				continue
			}
			rest = append(rest, op)
		}
		clear(sh.queue[len(rest):])
		sh.queue = rest
		s.shareMu.Unlock()
		s.runShared(sh.d, ops)
	}
}

// runShared commits ops in one transaction, or each alone when that
// transaction fails on the server.
func (s *Store) runShared(d belay.Durability, ops []*sharedOp) {
	live := ops[:0]
	for _, op := range ops {
		if err := op.ctx.Err(); err != nil {
			op.done <- err // never started: nothing written
			continue
		}
		live = append(live, op)
	}
	ops = live
	if len(ops) == 0 {
		return
	}
	if len(ops) == 1 {
		ops[0].done <- s.alone(ops[0], d)
		return
	}
	slices.SortFunc(ops, func(a, b *sharedOp) int { return strings.Compare(a.session, b.session) })
	errs, retry, err := s.commitShared(d, ops)
	if retry {
		for _, op := range ops {
			op.done <- s.alone(op, d)
		}
		return
	}
	for i, op := range ops {
		switch {
		case err != nil:
			op.done <- err
		default:
			op.done <- errs[i]
		}
	}
}

// commitShared runs ops (sorted by session) in one transaction. It returns
// each write's own refusal, or retry when nothing was committed and each
// should be made alone, or err when the transaction failed for all.
func (s *Store) commitShared(d belay.Durability, ops []*sharedOp) (errs []error, retry bool, err error) {
	if err := s.writable(); err != nil {
		return nil, false, err
	}
	// The writers wait for the outcome whatever their contexts say; the
	// transaction is bounded instead.
	ctx, cancel := context.WithTimeout(context.Background(), sharedTimeout)
	defer cancel()
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, false, s.wrap(err)
	}
	defer pc.Release()
	conn := pc.Conn()
	ts := make([]*tx, len(ops))
	errs = make([]error, len(ops))
	committed, sent := false, false
	err = func() error {
		b := &pgx.Batch{}
		b.Queue(`BEGIN`)
		b.Queue(genericPlans)
		if d == belay.Buffered {
			b.Queue(`SET LOCAL synchronous_commit = off`)
		}
		// Every session locked by one statement, in id order (ops are
		// sorted), then each write's reads.
		ids := make([]string, len(ops))
		byID := map[string]*tx{}
		for i, op := range ops {
			ts[i] = &tx{Conn: conn, ctx: ctx, session: op.session}
			ids[i], byID[op.session] = op.session, ts[i]
		}
		found := map[string]bool{}
		// Each locked by key, in the order of ids (planRobust).
		b.Queue(`SELECT s.id, s.last_seq, s.provider, s.model, coalesce($2::timestamptz, now()) FROM unnest($1::text[]) AS k(id)
			CROSS JOIN LATERAL (SELECT id, last_seq, provider, model FROM belay_sessions WHERE id = k.id FOR UPDATE) s`,
			ids, s.nowArg()).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var id string
				var lastSeq int64
				var provider, model string
				var now time.Time
				if err := rows.Scan(&id, &lastSeq, &provider, &model, &now); err != nil {
					return err
				}
				t := byID[id]
				t.lastSeq, t.provider, t.model, t.now = uint64(lastSeq), provider, model, now
				found[id] = true
			}
			return rows.Err()
		})
		for i, op := range ops {
			if op.after != nil {
				op.after(b, ts[i])
			}
		}
		if err := conn.SendBatch(ctx, b).Close(); err != nil {
			// A write's read failed (its run is gone), and the batch
			// stopped reading the others': each alone.
			retry = true
			return err
		}
		final := &pgx.Batch{}
		var ok []*tx
		var lists [][]*pgx.QueuedQuery
		returns := map[*pgx.QueuedQuery]runOut{}
		for i, op := range ops {
			t := ts[i]
			if !found[op.session] {
				errs[i] = op.missing
				continue
			}
			t.now = t.now.UTC()
			if ferr := op.fn(t); ferr != nil {
				if conn.IsClosed() || conn.PgConn().TxStatus() != 'T' {
					// Its read failed on the server: the transaction is
					// gone for every write.
					retry = conn.PgConn().TxStatus() == 'E'
					return ferr
				}
				errs[i] = ferr // its queued statements are dropped
				continue
			}
			ok = append(ok, t)
			lists = append(lists, t.final.QueuedQueries)
			maps.Copy(returns, t.returns)
		}
		// The writes' statements, the same statement of many merged
		// (mergeQueued).
		var all []*pgx.QueuedQuery
		for _, l := range lists {
			all = append(all, l...)
		}
		if qs, merr := mergeQueued(lists, returns); merr == nil {
			s.mergedAway.Add(int64(len(all) - len(qs)))
			all = qs
		} else {
			// A statement mergeQueued cannot merge (a bug: TestMergeQueued)
			// is still right sent as queued.
			s.mergeFailed.Add(1)
		}
		final.QueuedQueries = append(final.QueuedQueries, all...)
		// Every write's events, counters and changes merged (flushMany);
		// then the reads of the final state.
		flushMany(final, ok)
		for _, t := range ok {
			tail := &pgx.Batch{}
			for _, f := range t.tail {
				f(tail)
			}
			final.QueuedQueries = append(final.QueuedQueries, tail.QueuedQueries...)
		}
		if len(final.QueuedQueries) == 0 {
			_, err := conn.Exec(ctx, `ROLLBACK`)
			return err
		}
		final.Queue(`COMMIT`)
		sent = true
		err := conn.SendBatch(ctx, final).Close()
		var known bool
		committed, known = commitOutcome(conn, err)
		// Nothing of it committed: each write is made again alone.
		retry = known && !committed
		return err
	}()
	if !committed && !conn.IsClosed() && conn.PgConn().TxStatus() != 'I' {
		rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
		// Nothing of it committed; a connection the rollback fails on is
		// not idle, and the pool closes it on release.
		_, _ = conn.Exec(rctx, `ROLLBACK`)
		rcancel()
	}
	if committed {
		n := 0
		var sessions []string
		for i, t := range ts {
			if errs[i] == nil {
				if t.onEnd != nil {
					t.onEnd(true)
				}
				n += t.executed
				sessions = append(sessions, t.session)
			}
		}
		s.committed(n, sessions...)
	}
	if !committed && (retry || !sent) {
		// Nothing of it committed: COMMIT was never sent, or the server
		// refused the transaction (each write is then made again alone).
		for _, t := range ts {
			if t != nil && t.onEnd != nil {
				t.onEnd(false)
			}
		}
	}
	if err != nil {
		if retry && !conn.IsClosed() {
			return nil, true, nil
		}
		return nil, false, s.wrap(err)
	}
	return errs, false, nil
}

// sharedTimeout bounds one shared transaction.
const sharedTimeout = 30 * time.Second
