package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/ids"
	"github.com/belayhq/belay/store"
)

const runCols = `id, session, coalesce(idem_key, ''), status, phase, priority, provider, model, epoch,
	lease_owner, lease_granted_at, lease_expires_at, attempt, error_class, error_message, reason,
	deadline, input_seq, ref, created_at, updated_at, started_at, ended_at,
	cancel_reason, cancel_by, cancel_at, activity, tags, meta`

// runRow is a row of runCols as scanned, before it is decoded.
type runRow struct {
	r                                   belay.Run
	epoch, inputSeq                     int64
	owner, errClass, errMsg             *string
	granted, expires, deadline, started *time.Time
	ended                               *time.Time
	ref, activity, meta                 []byte
	cancelReason                        *string
	cancelBy                            string
	cancelAt                            *time.Time
}

func (x *runRow) dest() []any {
	r := &x.r
	return []any{&r.ID, &r.Session, &r.IdempotencyKey, &r.Status, &r.Phase, &r.Priority, &r.Provider, &r.Model, &x.epoch,
		&x.owner, &x.granted, &x.expires, &r.Attempt, &x.errClass, &x.errMsg, &r.Reason,
		&x.deadline, &x.inputSeq, &x.ref, &r.CreatedAt, &r.UpdatedAt, &x.started, &x.ended,
		&x.cancelReason, &x.cancelBy, &x.cancelAt, &x.activity, &r.Tags, &x.meta}
}

// run decodes the scanned row.
func (x *runRow) run() (belay.Run, error) {
	r := x.r
	if len(r.Tags) == 0 {
		r.Tags = nil
	}
	if len(x.meta) > 0 && string(x.meta) != "null" {
		if err := json.Unmarshal(x.meta, &r.Meta); err != nil {
			return r, fmt.Errorf("%w: run %s meta: %v", belay.ErrCorruptRecord, r.ID, err)
		}
	}
	if x.cancelReason != nil {
		r.CancelRequest = &belay.CancelRequest{Reason: *x.cancelReason, By: x.cancelBy, At: utc(x.cancelAt)}
	}
	if len(x.activity) > 0 {
		r.Activity = &belay.RunActivity{}
		if err := json.Unmarshal(x.activity, r.Activity); err != nil {
			return r, fmt.Errorf("%w: run %s activity: %v", belay.ErrCorruptRecord, r.ID, err)
		}
		r.Activity.LastProgress = r.Activity.LastProgress.UTC()
	}
	r.Epoch, r.InputSeq = uint64(x.epoch), uint64(x.inputSeq)
	if x.owner != nil {
		r.Lease = &belay.Lease{Owner: *x.owner, Epoch: r.Epoch, GrantedAt: utc(x.granted), ExpiresAt: utc(x.expires)}
	}
	if x.errClass != nil {
		r.Error = &belay.RunError{Class: belay.ErrorClass(*x.errClass), Message: deref(x.errMsg)}
	}
	if err := json.Unmarshal(x.ref, &r.Ref); err != nil {
		return r, fmt.Errorf("%w: run %s ref: %v", belay.ErrCorruptRecord, r.ID, err)
	}
	r.Deadline, r.StartedAt, r.EndedAt = utc(x.deadline), utc(x.started), utc(x.ended)
	r.CreatedAt, r.UpdatedAt = r.CreatedAt.UTC(), r.UpdatedAt.UTC()
	return r, nil
}

func scanRun(row pgx.Row) (belay.Run, error) {
	var x runRow
	if err := row.Scan(x.dest()...); err != nil {
		return x.r, err
	}
	return x.run()
}

