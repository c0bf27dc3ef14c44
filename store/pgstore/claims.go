package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/ids"
	"github.com/belayhq/belay/store"
)

// This file holds the decisions that must hold across nodes (issue 14):
// submit under a follow-up policy, claims under the caps with one running
// run per session, owner records and the rescue of their runs, durable
// cancel requests. Each is one transaction; every time is the database's.

// claimLock is the advisory lock key that serializes claims across nodes:
// with caps set, a claim counts the running runs from the claims
// committed before it. One running run per session does not need it (a
// claim decides on a session under its row lock, on a snapshot taken
// after it got it), but claims taking turns cost less than claims racing
// for the same candidates: measured with 3 nodes and no caps, 931 and 841
// runs/s with the lock, 742 and 759 without. Claims are short; a session
// busy with another write is skipped (SKIP LOCKED), not waited for.
const claimLock int64 = 0x62656c6179_03 // "belay", 3

// defaultClaimMax bounds one claim when the caller names no maximum, as
// in fsstore.
const defaultClaimMax = 64

// queuedOrder is the order of a session's queued runs: front runs first,
// the newest first, then the others first in, first out.
const queuedOrder = `front DESC, CASE WHEN front THEN -ord ELSE ord END`

// Submit creates a run under a follow-up policy (see store.Store), in one
// transaction under the session's lock (shared with other writes in
// flight, combine.go).
func (s *Store) Submit(ctx context.Context, in store.SubmitInput) (store.SubmitResult, error) {
	if err := checkSubmit(in); err != nil {
		return store.SubmitResult{}, err
	}
	var res store.SubmitResult
	var existing string
	err := s.shared(ctx, in.Session, belay.Sync, fmt.Errorf("%w: session %s", belay.ErrNotFound, in.Session), nil, func(t *tx) error {
		return s.submit(t, in, ids.New(ids.Run), &res, &existing)
	})
	if err != nil {
		return store.SubmitResult{}, err
	}
	if existing != "" {
		run, err := s.Run(ctx, existing)
		return store.SubmitResult{Run: run}, err
	}
	return res, nil
}

// checkSubmit refuses a submission that cannot be made whatever the
// session holds.
func checkSubmit(in store.SubmitInput) error {
	if !in.Policy.Valid() {
		return fmt.Errorf("%w: policy %q is not enqueue, reject, interrupt or replace", belay.ErrInvalid, in.Policy)
	}
	if err := checkJSON("run input", in.Input); err != nil {
		return err
	}
	if err := belay.CheckTags(in.Tags, in.Meta); err != nil {
		return err
	}
	if err := belay.CheckPriority(in.Priority); err != nil {
		return err
	}
	if in.Claim != nil {
		// Checked, though this store leaves every submitted run queued
		// for ClaimRuns (SubmitInput.Claim): leased there in batches, a
		// run costs the database less than leased alone as it is
		// submitted (docs/postgres.md).
		if err := in.Claim.Check(); err != nil {
			return err
		}
	}
	return checkSession(in.Session)
}

