package pgstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/ids"
	"github.com/belayhq/belay/journal"
)

func marshal(v any) (json.RawMessage, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("pgstore: encode event: %w", err)
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

func checkSession(id string) error {
	if err := ids.Check(ids.Session, id); err != nil {
		return fmt.Errorf("%w: %v", belay.ErrInvalid, err)
	}
	return nil
}

func isUnique(err error, constraint string) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505" && (constraint == "" || pe.ConstraintName == constraint)
}

// sessionActive is true when the session s has a queued or running run.
// It is two probes, one per partial index (belay_runs_session_queued and
// belay_runs_session_running), which hold only the runs in that status:
// "status IN (...)" let the planner reach for the status index instead,
// whose entries for runs long finished stay until a vacuum (1 ms a
// session read under load, against a few µs).
const sessionActive = `(EXISTS (SELECT 1 FROM belay_runs r WHERE r.session = s.id AND r.status = 'running')
	OR EXISTS (SELECT 1 FROM belay_runs r WHERE r.session = s.id AND r.status = 'queued'))`

const sessionCols = sessionColsBare + sessionActive

// sessionColsActive are sessionCols of a session known to be active.
const sessionColsActive = sessionColsBare + `true`

const sessionColsBare = `s.id, s.provider, s.model, s.labels, s.options, s.ref, s.last_seq, s.created_at, s.updated_at,
	`

// sessionRow is a row of sessionCols as scanned, before it is decoded.
type sessionRow struct {
	sess                 belay.Session
	labels, ref, options []byte
	last                 int64
	active               bool
}

func (x *sessionRow) dest() []any {
	return []any{&x.sess.ID, &x.sess.Provider, &x.sess.Model, &x.labels, &x.options, &x.ref, &x.last, &x.sess.CreatedAt, &x.sess.UpdatedAt, &x.active}
}

// session decodes the scanned row.
func (x *sessionRow) session() (belay.Session, error) {
	sess := x.sess
	if len(x.labels) > 0 && string(x.labels) != "null" {
		if err := json.Unmarshal(x.labels, &sess.Labels); err != nil {
			return sess, fmt.Errorf("%w: session %s labels: %v", belay.ErrCorruptRecord, sess.ID, err)
		}
	}
	if len(x.options) > 0 {
		sess.Options = json.RawMessage(x.options)
	}
	if err := json.Unmarshal(x.ref, &sess.Ref); err != nil {
		return sess, fmt.Errorf("%w: session %s ref: %v", belay.ErrCorruptRecord, sess.ID, err)
	}
	sess.LastSeq = uint64(x.last)
	sess.CreatedAt, sess.UpdatedAt = sess.CreatedAt.UTC(), sess.UpdatedAt.UTC()
	sess.State = belay.SessionIdle
	if x.active {
		sess.State = belay.SessionActive
	}
	return sess, nil
}

func scanSession(row pgx.Row) (belay.Session, error) {
	var x sessionRow
	if err := row.Scan(x.dest()...); err != nil {
		return x.sess, err
	}
	return x.session()
}

