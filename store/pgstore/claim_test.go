package pgstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/store/pgstore"
)

// This file prototypes issue 14's store-side claim on the version 1
// schema (docs/postgres.md, "Next"): one transaction claims runnable runs
// for an owner, priority then FIFO, at most one running run per session,
// under a global cap and per-provider caps, and journals each run.leased
// under its session's lock. It is a test, not yet a store operation: the
// runtime still admits in memory until issue 14 lands.

// claimLock serializes claimers so that caps are counted from committed
// claims; sessions busy with other writes are skipped, not waited for.
const claimLock = 0x62656c6179_03

type caps struct {
	global      int // 0: no cap
	perProvider map[string]int
}

type claimed struct {
	run, session, provider string
	priority               int
	epoch                  uint64
}

func claim(ctx context.Context, pool *pgxpool.Pool, owner string, n int, c caps, ttl time.Duration) ([]claimed, error) {
	var out []claimed
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(claimLock)); err != nil {
			return err
		}
		// 1. Lock the sessions of the candidates: each session's oldest
		// queued run, in priority then submit order, skipping sessions
		// that run something or are locked by a write right now. The
		// session lock comes first, as in every other write.
		rows, err := tx.Query(ctx, `SELECT r.id FROM belay_runs r JOIN belay_sessions s ON s.id = r.session
			WHERE r.status = 'queued'
			  AND r.ord = (SELECT min(q.ord) FROM belay_runs q WHERE q.session = r.session AND q.status = 'queued')
			  AND NOT EXISTS (SELECT 1 FROM belay_runs a WHERE a.session = r.session AND a.status = 'running')
			ORDER BY r.priority DESC, r.ord
			LIMIT $1
			FOR UPDATE OF s SKIP LOCKED`, 4*n)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || len(ids) == 0 {
			return err
		}
		// 2. Under those locks (a fresh snapshot), pick within the caps
		// and lease, then journal run.leased with each session's next seq.
		provs, limits := []string{}, []int32{}
		for p, l := range c.perProvider {
			provs, limits = append(provs, p), append(limits, int32(l))
		}
		global := c.global
		if global <= 0 {
			global = 1 << 30
		}
		rows, err = tx.Query(ctx, `WITH c AS (
				SELECT r.id, r.provider, r.priority, r.ord FROM belay_runs r
				WHERE r.id = ANY($1) AND r.status = 'queued'
				  AND NOT EXISTS (SELECT 1 FROM belay_runs a WHERE a.session = r.session AND a.status = 'running')
			), ranked AS (
				SELECT c.*, row_number() OVER (PARTITION BY c.provider ORDER BY c.priority DESC, c.ord) AS nth FROM c
			), room AS (
				SELECT p.provider, p.cap - (SELECT count(*) FROM belay_runs x WHERE x.provider = p.provider AND x.status = 'running') AS room
				FROM unnest($2::text[], $3::int[]) AS p(provider, cap)
			), picked AS (
				SELECT ranked.id FROM ranked LEFT JOIN room USING (provider)
				WHERE room.provider IS NULL OR ranked.nth <= room.room
				ORDER BY ranked.priority DESC, ranked.ord
				LIMIT greatest(0, least($4, $5 - (SELECT count(*) FROM belay_runs WHERE status = 'running')))
			), leased AS (
				UPDATE belay_runs r SET status = 'running', phase = 'admitted', epoch = r.epoch + 1,
					lease_owner = $6, lease_granted_at = now(), lease_expires_at = now() + $7::interval,
					started_at = now(), updated_at = now()
				FROM picked WHERE r.id = picked.id
				RETURNING r.id, r.session, r.provider, r.priority, r.epoch, r.lease_expires_at
			), bumped AS (
				UPDATE belay_sessions s SET last_seq = s.last_seq + 1, updated_at = now(), last_event_at = now()
				FROM leased WHERE s.id = leased.session
				RETURNING s.id, s.last_seq
			), journaled AS (
				INSERT INTO belay_events (session, seq, ts, type, run, epoch, data)
				SELECT l.session, b.last_seq, now(), 'run.leased', l.id, l.epoch,
					json_build_object('owner', $6::text, 'expiresAt', l.lease_expires_at)
				FROM leased l JOIN bumped b ON b.id = l.session
			)
			SELECT id, session, provider, priority, epoch FROM leased`,
			ids, provs, limits, n, global, owner, ttl.String())
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (claimed, error) {
			var c claimed
			var epoch int64
			err := row.Scan(&c.run, &c.session, &c.provider, &c.priority, &epoch)
			c.epoch = uint64(epoch)
			return c, err
		})
		return err
	})
	return out, err
}