// submit makes one submission in t, under its session's lock: run id if
// it creates one (res says what it did), or the run its idempotency key
// already made (existing).
func (s *Store) submit(t *tx, in store.SubmitInput, id string, res *store.SubmitResult, existing *string) error {
	if in.IdempotencyKey != "" {
		err := t.QueryRow(t.ctx, `SELECT id FROM belay_runs WHERE session = $1 AND idem_key = $2`, in.Session, in.IdempotencyKey).Scan(existing)
		if err == nil {
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
	}
	front := false
	if p := in.Policy; p == belay.PolicyReject || p == belay.PolicyReplace || p == belay.PolicyInterrupt {
		// One probe per status, each on its partial index: a status IN
		// (...) walks every run the session ever had.
		rows, err := t.Query(t.ctx, `SELECT id, status, asked FROM (
				SELECT id, status, cancel_reason IS NOT NULL AS asked, front, ord FROM belay_runs WHERE session = $1 AND status = 'running'
				UNION ALL
				SELECT id, status, cancel_reason IS NOT NULL, front, ord FROM belay_runs WHERE session = $1 AND status = 'queued'
			) a ORDER BY status = 'running' DESC, `+queuedOrder, in.Session)
		if err != nil {
			return err
		}
		var active string
		var activeAsked bool
		var queued []string
		for rows.Next() {
			var rid, status string
			var asked bool
			if err := rows.Scan(&rid, &status, &asked); err != nil {
				rows.Close()
				return err
			}
			if belay.RunStatus(status) == belay.RunRunning {
				if active == "" {
					active, activeAsked = rid, asked
				}
			} else {
				queued = append(queued, rid)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		switch p {
		case belay.PolicyReject:
			if active != "" || len(queued) > 0 {
				return store.ErrConversationBusy
			}
		case belay.PolicyReplace:
			reason := "replaced by " + id
			for _, q := range queued {
				err := s.updateRun(t, q, 0, &lockedRun{status: belay.RunQueued, phase: belay.PhaseQueued}, belay.RunUpdate{
					Phase: belay.PhaseCancelled, Reason: reason,
					Error: &belay.RunError{Class: belay.ClassCancelled, Message: reason},
				})
				if err != nil {
					return err
				}
			}
			res.Cancelled = queued
		case belay.PolicyInterrupt:
			front = true
			if active != "" {
				res.Interrupted = active
				if !activeAsked {
					if err := s.requestCancel(t, &lockedRun{}, active, "interrupted by run "+id, id); err != nil {
						return err
					}
				}
			}
		}
	}
	if err := s.createRun(t, id, in.RunInput, t.provider, t.model, front, &res.Run); err != nil {
		return err
	}
	res.Created = true
	return nil
}

// requestCancel journals run.cancel_requested on a running run in t.
func (s *Store) requestCancel(t *tx, r *lockedRun, id, reason, by string) error {
	data, err := marshal(belay.CancelRequestedData{Reason: reason, By: by})
	if err != nil {
		return err
	}
	if _, err := t.emit(belay.Event{Type: belay.EventRunCancelRequested, Run: id, Data: data}); err != nil {
		return err
	}
	r.set(t, id, `UPDATE belay_runs SET cancel_reason = $2, cancel_by = $3, cancel_at = $4, updated_at = $4 WHERE id = $1`, id, reason, by, t.now)
	return nil
}

// RequestCancel cancels a queued run at once, and records a durable cancel
// request on a running one.
func (s *Store) RequestCancel(ctx context.Context, id, reason string) (belay.Run, error) {
	if reason == "" {
		reason = "cancelled by request"
	}
	var terminal error
	run, err := s.withRun(ctx, id, func(t *tx, r *lockedRun) error {
		switch {
		case r.status.Terminal():
			terminal = fmt.Errorf("%w: run %s is %s", belay.ErrTerminal, id, r.status)
			return nil
		case r.cancelRequested:
			return nil
		case r.status == belay.RunQueued && r.owner == nil:
			return s.updateRun(t, id, 0, r, belay.RunUpdate{
				Phase: belay.PhaseCancelled, Reason: reason,
				Error: &belay.RunError{Class: belay.ClassCancelled, Message: reason},
			})
		}
		return s.requestCancel(t, r, id, reason, "")
	})
	if err != nil {
		return belay.Run{}, err
	}
	return run, terminal
}

// Counts returns how many runs are queued and running.
func (s *Store) Counts(ctx context.Context) (store.Counts, error) {
	if s.isClosed() {
		return store.Counts{}, belay.ErrStoreClosed
	}
	var c store.Counts
	// One count per status, each from its partial index.
	err := s.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM belay_runs WHERE status = 'queued'),
		(SELECT count(*) FROM belay_runs WHERE status = 'running')`).Scan(&c.Queued, &c.Running)
	return c, s.wrap(err)
}

// HeartbeatOwner records that owner is alive for ttl more, by the
// database clock.
func (s *Store) HeartbeatOwner(ctx context.Context, owner string, ttl time.Duration) error {
	if owner == "" || ttl <= 0 {
		return fmt.Errorf("%w: an owner heartbeat needs an owner and a positive ttl", belay.ErrInvalid)
	}
	if err := s.writable(); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO belay_owners AS o (id, since, heartbeat, expires_at)
		SELECT $1, n, n, n + $2::interval FROM (SELECT coalesce($3::timestamptz, clock_timestamp()) AS n) AS now
		ON CONFLICT (id) DO UPDATE SET heartbeat = excluded.heartbeat, expires_at = excluded.expires_at`,
		owner, ttl, s.nowArg())
	return s.wrap(err)
}

// RetireOwner ends owner's record: its runs may be rescued at once.
func (s *Store) RetireOwner(ctx context.Context, owner string) error {
	if err := s.writable(); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, `DELETE FROM belay_owners WHERE id = $1`, owner)
	return s.wrap(err)
}

