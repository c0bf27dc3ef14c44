package pgstore

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/store"
)

// The change feed (store.Store.Changes) is the table belay_changes: one
// row per state-changing event, written in the transaction of the event,
// without a cursor. A sequencer numbers the rows later: after each commit
// with changes the node runs one (coalesced, in the notifier), and every
// reader runs one before it reads, so a change is in the feed for every
// node once its write has returned.
//
// Cursor order is commit order, without gaps, for every reader on every
// node. Sequencers take an advisory lock, one at a time across nodes, and
// number, in one statement run after the lock is granted, every row
// committed by then, in the order the rows were written (id). PostgreSQL
// makes a commit visible before it releases the transaction's locks, so
// the next sequencer sees every row the previous one numbered, numbers
// only rows committed since, and its cursors become visible after the
// previous ones: a statement that sees cursor n sees every cursor before
// it. A session's rows are written under its row lock, so its later rows
// have larger ids and are never visible before its earlier ones: within a
// session, cursors follow seqs. Writers never wait for one another (see
// docs/postgres.md for the alternative, measured: cursors handed out in
// the writing transaction, which serializes commits through the WAL flush).

// DefaultKeepChanges is how many of the latest changes the feed keeps,
// as in fsstore.
const DefaultKeepChanges = 1 << 16

// feedPayload is the NOTIFY payload that says the change feed moved (a
// session id never starts with '~').
const feedPayload = "~changes"

// changeOf is the change-feed row of a state-changing event the store
// just wrote.
func changeOf(session string, e *belay.Event) store.Change {
	c := store.Change{Session: session, Seq: e.Seq, Type: e.Type, Run: e.Run}
	switch e.Type {
	case belay.EventRunUpdated:
		var p struct {
			Phase belay.RunPhase `json:"phase"`
		}
		// The data was just encoded from runUpdated: it decodes.
		_ = json.Unmarshal(e.Data, &p)
		c.Ended = p.Phase != "" && p.Phase.Status().Terminal()
	case belay.EventDeliveryPosted, belay.EventDeliveryLeased, belay.EventDeliverySettled,
		belay.EventDeliveryExpired, belay.EventDeliveryReturned:
		var p struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(e.Data, &p)
		c.Delivery = p.ID
	}
	return c
}

// insertChanges writes changes without cursors, their ids drawn in the
// order given.
const insertChanges = `INSERT INTO belay_changes (session, seq, type, run, delivery, ended)
	SELECT c.session, c.seq, c.type, NULLIF(c.run, ''), NULLIF(c.delivery, ''), c.ended
	FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::bool[])
		WITH ORDINALITY AS c(session, seq, type, run, delivery, ended, i)
	ORDER BY c.i`

// queueChanges queues the insert of changes (nothing if none).
func queueChanges(b *pgx.Batch, changes []store.Change) {
	n := len(changes)
	if n == 0 {
		return
	}
	sessions, seqs, types, runs, deliveries, ended := make([]string, n), make([]int64, n), make([]string, n), make([]string, n), make([]string, n), make([]bool, n)
	for i, c := range changes {
		sessions[i], seqs[i], types[i], runs[i], deliveries[i], ended[i] = c.Session, int64(c.Seq), c.Type, c.Run, c.Delivery, c.Ended
	}
	b.Queue(insertChanges, sessions, seqs, types, runs, deliveries, ended)
}

// sequenceLock is the advisory lock key that makes sequencers take turns.
const sequenceLock int64 = 0x62656c6179_04 // "belay", 4

// sequenceBatch bounds the rows one sequencer statement numbers.
const sequenceBatch = 10000

// sequenceRechecks bounds the passes a sequencer makes, past a backlog,
// for the rows committed while it numbered (see sequence).
const sequenceRechecks = 4