// TestClaimPrototypeOrder: one claimer gets priority then FIFO, one run per
// session, within the caps.
func TestClaimPrototypeOrder(t *testing.T) {
	ctx := context.Background()
	s := open(t, database(t), nil)
	defer s.Close()
	mk := func(provider string, prio int) (belay.Session, belay.Run) {
		sess, err := s.CreateSession(ctx, belay.SessionInput{Provider: provider})
		require.NoError(t, err)
		r, _, err := s.CreateRun(ctx, belay.RunInput{Session: sess.ID, Priority: prio, Input: json.RawMessage(`{}`)})
		require.NoError(t, err)
		return sess, r
	}
	_, low := mk("a", 0)
	sessHigh, high := mk("a", 5)
	_, _, err := s.CreateRun(ctx, belay.RunInput{Session: sessHigh.ID, Priority: 9}) // same session: waits its turn
	require.NoError(t, err)
	_, b1 := mk("b", 1)
	_, b2 := mk("b", 1)

	got, err := claim(ctx, s.Pool(), "o1", 10, caps{perProvider: map[string]int{"b": 1}}, time.Minute)
	require.NoError(t, err)
	var order []string
	for _, c := range got {
		order = append(order, c.run)
		require.Equal(t, uint64(1), c.epoch)
	}
	require.ElementsMatch(t, []string{high.ID, b1.ID, low.ID}, order,
		"one run per session, b capped at 1 (its oldest), priority then FIFO")
	require.NotContains(t, order, b2.ID)

	r, err := s.Run(ctx, high.ID)
	require.NoError(t, err)
	require.Equal(t, belay.RunRunning, r.Status)
	require.Equal(t, "o1", r.Lease.Owner)
	evs, err := s.Events(ctx, sessHigh.ID, 0, 0)
	require.NoError(t, err)
	last := evs[len(evs)-1]
	require.Equal(t, "run.leased", last.Type)
	require.Equal(t, uint64(len(evs)), last.Seq, "gap-free with the store's own writes")

	// The claimed lease is the store's lease: the owner writes under it.
	_, err = s.UpdateRun(ctx, high.ID, 1, belay.RunUpdate{Phase: belay.PhaseComplete})
	require.NoError(t, err)
	again, err := claim(ctx, s.Pool(), "o1", 10, caps{perProvider: map[string]int{"b": 1}}, time.Minute)
	require.NoError(t, err)
	require.Len(t, again, 1, "the session's next run; b stays at its cap")
}

// TestClaimPrototypeRace: claimers on two stores (two nodes) race while
// runs finish; the caps and one-run-per-session are never exceeded and no
// run is claimed twice.
func TestClaimPrototypeRace(t *testing.T) {
	ctx := context.Background()
	url := database(t)
	a := open(t, url, nil)
	defer a.Close()
	b := open(t, url, nil)
	defer b.Close()
	const sessions, perSession = 12, 4
	for i := 0; i < sessions; i++ {
		sess, err := a.CreateSession(ctx, belay.SessionInput{Provider: []string{"p", "q", "r"}[i%3]})
		require.NoError(t, err)
		for j := 0; j < perSession; j++ {
			_, _, err := a.CreateRun(ctx, belay.RunInput{Session: sess.ID, Priority: j % 2})
			require.NoError(t, err)
		}
	}
	c := caps{global: 5, perProvider: map[string]int{"p": 2, "q": 1}}
	var mu sync.Mutex
	claims := map[string]int{}
	check := func() {
		var running, maxPerSession, p, q int
		require.NoError(t, a.Pool().QueryRow(ctx, `SELECT
			(SELECT count(*) FROM belay_runs WHERE status = 'running'),
			coalesce((SELECT max(n) FROM (SELECT count(*) AS n FROM belay_runs WHERE status = 'running' GROUP BY session) x), 0),
			(SELECT count(*) FROM belay_runs WHERE status = 'running' AND provider = 'p'),
			(SELECT count(*) FROM belay_runs WHERE status = 'running' AND provider = 'q')`).Scan(&running, &maxPerSession, &p, &q))
		require.LessOrEqual(t, running, 5)
		require.LessOrEqual(t, maxPerSession, 1)
		require.LessOrEqual(t, p, 2)
		require.LessOrEqual(t, q, 1)
	}
	var wg sync.WaitGroup
	for w, st := range []*pgstore.Store{a, b, a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := fmt.Sprintf("o%d", w)
			for round := 0; round < 200; round++ {
				got, err := claim(ctx, st.Pool(), owner, 2, c, time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				for _, cl := range got {
					mu.Lock()
					claims[cl.run]++
					mu.Unlock()
					if _, err := st.UpdateRun(ctx, cl.run, cl.epoch, belay.RunUpdate{Phase: belay.PhaseComplete}); err != nil {
						t.Error(err)
						return
					}
				}
				var left int
				if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM belay_runs WHERE status <> 'complete'`).Scan(&left); err != nil {
					t.Error(err)
					return
				}
				if left == 0 {
					return
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for finished := false; !finished; {
		select {
		case <-done:
			finished = true
		default:
			check()
		}
	}
	require.Len(t, claims, sessions*perSession, "every run was claimed")
	for id, n := range claims {
		require.Equal(t, 1, n, id)
	}
}