// Owners lists the owner records, oldest first, live or not.
func (s *Store) Owners(ctx context.Context) ([]store.Owner, error) {
	if s.isClosed() {
		return nil, belay.ErrStoreClosed
	}
	rows, err := s.pool.Query(ctx, `SELECT id, since, heartbeat, expires_at, expires_at > coalesce($1::timestamptz, clock_timestamp())
		FROM belay_owners ORDER BY since, id`, s.nowArg())
	if err != nil {
		return nil, s.wrap(err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.Owner, error) {
		var o store.Owner
		err := row.Scan(&o.ID, &o.Since, &o.Heartbeat, &o.ExpiresAt, &o.Live)
		o.Since, o.Heartbeat, o.ExpiresAt = o.Since.UTC(), o.Heartbeat.UTC(), o.ExpiresAt.UTC()
		return o, err
	})
	if out == nil {
		out = []store.Owner{}
	}
	return out, s.wrap(err)
}

// grant is a lease ClaimRuns grants.
type grant struct {
	id, session string
	epoch       uint64 // the new epoch
	takeover    uint64 // the rescued lease's epoch (rescues only)
	rescued     bool
	seq         uint64
}

// ClaimRuns leases runnable runs to c.Owner (see store.Store) in one
// transaction: the claim lock, then runs to rescue, then queued runs
// within the caps, each under its session's row lock, with their
// run.leased events and changes.
func (s *Store) ClaimRuns(ctx context.Context, c store.Claim) ([]store.Claimed, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	if err := s.writable(); err != nil {
		return nil, err
	}
	max := c.Max
	if max <= 0 {
		max = defaultClaimMax
	}
	// Claims take turns on the advisory lock anyway; this node's take
	// turns here first, so that a claim waiting for its turn holds no
	// pooled connection the node's writers need.
	s.claimMu.Lock()
	defer s.claimMu.Unlock()
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, s.wrap(err)
	}
	defer pc.Release()
	q := pc.Conn()
	var out []store.Claimed
	var sessions []string
	nchanges := 0
	var live []string
	var scanned bool
	var now time.Time
	err = func() error {
		b := &pgx.Batch{}
		b.Queue(`BEGIN`)
		b.Queue(genericPlans)
		b.Queue(`SELECT pg_advisory_xact_lock($1)`, claimLock)
		if err := q.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		// The clock is read once the lock is held, by a statement of its
		// own after the one that waited for it (in one statement, the
		// clock in its FROM would be read before the lock): a claim that
		// waited judges expiry and grants leases as of now, not as of
		// when it began, and reads the live owners in a snapshot taken
		// after the wait.
		if err := q.QueryRow(ctx, `SELECT n.n, ARRAY(SELECT id FROM belay_owners WHERE expires_at > n.n ORDER BY id)
			FROM (SELECT coalesce($1::timestamptz, clock_timestamp()) AS n) n`, s.nowArg()).Scan(&now, &live); err != nil {
			return err
		}
		now = now.UTC()
		if err := s.repairReady(ctx, q); err != nil {
			return err
		}
		var grants []grant
		grants, scanned, err = s.rescuable(ctx, q, c.Owner, now, max, live)
		if err != nil {
			return err
		}
		if len(grants) < max {
			more, err := s.claimable(ctx, q, c.Limits, max-len(grants), grants)
			if err != nil {
				return err
			}
			grants = append(grants, more...)
		}
		if len(grants) == 0 {
			_, err := q.Exec(ctx, `COMMIT`)
			return err
		}
		var changes []store.Change
		out, sessions, changes, err = s.lease(ctx, q, grants, c.Owner, now, now.Add(c.TTL))
		nchanges = len(changes)
		return err
	}()
	if err != nil {
		if !q.IsClosed() && q.PgConn().TxStatus() != 'I' {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_, _ = q.Exec(rctx, `ROLLBACK`)
			cancel()
		}
		return nil, s.wrap(err)
	}
	if scanned {
		// Committed: the runs of owners not in live that the look found
		// are rescued.
		s.liveScanned, s.liveScannedAt = live, now
	}
	if len(sessions) > 0 {
		s.committed(nchanges, sessions...)
	}
	return out, nil
}