func utc(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func checkRun(id string) error {
	if err := ids.Check(ids.Run, id); err != nil {
		return fmt.Errorf("%w: %v", belay.ErrInvalid, err)
	}
	return nil
}

// CreateRun creates a queued run, or returns the one its idempotency key
// already made.
func (s *Store) CreateRun(ctx context.Context, in belay.RunInput) (belay.Run, bool, error) {
	res, err := s.Submit(ctx, store.SubmitInput{RunInput: in, Policy: belay.PolicyEnqueue})
	return res.Run, res.Created, err
}

// createRun journals run.created and inserts the run row in t. A front
// run goes ahead of the session's queued runs.
func (s *Store) createRun(t *tx, id string, in belay.RunInput, sessProvider, sessModel string, front bool, out *belay.Run) error {
	p := belay.RunCreatedData{
		ID: id, Key: in.IdempotencyKey, Priority: in.Priority,
		Provider: in.Provider, Model: in.Model, Deadline: in.Deadline.UTC(), Input: in.Input, Front: front,
		Tags: in.Tags, Meta: in.Meta,
	}
	if p.Provider == "" {
		p.Provider, p.Model = sessProvider, sessModel
	}
	if in.Deadline.IsZero() {
		p.Deadline = time.Time{}
	}
	data, err := marshal(p)
	if err != nil {
		return err
	}
	e := belay.Event{Type: belay.EventRunCreated, Run: p.ID, Data: data}
	if in.IdempotencyKey != "" {
		e.ID = storeIDPrefix + "run/" + in.IdempotencyKey
	}
	key := nullable(in.IdempotencyKey)
	seq, err := t.emit(e)
	if err != nil {
		return err
	}
	tags, err := json.Marshal(append([]string{}, in.Tags...))
	if err != nil {
		return err
	}
	var meta *string
	if len(in.Meta) > 0 {
		raw, err := json.Marshal(in.Meta)
		if err != nil {
			return err
		}
		meta = nullable(string(raw))
	}
	if front {
		t.reready = true
	} else {
		t.readyNew = append(t.readyNew, p.ID)
	}
	r := lockedRun{out: out}
	r.set(t, p.ID, insertRun, []string{p.ID}, []string{t.session}, []*string{key}, []int64{int64(p.Priority)},
		[]string{p.Provider}, []string{p.Model}, []int64{int64(seq)}, []*time.Time{nullableTime(p.Deadline)},
		[]time.Time{t.now}, []bool{front}, []string{string(tags)}, []*string{meta})
	s.remember(s.runSessions, p.ID, t.session)
	return nil
}

// insertRun inserts queued runs: their ids, sessions, idempotency keys,
// priorities, providers, models, input seqs, deadlines, creation times,
// front flags, tags (each a JSON array) and meta (JSON).
var insertRun = merged(`INSERT INTO belay_runs (id, session, idem_key, status, phase, priority, provider, model, input_seq, deadline, created_at, updated_at, front, tags, meta)
	SELECT k.id, k.session, k.idem_key, 'queued', 'queued', k.priority, k.provider, k.model, k.input_seq, k.deadline, k.at, k.at, k.front,
		ARRAY(SELECT tag FROM jsonb_array_elements_text(k.tags::jsonb) WITH ORDINALITY AS x(tag, n) ORDER BY n), k.meta::jsonb
	FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::text[], $7::bigint[], $8::timestamptz[],
		$9::timestamptz[], $10::bool[], $11::text[], $12::text[])
		AS k(id, session, idem_key, priority, provider, model, input_seq, deadline, at, front, tags, meta)`)

// Run returns one run.
func (s *Store) Run(ctx context.Context, id string) (belay.Run, error) {
	if err := checkRun(id); err != nil {
		return belay.Run{}, err
	}
	if s.isClosed() {
		return belay.Run{}, belay.ErrStoreClosed
	}
	r, err := scanRun(s.pool.QueryRow(ctx, `SELECT `+runCols+` FROM belay_runs WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return belay.Run{}, fmt.Errorf("%w: run %s", belay.ErrNotFound, id)
	}
	return r, s.wrap(err)
}

// RunInput returns the input journaled in the run's run.created event.
func (s *Store) RunInput(ctx context.Context, id string) (json.RawMessage, error) {
	if err := checkRun(id); err != nil {
		return nil, err
	}
	var data []byte
	err := s.pool.QueryRow(ctx, `SELECT e.data::text FROM belay_runs r JOIN belay_events e ON e.session = r.session AND e.seq = r.input_seq
		WHERE r.id = $1 AND e.type = $2`, id, belay.EventRunCreated).Scan(&data)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: run %s", belay.ErrNotFound, id)
	}
	if err != nil {
		return nil, s.wrap(err)
	}
	var p belay.RunCreatedData
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, fmt.Errorf("%w: run %s input: %v", belay.ErrCorruptRecord, id, err)
	}
	return p.Input, nil
}

// runFilter is the WHERE clause of a belay.RunFilter and its arguments.
// With a tag it also says tags <> '{}', the predicate of the partial GIN
// index of tags (migration 12), which tags @> ARRAY[tag] implies but the
// planner cannot prove.
func runFilter(f belay.RunFilter) (string, []any) {
	var since any
	if !f.Since.IsZero() {
		since = f.Since.UTC()
	}
	return `($1 = '' OR session = $1) AND ($2 = '' OR status = $2) AND ($3 = '' OR provider = $3)
		AND ($4 = '' OR (tags @> ARRAY[$4] AND tags <> '{}')) AND ($5::timestamptz IS NULL OR created_at >= $5)
		AND (NOT $6 OR status IN ('failed', 'stranded'))`,
		[]any{f.Session, string(f.Status), f.Provider, f.Tag, since, f.Failed}
}

// Runs lists the runs that match f in creation order.
func (s *Store) Runs(ctx context.Context, f belay.RunFilter) ([]belay.Run, error) {
	var out []belay.Run
	err := s.eachRun(ctx, f, func(r *belay.Run) { out = append(out, *r) })
	return out, err
}

// RunStatusCounts counts the runs by status.
func (s *Store) RunStatusCounts(ctx context.Context) (map[belay.RunStatus]int, error) {
	rows, err := s.pool.Query(ctx, `SELECT status, count(*) FROM belay_runs GROUP BY status`)
	if err != nil {
		return nil, s.wrap(err)
	}
	counts := map[belay.RunStatus]int{}
	var status string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&status, &n}, func() error {
		counts[belay.RunStatus(status)] = n
		return nil
	})
	if err != nil {
		return nil, s.wrap(err)
	}
	return counts, nil
}

// ListRuns selects a page of runs across sessions (GET /v1/runs): the
// filter is applied in SQL (by the session, status, tag and time
// indexes), the order and cursor of the caller's functions to the rows
// that match, keeping only the page in memory.
func (s *Store) ListRuns(ctx context.Context, f belay.RunFilter, less func(a, b *belay.Run) bool, after func(*belay.Run) bool, limit int) ([]belay.Run, bool, error) {
	if limit <= 0 {
		return nil, false, nil
	}
	page := make([]belay.Run, 0, limit+1)
	more := false
	err := s.eachRun(ctx, f, func(r *belay.Run) {
		if after != nil && !after(r) {
			return
		}
		if len(page) == limit && !less(r, &page[limit-1]) {
			more = true
			return
		}
		i := sort.Search(len(page), func(i int) bool { return less(r, &page[i]) })
		page = slices.Insert(page, i, *r)
		if len(page) > limit {
			page, more = page[:limit], true
		}
	})
	if err != nil {
		return nil, false, err
	}
	return page, more, nil
}

// eachRun calls fn with each run that matches f, in creation order; r is
// valid only until fn returns.
func (s *Store) eachRun(ctx context.Context, f belay.RunFilter, fn func(r *belay.Run)) error {
	if s.isClosed() {
		return belay.ErrStoreClosed
	}
	if f.Session != "" {
		if _, err := s.Session(ctx, f.Session); err != nil {
			return err
		}
	}
	where, args := runFilter(f)
	rows, err := s.pool.Query(ctx, `SELECT `+runCols+` FROM belay_runs WHERE `+where+` ORDER BY ord`, args...)
	if err != nil {
		return s.wrap(err)
	}
	defer rows.Close()
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return s.wrap(err)
		}
		fn(&r)
	}
	return s.wrap(rows.Err())
}

// lockedRun is a run read inside its session's lock.
type lockedRun struct {
	status belay.RunStatus
	phase  belay.RunPhase
	epoch  uint64
	owner  *string
	expiry *time.Time
	// cancelRequested says the run carries a cancel request.
	cancelRequested bool
	// out is the run as the write leaves it; returned says set read it
	// back with the write's own statement.
	out      *belay.Run
	returned bool
}

// set queues the statement that changes the run's row (an INSERT or an
// UPDATE of it by id, the write's last change to the row) with the row it leaves
// returned: the write needs no read of the final state after it. A
// lockedRun without out is changed without a read.
func (r *lockedRun) set(t *tx, id, sql string, args ...any) {
	if r.out == nil {
		// A run the write changes beside the one it returns.
		t.queue(sql, args...)
		return
	}
	q := t.queue(sql+returningRun, args...)
	q.QueryRow(func(row pgx.Row) (err error) {
		*r.out, err = scanRun(row)
		return err
	})
	if mergeable[q.SQL] {
		if t.returns == nil {
			t.returns = map[*pgx.QueuedQuery]runOut{}
		}
		t.returns[q] = runOut{id: id, out: r.out}
	}
	r.returned = true
}

// withRun runs fn under the lock of the session that holds run id, with
// the run as it is under that lock, and returns the run as fn left it.
func (s *Store) withRun(ctx context.Context, id string, fn func(t *tx, r *lockedRun) error) (belay.Run, error) {
	return s.withRunOpen(ctx, id, nil, fn)
}

// withRunOpen is withRun with more reads (extra) queued in the lock's
// round trip, after the lock.
func (s *Store) withRunOpen(ctx context.Context, id string, extra func(b *pgx.Batch, t *tx), fn func(t *tx, r *lockedRun) error) (belay.Run, error) {
	if err := checkRun(id); err != nil {
		return belay.Run{}, err
	}
	session, ok := s.recall(s.runSessions, id)
	if !ok {
		err := s.pool.QueryRow(ctx, `SELECT session FROM belay_runs WHERE id = $1`, id).Scan(&session)
		if errors.Is(err, pgx.ErrNoRows) {
			return belay.Run{}, fmt.Errorf("%w: run %s", belay.ErrNotFound, id)
		}
		if err != nil {
			return belay.Run{}, s.wrap(err)
		}
		s.remember(s.runSessions, id, session)
	}
	var out belay.Run
	r := lockedRun{out: &out}
	err := s.shared(ctx, session, belay.Sync, fmt.Errorf("%w: run %s", belay.ErrNotFound, id), func(b *pgx.Batch, t *tx) {
		// Read after the lock is granted (statements of a pipeline run in
		// order), so the run is as the last writer left it.
		b.Queue(`SELECT status, phase, epoch, lease_owner, lease_expires_at, cancel_reason IS NOT NULL FROM belay_runs WHERE id = $1`, id).QueryRow(func(row pgx.Row) error {
			var epoch int64
			err := row.Scan(&r.status, &r.phase, &epoch, &r.owner, &r.expiry, &r.cancelRequested)
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("%w: run %s", belay.ErrNotFound, id)
			}
			r.epoch = uint64(epoch)
			return err
		})
		if extra != nil {
			extra(b, t)
		}
	}, func(t *tx) error {
		// A write made again alone after its shared transaction failed
		// starts over: what the failed attempt set was never committed.
		r.returned, out = false, belay.Run{}
		if phase, ok := t.behindPhase[id]; ok {
			// The session's queued writes this write carries moved it.
			r.phase, r.status = phase, phase.Status()
		}
		if err := fn(t, &r); err != nil {
			return err
		}
		if r.returned {
			return nil
		}
		t.tail = append(t.tail, func(b *pgx.Batch) {
			b.Queue(`SELECT `+runCols+` FROM belay_runs WHERE id = $1`, id).QueryRow(func(row pgx.Row) (err error) {
				out, err = scanRun(row)
				return err
			})
		})
		return nil
	})
	return out, err
}

// AcquireRunLease grants owner a lease and increments the run's epoch.
func (s *Store) AcquireRunLease(ctx context.Context, id, owner string, ttl time.Duration, takeover uint64) (belay.Run, error) {
	if owner == "" || ttl <= 0 {
		return belay.Run{}, fmt.Errorf("%w: a lease needs an owner and a positive ttl", belay.ErrInvalid)
	}
	defer s.forgetLease(id) // a new lease writes afresh (behind.go)
	return s.withRun(ctx, id, func(t *tx, r *lockedRun) error {
		if r.status.Terminal() {
			return fmt.Errorf("%w: run %s is %s", belay.ErrTerminal, id, r.status)
		}
		if r.owner != nil && t.now.Before(*r.expiry) && takeover != r.epoch {
			return fmt.Errorf("%w: run %s is leased by %s at epoch %d until %s",
				belay.ErrLeaseHeld, id, *r.owner, r.epoch, r.expiry.UTC().Format(time.RFC3339))
		}
		expires := t.now.Add(ttl)
		data, err := marshal(belay.RunLeasedData{Owner: owner, ExpiresAt: expires, Takeover: takeover})
		if err != nil {
			return err
		}
		epoch := r.epoch + 1
		if _, err := t.emit(belay.Event{Type: belay.EventRunLeased, Run: id, Epoch: epoch, Data: data}); err != nil {
			return err
		}
		if r.status == belay.RunQueued {
			t.reready = true // it runs now: no run of its session is ready
		}
		r.set(t, id, `UPDATE belay_runs SET epoch = $2, lease_owner = $3, lease_granted_at = $4, lease_expires_at = $5, updated_at = $4,
			phase = CASE WHEN phase = 'queued' THEN 'admitted' ELSE phase END,
			status = CASE WHEN phase = 'queued' THEN 'running' ELSE status END,
			started_at = CASE WHEN phase = 'queued' THEN $4 ELSE started_at END
			WHERE id = $1`, id, int64(epoch), owner, t.now, expires)
		return nil
	})
}

// leased checks that the run is held at epoch.
func leased(id string, r *lockedRun, epoch uint64) error {
	if r.status.Terminal() {
		return fmt.Errorf("%w: run %s is %s", belay.ErrTerminal, id, r.status)
	}
	if epoch != r.epoch {
		return &belay.StaleEpochError{Kind: "run", ID: id, Got: epoch, Current: r.epoch}
	}
	if r.owner == nil {
		return fmt.Errorf("%w: run %s has no lease at epoch %d", belay.ErrNotLeased, id, epoch)
	}
	return nil
}

// RenewRunLease extends the lease of the given epoch and records the
// run's activity when act is not nil.
func (s *Store) RenewRunLease(ctx context.Context, id string, epoch uint64, ttl time.Duration, act *belay.RunActivity) (belay.Run, error) {
	if ttl <= 0 {
		return belay.Run{}, fmt.Errorf("%w: ttl must be positive", belay.ErrInvalid)
	}
	return s.withRun(ctx, id, func(t *tx, r *lockedRun) error {
		if err := leased(id, r, epoch); err != nil {
			return err
		}
		p := belay.RunRenewedData{ExpiresAt: t.now.Add(ttl)}
		var activity any
		if act != nil {
			a := *act
			a.LastProgress = a.LastProgress.UTC()
			p.Activity = &a
			raw, err := json.Marshal(a)
			if err != nil {
				return err
			}
			activity = string(raw)
		}
		data, err := marshal(p)
		if err != nil {
			return err
		}
		if _, err := t.emit(belay.Event{Type: belay.EventRunRenewed, Run: id, Epoch: epoch, Data: data}); err != nil {
			return err
		}
		r.set(t, id, `UPDATE belay_runs SET lease_expires_at = $2, updated_at = $3, activity = coalesce($4::jsonb, activity) WHERE id = $1`,
			id, p.ExpiresAt, t.now, activity)
		return nil
	})
}

// ReleaseRunLease drops the lease of the given epoch.
func (s *Store) ReleaseRunLease(ctx context.Context, id string, epoch uint64) (belay.Run, error) {
	return s.withRun(ctx, id, func(t *tx, r *lockedRun) error {
		if err := leased(id, r, epoch); err != nil {
			return err
		}
		if _, err := t.emit(belay.Event{Type: belay.EventRunReleased, Run: id, Epoch: epoch, Data: json.RawMessage(`{}`)}); err != nil {
			return err
		}
		r.set(t, id, `UPDATE belay_runs SET lease_owner = NULL, lease_granted_at = NULL, lease_expires_at = NULL, updated_at = $2 WHERE id = $1`, id, t.now)
		return nil
	})
}

// UpdateRun changes a run under its lease.
func (s *Store) UpdateRun(ctx context.Context, id string, epoch uint64, u belay.RunUpdate) (belay.Run, error) {
	if u.Phase != "" && (u.Phase.Status() == "" || u.Phase == belay.PhaseQueued) {
		return belay.Run{}, fmt.Errorf("%w: phase %q", belay.ErrInvalid, u.Phase)
	}
	if u.Error != nil && u.Error.Class == "" {
		return belay.Run{}, fmt.Errorf("%w: a run error needs a class", belay.ErrInvalid)
	}
	if err := checkJSON("run update data", u.Data); err != nil {
		return belay.Run{}, err
	}
	if d := u.Deliver; d != nil {
		if err := checkDeliveryInput(*d); err != nil {
			return belay.Run{}, err
		}
	}
	var extra func(b *pgx.Batch, t *tx)
	if d := u.Deliver; d != nil && d.Key != "" {
		// Whether its (Key, Type) was posted is read in the lock's round
		// trip.
		extra = func(b *pgx.Batch, t *tx) { queueDeliveryKey(b, t, d.Type, d.Key) }
	}
	run, err := s.withRunOpen(ctx, id, extra, func(t *tx, r *lockedRun) error {
		// After the session's queued writes (behind.go): one of this
		// lease's that was refused or lost fails it.
		if err := s.behindErr(id, epoch); err != nil {
			return err
		}
		if err := leased(id, r, epoch); err != nil {
			return err
		}
		return s.updateRun(t, id, epoch, r, u)
	})
	if err == nil && run.Status.Terminal() {
		s.forgetLease(id)
	}
	return run, err
}

// updateRun journals run.updated (and the delivery it posts) and applies it.
func (s *Store) updateRun(t *tx, id string, epoch uint64, r *lockedRun, u belay.RunUpdate) error {
	if d := u.Deliver; d != nil && d.Session != "" && d.Session != t.session {
		return fmt.Errorf("%w: a run's delivery goes to its own session", belay.ErrInvalid)
	}
	data, err := marshal(belay.RunUpdatedData{Phase: u.Phase, Attempt: u.Attempt, Error: u.Error, Reason: u.Reason, Ref: u.Ref, Data: u.Data})
	if err != nil {
		return err
	}
	if _, err := t.emit(belay.Event{Type: belay.EventRunUpdated, Run: id, Epoch: epoch, Data: data}); err != nil {
		return err
	}
	phase, status := r.phase, r.status
	if u.Phase != "" {
		phase, status = u.Phase, u.Phase.Status()
	}
	var errClass, errMsg, ref *string
	if u.Error != nil {
		class, msg := string(u.Error.Class), u.Error.Message
		errClass, errMsg = &class, &msg
	}
	if u.Ref != nil {
		raw, err := json.Marshal(u.Ref)
		if err != nil {
			return err
		}
		ref = nullable(string(raw))
	}
	terminal := status.Terminal()
	if terminal {
		t.reready = true // the session's next run may be ready now
	}
	t.phaseSet = append(t.phaseSet, id)
	r.set(t, id, updateRunPhase, []string{id}, []string{string(phase)}, []string{string(status)}, []int64{int64(u.Attempt)},
		[]*string{errClass}, []*string{errMsg}, []string{u.Reason}, []*string{ref}, []bool{terminal}, []time.Time{t.now})
	if ref != nil {
		t.queue(`UPDATE belay_sessions SET ref = $2::jsonb WHERE id = $1`, t.session, *ref)
	}
	if d := u.Deliver; d != nil {
		d.Session = t.session
		if _, _, err := s.postDelivery(t, *d); err != nil {
			return err
		}
	}
	return nil
}

// updateRunPhase sets runs' phases and what comes with them: their ids,
// phases, statuses, attempts (0 keeps it), error classes and messages
// (NULL keeps them), reasons ("" keeps it), refs (NULL keeps it), whether
// each ends (its lease goes) and the times.
var updateRunPhase = merged(`UPDATE belay_runs r SET phase = k.to_phase, status = k.to_status,
		attempt = CASE WHEN k.to_attempt <> 0 THEN k.to_attempt ELSE r.attempt END,
		error_class = coalesce(k.err_class, r.error_class),
		error_message = CASE WHEN k.err_class IS NOT NULL THEN k.err_message ELSE r.error_message END,
		reason = CASE WHEN k.to_reason <> '' THEN k.to_reason ELSE r.reason END,
		ref = coalesce(k.to_ref::jsonb, r.ref),
		lease_owner = CASE WHEN k.ends THEN NULL ELSE r.lease_owner END,
		lease_granted_at = CASE WHEN k.ends THEN NULL ELSE r.lease_granted_at END,
		lease_expires_at = CASE WHEN k.ends THEN NULL ELSE r.lease_expires_at END,
		ended_at = CASE WHEN k.ends THEN k.at ELSE r.ended_at END,
		updated_at = k.at
	FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::text[], $7::text[], $8::text[], $9::bool[], $10::timestamptz[])
		AS k(run, to_phase, to_status, to_attempt, err_class, err_message, to_reason, to_ref, ends, at)
	WHERE r.id = k.run`)

// CancelQueuedRun ends a queued, never leased run as cancelled.
func (s *Store) CancelQueuedRun(ctx context.Context, id, reason string) (belay.Run, error) {
	if reason == "" {
		reason = "cancelled while queued"
	}
	return s.withRun(ctx, id, func(t *tx, r *lockedRun) error {
		if r.status != belay.RunQueued || r.owner != nil {
			return fmt.Errorf("%w: run %s is %s, not queued", belay.ErrActive, id, r.status)
		}
		return s.updateRun(t, id, 0, r, belay.RunUpdate{
			Phase: belay.PhaseCancelled, Reason: reason,
			Error: &belay.RunError{Class: belay.ClassCancelled, Message: reason},
		})
	})
}