// CreateSession inserts the session and journals session.created (and its
// first run) in one transaction.
func (s *Store) CreateSession(ctx context.Context, in belay.SessionInput) (belay.Session, error) {
	if err := s.writable(); err != nil {
		return belay.Session{}, err
	}
	if in.Provider == "" {
		return belay.Session{}, fmt.Errorf("%w: a session needs a provider", belay.ErrInvalid)
	}
	if err := checkJSON("session options", in.Options); err != nil {
		return belay.Session{}, err
	}
	if in.FirstRun != nil {
		if err := checkJSON("run input", in.FirstRun.Input); err != nil {
			return belay.Session{}, err
		}
		if err := belay.CheckTags(in.FirstRun.Tags, in.FirstRun.Meta); err != nil {
			return belay.Session{}, err
		}
		if err := belay.CheckPriority(in.FirstRun.Priority); err != nil {
			return belay.Session{}, err
		}
	}
	id := in.ID
	if id == "" {
		id = ids.New(ids.Session)
	} else if err := checkSession(id); err != nil {
		return belay.Session{}, err
	}
	if in.IdempotencyKey != "" {
		if sess, ok, err := s.sessionByKey(ctx, in.IdempotencyKey); ok || err != nil {
			return sess, err
		}
	}
	data, err := marshal(belay.SessionCreatedData{ID: id, Provider: in.Provider, Model: in.Model, Labels: in.Labels, Options: in.Options, Key: in.IdempotencyKey})
	if err != nil {
		return belay.Session{}, err
	}
	var labels any
	if in.Labels != nil {
		labels = in.Labels
	}
	var options any
	if len(in.Options) > 0 {
		options = string(in.Options)
	}
	var key any
	if in.IdempotencyKey != "" {
		key = in.IdempotencyKey
	}
	err = s.write(ctx, id, belay.Sync, func(b *pgx.Batch, t *tx) {
		b.Queue(`INSERT INTO belay_sessions (id, provider, model, labels, options, idem_key, last_seq, created_at, updated_at, last_event_at)
			VALUES ($1, $2, $3, $4, $5::json, $6, 0, coalesce($7::timestamptz, now()), coalesce($7::timestamptz, now()), coalesce($7::timestamptz, now()))
			RETURNING created_at`, id, in.Provider, in.Model, labels, options, key, s.nowArg()).QueryRow(func(row pgx.Row) error { return row.Scan(&t.now) })
	}, func(t *tx) error {
		if _, err := t.emit(belay.Event{Type: belay.EventSessionCreated, ID: storeIDPrefix + "session/" + id, Data: data}); err != nil {
			return err
		}
		if in.FirstRun != nil {
			if err := s.createRun(t, ids.New(ids.Run), *in.FirstRun, in.Provider, in.Model, false, nil); err != nil {
				return err
			}
		}
		return nil
	})
	switch {
	case isUnique(err, "belay_sessions_idem_key_key"):
		// A concurrent create with the same key won.
		if sess, ok, kerr := s.sessionByKey(ctx, in.IdempotencyKey); ok || kerr != nil {
			return sess, kerr
		}
		return belay.Session{}, s.wrap(err)
	case isUnique(err, "belay_sessions_pkey"):
		return belay.Session{}, fmt.Errorf("%w: session %s", belay.ErrExists, id)
	case err != nil:
		return belay.Session{}, s.wrap(err)
	}
	return s.Session(ctx, id)
}