// deadScanEvery bounds how long (by the database clock) a node's claims
// go without looking through every running run for runs of dead owners
// while the set of live owners stays the same (see rescuable): what a run leased to an owner
// that never had a record waits at most, when its lease is longer.
const deadScanEvery = 2 * time.Second

// expiredWalk reads the running runs without a lease or with an expired
// one not the claimer's ($1), by the index of running runs by lease
// expiry (see rescuable).
// Each arm is ordered by lease expiry: that order is the index's, which
// makes it the cheaper plan even on a new database, where the index of a
// session's running run would cost the same.
const expiredWalk = `(SELECT id, session, ord FROM belay_runs WHERE status = 'running' AND lease_expires_at IS NULL
				ORDER BY lease_expires_at)
			UNION ALL
			(SELECT id, session, ord FROM belay_runs WHERE status = 'running' AND lease_expires_at <= $2 AND lease_owner <> $1
				ORDER BY lease_expires_at)`

// rescuable locks the sessions of up to max running runs to rescue, and
// returns those runs as they are under the locks: runs whose lease
// expired, whose owner has no live record, or that have no lease — never
// the claimer's own, never a live owner's under an unexpired lease.
//
// live is the live owners' ids (sorted) as of now.
// Runs without a lease or with an expired one are found by the index of
// running runs by lease expiry, on every claim. Runs of a dead owner under
// an unexpired lease take a look through every running run (1,000 runs
// read for none to rescue, in a bench of 1,000 busy sessions: more than
// the rest of the claim), so that look is taken only when it can find
// something new: when the live owners are not those of the last look that
// found them all (an owner died or retired, whose runs may then be
// rescued at once, as before), and at least every deadScanEvery (an owner
// that never had a record, a session skipped while locked). scanned says
// this claim took that look and it found every such run (fewer than max);
// the caller records live once the claim has committed.
func (s *Store) rescuable(ctx context.Context, q *pgx.Conn, owner string, now time.Time, max int, live []string) (grants []grant, scanned bool, err error) {
	const cond = `r.status = 'running' AND (r.lease_owner IS NULL OR (r.lease_owner <> $1 AND (r.lease_expires_at <= $2
		OR NOT EXISTS (SELECT 1 FROM belay_owners o WHERE o.id = r.lease_owner AND o.expires_at > $2))))`
	// (A database clock that stepped back also looks: the mark is not
	// waited for.)
	full := !slices.Equal(live, s.liveScanned) || s.liveScannedAt.IsZero() ||
		now.Sub(s.liveScannedAt) >= deadScanEvery || now.Before(s.liveScannedAt)
	// Lock first (the session lock comes first, as in every write), then
	// read the runs again under the locks: the statement that locked saw
	// them as of before the wait.
	// The running runs only (OFFSET 0: never a walk of every run in ord
	// order, which a generic plan may pick for the LIMIT; see planRobust).
	// The condition is tested in the walk, against the live owners read
	// once, so that only the runs to rescue are joined to their sessions:
	// a claim with nothing to rescue (the usual one) reads no session.
	// Two arms, each an index condition of belay_runs_leases: as one
	// condition with OR, the planner walks every running run instead.
	walk := expiredWalk
	if full {
		s.fullScans.Add(1)
		walk = `SELECT id, session, ord FROM belay_runs
			WHERE status = 'running' AND (lease_owner IS NULL OR (lease_owner <> $1 AND (lease_expires_at <= $2
				OR lease_owner <> ALL (ARRAY(SELECT id FROM belay_owners WHERE expires_at > $2)))))`
	}
	rows, err := q.Query(ctx, `SELECT r.id FROM (`+walk+`
			OFFSET 0) r
		JOIN belay_sessions s ON s.id = r.session
		ORDER BY r.ord LIMIT $3 FOR UPDATE OF s SKIP LOCKED`, owner, now, max)
	if err != nil {
		return nil, false, err
	}
	locked, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, false, err
	}
	scanned = full && len(locked) < max
	if len(locked) == 0 {
		return nil, scanned, nil
	}
	rows, err = q.Query(ctx, `SELECT r.id, r.session, r.epoch FROM unnest($3::text[]) AS k(id)
		CROSS JOIN LATERAL (SELECT id, session, epoch, status, lease_owner, lease_expires_at, ord FROM belay_runs WHERE id = k.id OFFSET 0) r
		WHERE `+cond+` ORDER BY r.ord`, owner, now, locked)
	if err != nil {
		return nil, false, err
	}
	grants, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (grant, error) {
		var g grant
		var epoch int64
		err := row.Scan(&g.id, &g.session, &epoch)
		g.takeover, g.epoch, g.rescued = uint64(epoch), uint64(epoch)+1, true
		return g, err
	})
	return grants, scanned, err
}