// sequence numbers the committed changes that have no cursor yet and
// returns how many it numbered. It is cheap when there are none.
// A closed store numbers nothing; the other nodes do. One pass at a time
// per node; across nodes, passes take turns on an advisory lock.
//
// With wait, it waits for its turn: every change committed before the
// call is numbered when it returns (readers: Changes, ChangeHead). Without
// (the notifier, after this node's commits), a sequencer that finds
// another's pass under way leaves its rows to that pass's sequencer
// instead of waiting with a connection held: every sequencer looks again
// after each pass it makes, once its commit has let the lock go, so it
// sees every row committed before another's attempt at the lock failed,
// and numbers them in up to sequenceRechecks more passes (past that, it
// asks the notifier for another). A pass that fails leaves them to the
// next pass or reader: every node's feed reader numbers what is pending
// at least every poll interval.
func (s *Store) sequence(ctx context.Context, wait bool) (int64, error) {
	if s.writable() != nil {
		return 0, nil
	}
	s.seqMu.Lock()
	defer s.seqMu.Unlock()
	var total int64
	rechecks := 0
	for {
		var pending bool
		if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM belay_changes WHERE cursor IS NULL)`).Scan(&pending); err != nil {
			return total, s.wrap(err)
		}
		if !pending {
			return total, nil
		}
		var n int64
		busy := false
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if wait {
				if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, sequenceLock); err != nil {
					return err
				}
			} else {
				var got bool
				if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1)`, sequenceLock).Scan(&got); err != nil {
					return err
				}
				if !got {
					busy = true // its holder looks again once it lets go
					return nil
				}
			}
			// A statement after the lock: its snapshot holds every row the
			// previous sequencer numbered.
			err := tx.QueryRow(ctx, `WITH todo AS (
					SELECT id, row_number() OVER (ORDER BY id) AS n FROM belay_changes WHERE cursor IS NULL ORDER BY id LIMIT $1
				), h AS (
					UPDATE belay_change_head SET head = head + (SELECT count(*) FROM todo) RETURNING head
				), numbered AS (
					UPDATE belay_changes c SET cursor = h.head - (SELECT count(*) FROM todo) + todo.n
					FROM todo, h WHERE c.id = todo.id RETURNING 1
				) SELECT count(*) FROM numbered`, sequenceBatch).Scan(&n)
			if err == nil {
				if h := s.sequencedHook.Load(); h != nil {
					(*h)(n)
				}
			}
			return err
		})
		if err != nil {
			return total, s.wrap(err)
		}
		if busy {
			return total, nil
		}
		total += n
		if n > 0 {
			s.sequenced(n)
		}
		if n < sequenceBatch {
			// Past the backlog: what came in meanwhile, a few times; then
			// the notifier's next pass, which looks again, in case a busy
			// loser's rows came in during the last one.
			if rechecks++; rechecks > sequenceRechecks {
				s.sequenceDue.Store(true)
				select {
				case s.notifyKick <- struct{}{}:
				default:
				}
				return total, nil
			}
		}
	}
}

// sequenced announces n newly numbered changes: the feed's waiters on
// this node at once, on other nodes by a NOTIFY.
func (s *Store) sequenced(n int64) {
	s.notifyMu.Lock()
	s.toNotify[feedPayload] = struct{}{}
	s.notifyMu.Unlock()
	select {
	case s.notifyKick <- struct{}{}:
	default:
	}
	s.wakeFeed()
	if s.sinceTrim.Add(n) >= max(s.keepChanges/8, 1) {
		s.sinceTrim.Store(0)
		s.trimDue.Store(true)
	}
}

