package pgstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/store"
)

// The change feed (store.Store.Changes) is the table belay_changes: one
// row per state-changing event, written in the transaction of the event.
//
// Cursor order is commit order, without gaps, for every reader on every
// node. A transaction takes its cursors with its last statement before
// COMMIT, by advancing the one row of belay_change_head. That update
// holds the row's lock until the transaction ends, and PostgreSQL makes a
// commit visible before it releases the commit's locks. So the next
// transaction with changes takes its cursors only once the previous ones
// are visible to every new snapshot: readers see the cursors appear in
// order, and a statement that sees cursor n sees every cursor before it.
// The price is that commits with changes are serialized through the
// commit itself (the WAL flush): see docs/postgres.md.

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
	case store.EventRunUpdated:
		var p struct {
			Phase belay.RunPhase `json:"phase"`
		}
		// The data was just encoded from runUpdated: it decodes.
		_ = json.Unmarshal(e.Data, &p)
		c.Ended = p.Phase != "" && p.Phase.Status().Terminal()
	case store.EventDeliveryPosted, store.EventDeliveryLeased, store.EventDeliverySettled,
		store.EventDeliveryExpired, store.EventDeliveryReturned:
		var p struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(e.Data, &p)
		c.Delivery = p.ID
	}
	return c
}

// insertChanges takes the next cursors and writes the changes with them.
// The update of belay_change_head locks its row until the transaction
// ends: it must be the last statement before COMMIT.
const insertChanges = `WITH h AS (UPDATE belay_change_head SET head = head + $1 RETURNING head)
	INSERT INTO belay_changes (cursor, session, seq, type, run, delivery, ended)
	SELECT h.head - $1 + c.i, c.session, c.seq, c.type, NULLIF(c.run, ''), NULLIF(c.delivery, ''), c.ended
	FROM h, unnest($2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::bool[])
		WITH ORDINALITY AS c(session, seq, type, run, delivery, ended, i)`

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
	b.Queue(insertChanges, int64(n), sessions, seqs, types, runs, deliveries, ended)
}

// Changes returns up to max changes after cursor after, in commit order.
func (s *Store) Changes(ctx context.Context, after uint64, max int) ([]store.Change, uint64, error) {
	if s.isClosed() {
		return nil, after, belay.ErrStoreClosed
	}
	limit := "ALL"
	if max > 0 {
		limit = fmt.Sprint(max)
	}
	// One statement, one snapshot: the head, the floor and the rows agree.
	rows, err := s.pool.Query(ctx, `SELECT h.floor, h.head, c.cursor, c.session, c.seq, c.type, c.run, c.delivery, c.ended
		FROM belay_change_head h LEFT JOIN LATERAL (
			SELECT cursor, session, seq, type, coalesce(run, '') AS run, coalesce(delivery, '') AS delivery, ended
			FROM belay_changes WHERE cursor > $1 ORDER BY cursor LIMIT `+limit+`
		) c ON true ORDER BY c.cursor`, int64(after))
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

// ChangeHead is the cursor of the last committed change.
func (s *Store) ChangeHead(ctx context.Context) (uint64, error) {
	if s.isClosed() {
		return 0, belay.ErrStoreClosed
	}
	var head int64
	if err := s.pool.QueryRow(ctx, `SELECT head FROM belay_change_head`).Scan(&head); err != nil {
		return 0, s.wrap(err)
	}
	return uint64(head), nil
}

// WaitChanges blocks until a change after cursor after is committed, or
// ctx is done. Notifications wake it early; it re-reads the head at least
// every PollEvery.
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
// agree for every reader.
func (s *Store) trimChanges(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, `WITH f AS (UPDATE belay_change_head SET floor = greatest(floor, head - $1) RETURNING floor)
		DELETE FROM belay_changes WHERE cursor <= (SELECT floor FROM f)`, s.keepChanges)
	return s.wrap(err)
}