// readyRepairEvery is how often a node's claim looks for a run that
// should be ready and is not. Every write keeps the marks (refreshReady);
// this bounds what a missed one costs (a run that waits that long more),
// for instance one left by a node of an older belay still writing during
// an upgrade. The look walks every queued run, as claims once did.
const readyRepairEvery = 30 * time.Second

// repairReady adds the ready runs that belay_ready lacks, at most every
// readyRepairEvery (from the node's start), counting them (readyRepaired).
func (s *Store) repairReady(ctx context.Context, q *pgx.Conn) error {
	if time.Since(s.readyRepairedAt) < readyRepairEvery {
		return nil
	}
	s.readyRepairedAt = time.Now()
	tag, err := q.Exec(ctx, `INSERT INTO belay_ready (run, session, priority, ord)
		SELECT r.id, r.session, r.priority, r.ord FROM belay_runs r
		WHERE r.status = 'queued'
		  AND r.id = (SELECT n.id FROM belay_runs n WHERE n.session = r.session AND n.status = 'queued' ORDER BY `+queuedOrder+` LIMIT 1)
		  AND NOT EXISTS (SELECT 1 FROM belay_runs a WHERE a.session = r.session AND a.status = 'running')
		ON CONFLICT (run) DO NOTHING`)
	if err != nil {
		return err
	}
	s.readyRepaired.Add(tag.RowsAffected())
	return nil
}

// candidate is a session's next queued run.
type candidate struct {
	id, session, provider string
	epoch                 uint64
}