func (s *Store) sessionByKey(ctx context.Context, key string) (belay.Session, bool, error) {
	sess, err := scanSession(s.pool.QueryRow(ctx, `SELECT `+sessionCols+` FROM belay_sessions s WHERE s.idem_key = $1`, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return belay.Session{}, false, nil
	}
	if err != nil {
		return belay.Session{}, false, s.wrap(err)
	}
	return sess, true, nil
}

// Session returns one session.
func (s *Store) Session(ctx context.Context, id string) (belay.Session, error) {
	if err := checkSession(id); err != nil {
		return belay.Session{}, err
	}
	if s.isClosed() {
		return belay.Session{}, belay.ErrStoreClosed
	}
	sess, err := scanSession(s.pool.QueryRow(ctx, `SELECT `+sessionCols+` FROM belay_sessions s WHERE s.id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return belay.Session{}, fmt.Errorf("%w: session %s", belay.ErrNotFound, id)
	}
	return sess, s.wrap(err)
}

// Sessions lists sessions, newest first.
func (s *Store) Sessions(ctx context.Context, f belay.SessionFilter) ([]belay.Session, error) {
	if s.isClosed() {
		return nil, belay.ErrStoreClosed
	}
	if f.Before != "" {
		if err := checkSession(f.Before); err != nil {
			return nil, err
		}
	}
	q := `SELECT ` + sessionCols + ` FROM belay_sessions s WHERE ($1 = '' OR s.provider = $1) AND ($2 = '' OR s.id < $2)`
	switch f.State {
	case "":
	case belay.SessionActive:
		q += ` AND ` + sessionActive
	case belay.SessionIdle:
		q += ` AND NOT ` + sessionActive
	default:
		return []belay.Session{}, nil // this store never quarantines
	}
	// Ids grow with time: newest first, and Before pages by id.
	q += ` ORDER BY s.id DESC`
	if f.Limit > 0 {
		q += fmt.Sprintf(` LIMIT %d`, f.Limit)
	}
	rows, err := s.pool.Query(ctx, q, f.Provider, f.Before)
	if err != nil {
		return nil, s.wrap(err)
	}
	defer rows.Close()
	var out []belay.Session
	for rows.Next() {
		sess, err := scanSession(rows)
		if err != nil {
			return nil, s.wrap(err)
		}
		out = append(out, sess)
	}
	return out, s.wrap(rows.Err())
}

// checkCallerEvent refuses an event a caller may not append: a store
// event type or id, an invalid event, data that is not JSON.
func checkCallerEvent(e *belay.Event) error {
	if belay.StoreEventType(e.Type) {
		return fmt.Errorf("%w: event type %q is written by the store only", belay.ErrInvalid, e.Type)
	}
	if strings.HasPrefix(e.ID, storeIDPrefix) {
		return fmt.Errorf("%w: event ids starting with %q are the store's", belay.ErrInvalid, storeIDPrefix)
	}
	if err := journal.Validate(e); err != nil {
		return fmt.Errorf("%w: %w", belay.ErrInvalid, err)
	}
	return checkJSON("event data", e.Data)
}

// Append journals caller events in a session.
func (s *Store) Append(ctx context.Context, id string, d belay.Durability, evs ...belay.Event) ([]uint64, error) {
	if err := checkSession(id); err != nil {
		return nil, err
	}
	fenced := false
	var runs []string
	for i := range evs {
		e := &evs[i]
		if err := checkCallerEvent(e); err != nil {
			return nil, err
		}
		if e.Epoch != 0 || e.Run != "" {
			fenced = true
			if e.Run != "" && !slices.Contains(runs, e.Run) {
				runs = append(runs, e.Run)
			}
		}
	}
	var seqs []uint64
	var after func(b *pgx.Batch, t *tx)
	var fence map[string]fenceRow
	if fenced {
		// The runs the events name are read in the lock's round trip.
		after = func(b *pgx.Batch, t *tx) { fence = queueFenceRead(b, id, runs) }
	}
	err := s.shared(ctx, id, d, fmt.Errorf("%w: session %s", belay.ErrNotFound, id), after, func(t *tx) error {
		if fenced {
			for i := range evs {
				if err := checkFence(t.session, &evs[i], fence); err != nil {
					return err
				}
				// After the session's queued writes (behind.go): one of
				// this lease's that was refused or lost fails it.
				if e := &evs[i]; e.Epoch != 0 {
					if err := s.behindErr(e.Run, e.Epoch); err != nil {
						return err
					}
				}
			}
		}
		var err error
		seqs, err = s.appendUnique(t, evs)
		return err
	})
	return seqs, err
}

// appendUnique emits evs, returning the original seq for an event id the
// session already holds (or that an earlier event of evs carries).
func (s *Store) appendUnique(t *tx, evs []belay.Event) ([]uint64, error) {
	var idems []string
	for _, e := range evs {
		if e.ID != "" {
			idems = append(idems, e.ID)
		}
	}
	known := map[string]uint64{}
	if len(idems) > 0 {
		rows, err := t.Query(t.ctx, `SELECT idem, seq FROM belay_events WHERE session = $1 AND idem = ANY($2)`, t.session, idems)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var idem string
			var seq int64
			if err := rows.Scan(&idem, &seq); err != nil {
				rows.Close()
				return nil, err
			}
			known[idem] = uint64(seq)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	seqs := make([]uint64, len(evs))
	for i, e := range evs {
		if seq, ok := known[e.ID]; ok && e.ID != "" {
			seqs[i] = seq
			continue
		}
		if len(e.Data) > 0 {
			var buf bytes.Buffer
			if err := json.Compact(&buf, e.Data); err != nil {
				return nil, fmt.Errorf("%w: event data: %v", belay.ErrInvalid, err)
			}
			e.Data = buf.Bytes()
		}
		seq, err := t.emit(e)
		if err != nil {
			return nil, err
		}
		seqs[i] = seq
		if e.ID != "" {
			known[e.ID] = seq
		}
	}
	return seqs, nil
}

// fenceRow is a run as an event's fence check reads it, under the
// session's lock.
type fenceRow struct {
	status belay.RunStatus
	epoch  uint64
	leased bool
}

// queueFenceRead queues, after the session's lock, the read of runs (of
// session); the map it returns is filled when the batch is read.
func queueFenceRead(b *pgx.Batch, session string, runs []string) map[string]fenceRow {
	rows := map[string]fenceRow{}
	b.Queue(`SELECT r.id, r.status, r.epoch, r.lease_owner IS NOT NULL FROM unnest($1::text[]) AS k(id)
		CROSS JOIN LATERAL (SELECT id, status, epoch, lease_owner, session FROM belay_runs WHERE id = k.id OFFSET 0) r
		WHERE r.session = $2`, runs, session).Query(func(r pgx.Rows) error {
		for r.Next() {
			var id string
			var f fenceRow
			var epoch int64
			if err := r.Scan(&id, &f.status, &epoch, &f.leased); err != nil {
				return err
			}
			f.epoch = uint64(epoch)
			rows[id] = f
		}
		return r.Err()
	})
	return rows
}

// checkFence checks an event that names a run (and maybe an epoch)
// against the run as read under the session lock (queueFenceRead).
func checkFence(session string, e *belay.Event, runs map[string]fenceRow) error {
	if e.Run == "" {
		return fmt.Errorf("%w: an event with an epoch must name its run", belay.ErrInvalid)
	}
	r, ok := runs[e.Run]
	if !ok {
		return fmt.Errorf("%w: run %s in session %s", belay.ErrNotFound, e.Run, session)
	}
	if e.Epoch == 0 {
		return nil
	}
	if r.status.Terminal() {
		return fmt.Errorf("%w: run %s is %s", belay.ErrTerminal, e.Run, r.status)
	}
	if !r.leased || r.epoch != e.Epoch {
		return &belay.StaleEpochError{Kind: "run", ID: e.Run, Got: e.Epoch, Current: r.epoch}
	}
	return nil
}

// Events returns events after seq after.
func (s *Store) Events(ctx context.Context, id string, after uint64, limit int) ([]belay.Event, error) {
	if err := checkSession(id); err != nil {
		return nil, err
	}
	if s.isClosed() {
		return nil, belay.ErrStoreClosed
	}
	q := `SELECT seq, ts, type, coalesce(idem, ''), coalesce(run, ''), epoch, data::text FROM belay_events WHERE session = $1 AND seq > $2 ORDER BY seq`
	if limit > 0 {
		q += fmt.Sprintf(` LIMIT %d`, limit)
	}
	rows, err := s.pool.Query(ctx, q, id, int64(after))
	if err != nil {
		return nil, s.wrap(err)
	}
	defer rows.Close()
	out := []belay.Event{}
	for rows.Next() {
		var e belay.Event
		var seq, epoch int64
		var data string
		if err := rows.Scan(&seq, &e.TS, &e.Type, &e.ID, &e.Run, &epoch, &data); err != nil {
			return nil, s.wrap(err)
		}
		e.Seq, e.Epoch, e.TS, e.Data = uint64(seq), uint64(epoch), e.TS.UTC(), json.RawMessage(data)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap(err)
	}
	if len(out) == 0 {
		if _, err := s.Session(ctx, id); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// scanPage is how many events ScanEvents reads per query: memory stays
// bounded and no query holds a snapshot for a whole long session.
const scanPage = 1000

// ScanEvents calls fn for each event after seq after, in order, a page
// at a time.
func (s *Store) ScanEvents(ctx context.Context, id string, after uint64, fn func(belay.Event) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if _, err := s.Session(ctx, id); err != nil {
		return err
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		rows, err := s.pool.Query(ctx, `SELECT seq, ts, type, coalesce(idem, ''), coalesce(run, ''), epoch, data::text
			FROM belay_events WHERE session = $1 AND seq > $2 ORDER BY seq LIMIT $3`, id, int64(after), scanPage)
		if err != nil {
			return s.wrap(err)
		}
		n := 0
		var ferr error
		for rows.Next() {
			var e belay.Event
			var seq, epoch int64
			var data []byte
			if err := rows.Scan(&seq, &e.TS, &e.Type, &e.ID, &e.Run, &epoch, &data); err != nil {
				rows.Close()
				return s.wrap(err)
			}
			e.Seq, e.Epoch, e.TS, e.Data = uint64(seq), uint64(epoch), e.TS.UTC(), json.RawMessage(data)
			n++
			after = e.Seq
			if ferr = fn(e); ferr != nil {
				break
			}
		}
		rows.Close()
		if ferr != nil {
			return ferr
		}
		if err := rows.Err(); err != nil {
			return s.wrap(err)
		}
		if n < scanPage {
			return nil
		}
	}
}

// DeleteSession deletes one session and everything in it. It refuses a
// session with a queued or running run, or (unless force) an unsettled
// delivery, with belay.ErrActive.
func (s *Store) DeleteSession(ctx context.Context, id string, force bool) error {
	if err := checkSession(id); err != nil {
		return err
	}
	return s.withSession(ctx, id, belay.Sync, func(t *tx) error {
		var active bool
		var unsettled string
		err := t.QueryRow(ctx, `SELECT
			EXISTS (SELECT 1 FROM belay_runs WHERE session = $1 AND status = 'queued')
				OR EXISTS (SELECT 1 FROM belay_runs WHERE session = $1 AND status = 'running'),
			coalesce((SELECT min(d.id) FROM belay_deliveries d WHERE d.session = $1 AND `+holdsRetention+`), '')`, id).Scan(&active, &unsettled)
		if err != nil {
			return err
		}
		if active {
			return fmt.Errorf("%w: session %s has a queued or running run; cancel it first", belay.ErrActive, id)
		}
		if unsettled != "" && !force {
			return fmt.Errorf("%w: session %s has unsettled delivery %s; settle it, or delete anyway with --force", belay.ErrActive, id, unsettled)
		}
		return deleteSession(t, id)
	})
}

// deleteSession deletes session id in t, which holds its lock, so no
// write adds a row of it meanwhile; its events, runs and deliveries go
// with it (migration 10's trigger), its notifications with its
// deliveries.
func deleteSession(t *tx, id string) error {
	_, err := t.Exec(t.ctx, `DELETE FROM belay_sessions WHERE id = $1`, id)
	return err
}