// Changes returns up to limit changes after cursor after (all of them
// for 0), in commit order.
func (s *Store) Changes(ctx context.Context, after uint64, limit int) ([]store.Change, uint64, error) {
	if s.isClosed() {
		return nil, after, belay.ErrStoreClosed
	}
	// Number what was committed before this call, so that every write
	// that returned is in the feed.
	if _, err := s.sequence(ctx, true); err != nil {
		return nil, after, err
	}
	// One statement, one snapshot: the head, the floor and the rows agree.
	// Cursors are dense, so the rows are read by key, one per cursor from
	// after to the head (planRobust; a range scan's plan could turn into a
	// scan of the table).
	rows, err := s.pool.Query(ctx, `SELECT h.floor, h.head, c.cursor, c.session, c.seq, c.type, c.run, c.delivery, c.ended
		FROM belay_change_head h LEFT JOIN LATERAL (
			SELECT x.cursor, x.session, x.seq, x.type, coalesce(x.run, '') AS run, coalesce(x.delivery, '') AS delivery, x.ended
			FROM generate_series(greatest($1::bigint, h.floor) + 1, CASE WHEN $2::bigint > 0 THEN least(h.head, $1::bigint + $2::bigint) ELSE h.head END) AS k(cur)
			CROSS JOIN LATERAL (SELECT cursor, session, seq, type, run, delivery, ended FROM belay_changes WHERE cursor = k.cur OFFSET 0) x
		) c ON true ORDER BY c.cursor`, int64(after), min(int64(max(limit, 0)), math.MaxInt32))
	if err != nil {
		return nil, after, s.wrap(err)
	}
	defer rows.Close()
	var floor, head int64
	out := []store.Change{}
	for rows.Next() {
		var cursor, seq *int64
		var session, typ, run, delivery *string
		var ended *bool
		if err := rows.Scan(&floor, &head, &cursor, &session, &seq, &typ, &run, &delivery, &ended); err != nil {
			return nil, after, s.wrap(err)
		}
		if cursor == nil {
			continue // no change after the cursor
		}
		out = append(out, store.Change{Cursor: uint64(*cursor), Session: *session, Seq: uint64(*seq), Type: *typ,
			Run: *run, Delivery: *delivery, Ended: *ended})
	}
	if err := rows.Err(); err != nil {
		return nil, after, s.wrap(err)
	}
	switch {
	case after > uint64(head):
		return nil, after, fmt.Errorf("%w: cursor %d is ahead of the feed (%d): another database?", store.ErrCursorExpired, after, head)
	case after < uint64(floor):
		return nil, after, fmt.Errorf("%w: cursor %d is older than the oldest change kept (%d)", store.ErrCursorExpired, after, floor+1)
	}
	next := after
	for _, c := range out {
		if c.Cursor != next+1 {
			// Cursors are handed out one by one under a lock: a hole means
			// the table was changed by something else.
			return nil, after, fmt.Errorf("%w: change feed: cursor %d follows %d", belay.ErrCorruptRecord, c.Cursor, next)
		}
		next = c.Cursor
	}
	return out, next, nil
}

// ChangeHead is the cursor of the last committed change (numbering those
// committed but not yet numbered first).
func (s *Store) ChangeHead(ctx context.Context) (uint64, error) {
	if s.isClosed() {
		return 0, belay.ErrStoreClosed
	}
	if _, err := s.sequence(ctx, true); err != nil {
		return 0, err
	}
	var head int64
	if err := s.pool.QueryRow(ctx, `SELECT head FROM belay_change_head`).Scan(&head); err != nil {
		return 0, s.wrap(err)
	}
	return uint64(head), nil
}

// WaitChanges blocks until a change after cursor after is committed, or
// ctx is done. Notifications wake it early; it re-reads the head (and
// numbers changes a node that died left unnumbered) at least every
// PollEvery.
func (s *Store) WaitChanges(ctx context.Context, after uint64) error {
	w, err := s.addWaiter(feedPayload)
	if err != nil {
		return err
	}
	defer s.dropWaiter(feedPayload, w)
	for {
		head, err := s.ChangeHead(ctx)
		switch {
		case ctx.Err() != nil:
			return context.Cause(ctx)
		case err != nil:
			return err
		case head != after:
			return nil
		}
		timer := time.NewTimer(s.poll)
		select {
		case <-ctx.Done():
			timer.Stop()
			return context.Cause(ctx)
		case <-w.ch:
			// Registered before the read: a commit since has left its
			// signal here.
			timer.Stop()
		case <-timer.C:
		}
		if s.isClosed() {
			return belay.ErrStoreClosed
		}
	}
}

// trimChanges drops all but the latest keepChanges changes. It takes the
// head's lock for a moment, so the floor it sets and the rows it deletes
// agree for every reader; rows not yet numbered are kept.
func (s *Store) trimChanges(ctx context.Context) error {
	if _, err := s.sequence(ctx, true); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, `WITH f AS (UPDATE belay_change_head SET floor = greatest(floor, head - $1) RETURNING floor)
		DELETE FROM belay_changes WHERE cursor <= (SELECT floor FROM f)`, s.keepChanges)
	return s.wrap(err)
}