// claimable picks up to max queued runs to start, in the order of the
// scheduler (fsstore): only the next run of a session (front runs first,
// then FIFO) and only in a session with no running run, by priority then
// submit order; never more running runs than the caps allow, counting
// every owner's (and the rescued runs, already running). It locks each
// candidate's session, skipping sessions busy with another write.
func (s *Store) claimable(ctx context.Context, q *pgx.Conn, lim store.Limits, max int, rescued []grant) ([]grant, error) {
	running, byProvider := 0, map[string]int{}
	if lim.Capped() {
		// The caps count every owner's running runs (the claim holds
		// claimLock: no other claim commits meanwhile).
		rows, err := q.Query(ctx, `SELECT provider, count(*) FROM belay_runs WHERE status = 'running' GROUP BY provider`)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var p string
			var n int
			if err := rows.Scan(&p, &n); err != nil {
				rows.Close()
				return nil, err
			}
			byProvider[p], running = n, running+n
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	full := func(p string) bool {
		c := lim.PerProvider[p]
		return c > 0 && byProvider[p] >= c
	}
	var out []grant
	taken := map[string]bool{} // sessions with a grant
	for _, g := range rescued {
		taken[g.session] = true
	}
	seen := []string{} // not nil: NULL would make <> ALL false
	for len(out) < max {
		if lim.Global > 0 && running >= lim.Global {
			break
		}
		fullProviders := []string{}
		for p := range lim.PerProvider {
			if full(p) {
				fullProviders = append(fullProviders, p)
			}
		}
		// A page of candidates, their sessions locked. Providers at their
		// cap are left out, so a page is never all runs that cannot start.
		page := 2*max + 8
		// Each step a lookup by key, in the ready runs' order (see
		// planRobust).
		rows, err := q.Query(ctx, `SELECT r.id FROM (SELECT run, priority, ord FROM belay_ready ORDER BY priority DESC, ord OFFSET 0) y
			CROSS JOIN LATERAL (SELECT id, session, provider, status FROM belay_runs WHERE id = y.run OFFSET 0) r
			CROSS JOIN LATERAL (SELECT id FROM belay_sessions WHERE id = r.session OFFSET 0) s
			WHERE r.status = 'queued' AND r.provider <> ALL($1) AND r.id <> ALL($2)
			  AND r.id = (SELECT n.id FROM belay_runs n WHERE n.session = r.session AND n.status = 'queued' ORDER BY `+queuedOrder+` LIMIT 1)
			  AND NOT EXISTS (SELECT 1 FROM belay_runs a WHERE a.session = r.session AND a.status = 'running' OFFSET 0)
			ORDER BY y.priority DESC, y.ord
			LIMIT $3
			FOR UPDATE OF s SKIP LOCKED`, fullProviders, seen, page)
		if err != nil {
			return nil, err
		}
		locked, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, err
		}
		if len(locked) == 0 {
			break
		}
		seen = append(seen, locked...)
		// Under the locks, the same test on a fresh snapshot.
		rows, err = q.Query(ctx, `SELECT r.id, r.session, r.provider, r.epoch FROM unnest($1::text[]) AS k(id)
			CROSS JOIN LATERAL (SELECT id, session, provider, epoch, status, priority, ord FROM belay_runs WHERE id = k.id OFFSET 0) r
			WHERE r.status = 'queued'
			  AND r.id = (SELECT n.id FROM belay_runs n WHERE n.session = r.session AND n.status = 'queued' ORDER BY `+queuedOrder+` LIMIT 1)
			  AND NOT EXISTS (SELECT 1 FROM belay_runs a WHERE a.session = r.session AND a.status = 'running' OFFSET 0)
			ORDER BY r.priority DESC, r.ord`, locked)
		if err != nil {
			return nil, err
		}
		cands, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (candidate, error) {
			var c candidate
			var epoch int64
			err := row.Scan(&c.id, &c.session, &c.provider, &epoch)
			c.epoch = uint64(epoch)
			return c, err
		})
		if err != nil {
			return nil, err
		}
		for _, c := range cands {
			if len(out) >= max || lim.Global > 0 && running >= lim.Global {
				break
			}
			if taken[c.session] || full(c.provider) {
				continue
			}
			out = append(out, grant{id: c.id, session: c.session, epoch: c.epoch + 1})
			taken[c.session] = true
			running++
			byProvider[c.provider]++
		}
		if len(locked) < page {
			break // no more candidates
		}
	}
	return out, nil
}

// lease grants the leases: one run.leased event per run with its
// session's next seq, the run rows, the sessions' counters and the
// changes, then reads the runs back and commits.
func (s *Store) lease(ctx context.Context, q *pgx.Conn, grants []grant, owner string, now, expires time.Time) ([]store.Claimed, []string, []store.Change, error) {
	var sessions []string
	for _, g := range grants {
		if !slices.Contains(sessions, g.session) {
			sessions = append(sessions, g.session)
		}
	}
	lastSeq := map[string]uint64{}
	rows, err := q.Query(ctx, `SELECT s.id, s.last_seq FROM unnest($1::text[]) AS k(id)
		CROSS JOIN LATERAL (SELECT id, last_seq FROM belay_sessions WHERE id = k.id OFFSET 0) s`, sessions)
	if err != nil {
		return nil, nil, nil, err
	}
	for rows.Next() {
		var id string
		var seq int64
		if err := rows.Scan(&id, &seq); err != nil {
			rows.Close()
			return nil, nil, nil, err
		}
		lastSeq[id] = uint64(seq)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, nil, err
	}
	n := len(grants)
	evSessions, seqs, runs, epochs, data := make([]string, n), make([]int64, n), make([]string, n), make([]int64, n), make([]string, n)
	var changes []store.Change
	for i := range grants {
		g := &grants[i]
		lastSeq[g.session]++
		g.seq = lastSeq[g.session]
		raw, err := marshal(belay.RunLeasedData{Owner: owner, ExpiresAt: expires, Takeover: g.takeover})
		if err != nil {
			return nil, nil, nil, err
		}
		evSessions[i], seqs[i], runs[i], epochs[i], data[i] = g.session, int64(g.seq), g.id, int64(g.epoch), string(raw)
		if c := (store.Change{Session: g.session, Seq: g.seq, Type: belay.EventRunLeased, Run: g.id}); store.InFeed(c) {
			changes = append(changes, c)
		}
	}
	counters := make([]int64, len(sessions))
	for i, id := range sessions {
		counters[i] = int64(lastSeq[id])
	}
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO belay_events (session, seq, ts, type, run, epoch, data)
		SELECT e.session, e.seq, $1, $2, e.run, e.epoch, e.data::json
		FROM unnest($3::text[], $4::bigint[], $5::text[], $6::bigint[], $7::text[]) AS e(session, seq, run, epoch, data)`,
		now, belay.EventRunLeased, evSessions, seqs, runs, epochs, data)
	// Each set in one statement, a row by key (planRobust).
	b.Queue(leaseRuns, owner, now, expires, runs, epochs)
	// Not ready any more; no other run of its session was (it was its
	// session's next run).
	b.Queue(unreadyRuns, runs)
	b.Queue(leaseCounters, now, sessions, counters)
	// The runs as leased, with what their runners read first: the input
	// (from its run.created event) and the session (locked here).
	byID := map[string]store.Claimed{}
	// The session is active: the claimed run is running in it (no probe).
	b.Queue(`SELECT r.*, (SELECT e.data::text FROM belay_events e WHERE e.session = r.run_session AND e.seq = r.run_input AND e.type = $2),
			`+sessionColsActive+`
		FROM unnest($1::text[]) AS k(id)
		CROSS JOIN LATERAL (SELECT `+runCols+`, session AS run_session, input_seq AS run_input FROM belay_runs WHERE id = k.id OFFSET 0) r
		CROSS JOIN LATERAL (SELECT * FROM belay_sessions WHERE id = r.run_session OFFSET 0) s`, runs, belay.EventRunCreated).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var c claimedRow
			if err := rows.Scan(c.dest()...); err != nil {
				return err
			}
			cl, err := c.claimed()
			if err != nil {
				return err
			}
			byID[cl.Run.ID] = cl
		}
		return rows.Err()
	})
	queueChanges(b, changes)
	b.Queue(`COMMIT`)
	if err := q.SendBatch(ctx, b).Close(); err != nil {
		return nil, nil, nil, err
	}
	out := make([]store.Claimed, 0, n)
	for _, g := range grants {
		c, ok := byID[g.id]
		if !ok {
			return nil, nil, nil, fmt.Errorf("pgstore: claimed run %s vanished", g.id)
		}
		c.Rescued = g.rescued
		out = append(out, c)
		// Its runner's writes find its session without a read, on
		// whichever node the run was submitted.
		s.remember(s.runSessions, g.id, g.session)
	}
	return out, sessions, changes, nil
}

// leaseRuns leases runs ($4, at epochs $5) to $1 from $2 until $3.
const leaseRuns = `UPDATE belay_runs r SET epoch = k.epoch, lease_owner = $1, lease_granted_at = $2, lease_expires_at = $3, updated_at = $2,
		phase = CASE WHEN r.phase = 'queued' THEN 'admitted' ELSE r.phase END,
		status = CASE WHEN r.phase = 'queued' THEN 'running' ELSE r.status END,
		started_at = CASE WHEN r.phase = 'queued' THEN $2 ELSE r.started_at END,
		front = false
	FROM unnest($4::text[], $5::bigint[]) AS k(id, epoch) WHERE r.id = k.id`

// unreadyRuns takes runs' ready marks away.
const unreadyRuns = `DELETE FROM belay_ready y USING unnest($1::text[]) AS k(run) WHERE y.run = k.run`

// leaseCounters sets sessions' ($2) counters ($3) after their leases at
// $1.
const leaseCounters = `UPDATE belay_sessions s SET last_seq = k.last_seq, updated_at = $1, last_event_at = $1
	FROM unnest($2::text[], $3::bigint[]) AS k(id, last_seq) WHERE s.id = k.id`

// claimedRow is a run as a claim reads it back: its runCols, its session
// and input seq again (the join's), its run.created data and its session.
type claimedRow struct {
	run        runRow
	runSession string
	runInput   int64
	created    *string
	sess       sessionRow
}

func (c *claimedRow) dest() []any {
	d := append(c.run.dest(), &c.runSession, &c.runInput, &c.created)
	return append(d, c.sess.dest()...)
}

// claimed decodes the row; a run whose run.created event is not where its
// input_seq says is claimed without its input (the runner's own read
// reports it).
func (c *claimedRow) claimed() (store.Claimed, error) {
	r, err := c.run.run()
	if err != nil {
		return store.Claimed{}, err
	}
	sess, err := c.sess.session()
	if err != nil {
		return store.Claimed{}, err
	}
	out := store.Claimed{Run: r, Session: &sess}
	if c.created != nil {
		var p belay.RunCreatedData
		if err := json.Unmarshal([]byte(*c.created), &p); err == nil {
			out.Input = p.Input
		}
	}
	return out, nil
}

// maxBatchSessions bounds the sessions of one SubmitBatch transaction.
const maxBatchSessions = 256

// SubmitBatch makes many submissions (see store.Store): the submissions to
// one session in order under its lock, the sessions together in one
// shared transaction per maxBatchSessions (combine.go), so a batch costs
// a few commits, not one per run. A submission refused under the lock
// (reject on a busy session) drops only what it queued; a transaction the
// server refuses is made again one session at a time.
func (s *Store) SubmitBatch(ctx context.Context, ins []store.SubmitInput) ([]store.SubmitResult, []error) {
	res, errs := make([]store.SubmitResult, len(ins)), make([]error, len(ins))
	existing := make([]string, len(ins))
	runIDs := make([]string, len(ins))
	bySession := map[string][]int{}
	var order []string
	for i, in := range ins {
		if errs[i] = checkSubmit(in); errs[i] != nil {
			continue
		}
		runIDs[i] = ids.New(ids.Run)
		if _, ok := bySession[in.Session]; !ok {
			order = append(order, in.Session)
		}
		bySession[in.Session] = append(bySession[in.Session], i)
	}
	if err := s.writable(); err != nil {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
		return res, errs
	}
	ops := make([]*sharedOp, len(order))
	for k, session := range order {
		idx := bySession[session]
		ops[k] = &sharedOp{ctx: ctx, session: session, missing: fmt.Errorf("%w: session %s", belay.ErrNotFound, session), done: make(chan error, 1), fn: func(t *tx) error {
			for n, i := range idx {
				if n > 0 {
					// The next submission reads what this one wrote.
					if err := s.execute(t); err != nil {
						return err
					}
				}
				res[i], existing[i], errs[i] = store.SubmitResult{}, "", nil
				m := t.mark()
				if err := s.submit(t, ins[i], runIDs[i], &res[i], &existing[i]); err != nil {
					if t.PgConn().TxStatus() != 'T' {
						return err // the server refused: the transaction is gone
					}
					t.reset(m)
					res[i], errs[i] = store.SubmitResult{}, err
				}
			}
			return nil
		}}
	}
	for from := 0; from < len(ops); from += maxBatchSessions {
		chunk := ops[from:min(from+maxBatchSessions, len(ops))]
		for _, op := range chunk {
			// The sessions' queued writes go first (behind.go); their
			// failure is kept for their leases, and a done ctx fails the
			// chunk's writes below.
			_ = s.flushBehind(ctx, op.session)
		}
		s.runShared(belay.Sync, slices.Clone(chunk))
		for k, op := range chunk {
			if err := <-op.done; err != nil {
				for _, i := range bySession[order[from+k]] {
					res[i], existing[i], errs[i] = store.SubmitResult{}, "", err
				}
			}
		}
	}
	for i, id := range existing {
		if id != "" && errs[i] == nil {
			run, err := s.Run(ctx, id)
			res[i], errs[i] = store.SubmitResult{Run: run}, err
		}
	}
	return res, errs
}
