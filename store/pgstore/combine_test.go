package pgstore_test

import (
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/ids"
	"github.com/belayhq/belay/store"
	"github.com/belayhq/belay/store/pgstore"
)

func note(text string) belay.Event {
	return belay.Event{Type: "note", Data: json.RawMessage(`{"text":"` + text + `"}`)}
}

// TestSharedTransaction: writes to several sessions made in one shared
// transaction each decide alone. A write that refuses (a stale epoch)
// fails alone; a write the server refuses (a failing statement) fails
// alone too, the others made again alone; a write to a missing session
// fails with not found. Every other write commits once, in order.
func TestSharedTransaction(t *testing.T) {
	ctx := context.Background()
	s := open(t, database(t), nil)
	defer s.Close()
	var sess []string
	for range 4 {
		x, err := s.CreateSession(ctx, belay.SessionInput{Provider: "fake"})
		require.NoError(t, err)
		sess = append(sess, x.ID)
	}
	run, _, err := s.CreateRun(ctx, belay.RunInput{Session: sess[3]})
	require.NoError(t, err)
	cs, err := s.ClaimRuns(ctx, store.Claim{Owner: "w", TTL: time.Minute})
	require.NoError(t, err)
	require.Len(t, cs, 1)
	stale := belay.Event{Type: "note", Run: run.ID, Epoch: cs[0].Run.Epoch + 7, Data: json.RawMessage(`{}`)}
	fresh := belay.Event{Type: "note", Run: run.ID, Epoch: cs[0].Run.Epoch, Data: json.RawMessage(`{}`)}

	last := func(id string) uint64 {
		x, err := s.Session(ctx, id)
		require.NoError(t, err)
		return x.LastSeq
	}
	before := make([]uint64, 4)
	for i, id := range sess {
		before[i] = last(id)
	}

	// A refusal under the lock: the others commit in the same transaction.
	errs := pgstore.ShareNow(s, belay.Sync, []pgstore.SharedAppend{
		{Session: sess[0], Event: note("a")}, {Session: sess[1], Event: note("b")},
		{Session: sess[3], Event: stale}, {Session: sess[2], Event: note("c")},
	})
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.ErrorIs(t, errs[2], belay.ErrStaleEpoch)
	require.NoError(t, errs[3])
	for i, want := range []uint64{1, 1, 1, 0} {
		require.Equal(t, before[i]+want, last(sess[i]), "session %d", i)
	}

	// The server refuses one write's statement: nothing of the shared
	// transaction commits, and each write is made again alone.
	errs = pgstore.ShareNow(s, belay.Buffered, []pgstore.SharedAppend{
		{Session: sess[0], Event: note("d")}, {Session: sess[1], Event: note("e"), SQL: `SELECT 1/0`},
		{Session: sess[3], Event: fresh},
	})
	require.NoError(t, errs[0])
	require.ErrorContains(t, errs[1], "division by zero")
	require.NoError(t, errs[2])
	for i, want := range []uint64{2, 1, 1, 1} {
		require.Equal(t, before[i]+want, last(sess[i]), "session %d", i)
	}

	// A missing session: the others are made alone.
	errs = pgstore.ShareNow(s, belay.Sync, []pgstore.SharedAppend{
		{Session: ids.New(ids.Session), Event: note("f")}, {Session: sess[2], Event: note("g")},
	})
	require.ErrorIs(t, errs[0], belay.ErrNotFound)
	require.NoError(t, errs[1])

	// Seqs stay gap-free and in order in every session.
	for _, id := range sess {
		evs, err := s.Events(ctx, id, 0, 0)
		require.NoError(t, err)
		for i, e := range evs {
			require.Equal(t, uint64(i+1), e.Seq)
		}
	}
}

// TestSharedWritesConcurrent: many writers on many sessions at once (they
// share transactions) and on one session (whose writes never share one):
// every write is in its session once, gap-free, in each writer's order.
func TestSharedWritesConcurrent(t *testing.T) {
	ctx := context.Background()
	s := open(t, database(t), nil)
	defer s.Close()
	const writers, each = 24, 20
	sess := make([]string, writers)
	for i := range sess {
		if i%6 == 5 {
			sess[i] = sess[i-1] // some sessions have two writers
			continue
		}
		x, err := s.CreateSession(ctx, belay.SessionInput{Provider: "fake"})
		require.NoError(t, err)
		sess[i] = x.ID
	}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			d := belay.Sync
			if w%3 == 0 {
				d = belay.Buffered
			}
			for i := range each {
				_, err := s.Append(ctx, sess[w], d, belay.Event{Type: "note", Data: json.RawMessage(`{"w":` + itoa(w) + `,"i":` + itoa(i) + `}`)})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	seen := map[[2]int]bool{}
	for _, id := range uniq(sess) {
		evs, err := s.Events(ctx, id, 0, 0)
		require.NoError(t, err)
		next := map[int]int{}
		for i, e := range evs {
			require.Equal(t, uint64(i+1), e.Seq)
			if e.Type != "note" {
				continue
			}
			var p struct{ W, I int }
			require.NoError(t, json.Unmarshal(e.Data, &p))
			require.Equal(t, next[p.W], p.I, "writer %d in order", p.W)
			next[p.W]++
			require.False(t, seen[[2]int{p.W, p.I}])
			seen[[2]int{p.W, p.I}] = true
		}
	}
	require.Len(t, seen, writers*each)
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

func uniq(xs []string) []string {
	var out []string
	m := map[string]bool{}
	for _, x := range xs {
		if !m[x] {
			m[x] = true
			out = append(out, x)
		}
	}
	return out
}

// TestMergedWrites: the same change made by many writes of one shared
// transaction (a run created, a run's phase set, an item posted, a lease)
// is one statement for them all (mergeQueued), and every write still gets
// its own row back, with what it asked for and nothing of the others'.
func TestMergedWrites(t *testing.T) {
	ctx := context.Background()
	s := open(t, database(t), nil)
	defer s.Close()
	const n = 6
	var ins []store.SubmitInput
	for i := range n {
		x, err := s.CreateSession(ctx, belay.SessionInput{Provider: "fake", Model: "m" + itoa(i)})
		require.NoError(t, err)
		in := belay.RunInput{Session: x.ID, Input: json.RawMessage(`{"i":` + itoa(i) + `}`), Priority: i % 3}
		switch i % 3 {
		case 0:
			in.Tags, in.Meta = []string{"t" + itoa(i), "all"}, map[string]string{"k": "v" + itoa(i)}
		case 1:
			in.IdempotencyKey, in.Deadline = "key"+itoa(i), time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
		}
		ins = append(ins, store.SubmitInput{RunInput: in, Policy: belay.PolicyEnqueue})
	}
	before := pgstore.MergedAway(s)
	res, errs := pgstore.ShareSubmits(s, ins)
	require.Greater(t, pgstore.MergedAway(s), before, "the inserts were merged")
	for i, r := range res {
		require.NoError(t, errs[i])
		in := ins[i].RunInput
		require.True(t, r.Created)
		require.Equal(t, in.Session, r.Run.Session, "run %d", i)
		require.Equal(t, "m"+itoa(i), r.Run.Model)
		require.Equal(t, in.Priority, r.Run.Priority)
		require.Equal(t, in.IdempotencyKey, r.Run.IdempotencyKey)
		require.Equal(t, in.Tags, r.Run.Tags)
		require.Equal(t, in.Meta, r.Run.Meta)
		require.True(t, in.Deadline.Equal(r.Run.Deadline), "deadline %d", i)
		require.Equal(t, belay.RunQueued, r.Run.Status)
		got, err := s.Run(ctx, r.Run.ID)
		require.NoError(t, err)
		require.Equal(t, r.Run, got)
		input, err := s.RunInput(ctx, r.Run.ID)
		require.NoError(t, err)
		require.JSONEq(t, string(in.Input), string(input))
	}
	tagged, err := s.Runs(ctx, belay.RunFilter{Tag: "all"})
	require.NoError(t, err)
	require.Len(t, tagged, 2)

	// The leases of one claim: one statement each for the runs, the
	// ready marks and the sessions.
	cs, err := s.ClaimRuns(ctx, store.Claim{Owner: "w", TTL: time.Minute, Max: n})
	require.NoError(t, err)
	require.Len(t, cs, n)
	var us []pgstore.SharedUpdate
	for i, c := range cs {
		require.Equal(t, belay.RunRunning, c.Run.Status)
		require.NotNil(t, c.Run.Lease)
		require.Equal(t, "w", c.Run.Lease.Owner)
		got, err := s.Run(ctx, c.Run.ID)
		require.NoError(t, err)
		require.Equal(t, c.Run.Epoch, got.Epoch)
		require.Equal(t, belay.PhaseAdmitted, got.Phase)
		u := belay.RunUpdate{Phase: belay.PhaseComplete, Attempt: 1,
			Deliver: &belay.DeliveryInput{Type: "run.ended", Key: c.Run.ID, Data: json.RawMessage(`{"run":"` + c.Run.ID + `"}`)}}
		switch i % 3 {
		case 0:
			u.Phase, u.Error = belay.PhaseFailed, &belay.RunError{Class: belay.ClassTransient, Message: "boom " + itoa(i)}
		case 1:
			u.Ref, u.Reason = &belay.ConversationRef{Kind: "k", ID: "conv" + itoa(i)}, "why "+itoa(i)
		}
		us = append(us, pgstore.SharedUpdate{Session: c.Run.Session, Run: c.Run.ID, Epoch: c.Run.Epoch, Update: u})
	}
	before = pgstore.MergedAway(s)
	runs, errs := pgstore.ShareUpdates(s, us)
	require.Greater(t, pgstore.MergedAway(s), before, "the updates were merged")
	for i, r := range runs {
		require.NoError(t, errs[i])
		u := us[i].Update
		require.Equal(t, us[i].Run, r.ID)
		require.Equal(t, u.Phase, r.Phase)
		require.Equal(t, u.Phase.Status(), r.Status)
		require.Equal(t, 1, r.Attempt)
		require.Nil(t, r.Lease, "an ended run holds no lease")
		require.False(t, r.EndedAt.IsZero())
		require.Equal(t, u.Error, r.Error)
		require.Equal(t, u.Reason, r.Reason)
		if u.Ref != nil {
			require.Equal(t, *u.Ref, r.Ref)
		} else {
			require.Equal(t, belay.ConversationRef{}, r.Ref)
		}
		got, err := s.Run(ctx, r.ID)
		require.NoError(t, err)
		require.Equal(t, r, got)
		items, err := s.Deliveries(ctx, belay.DeliveryFilter{Session: us[i].Session})
		require.NoError(t, err)
		require.Len(t, items, 1)
		require.Equal(t, r.ID, items[0].Key)
		require.JSONEq(t, `{"run":"`+r.ID+`"}`, string(items[0].Data))
	}
	require.Zero(t, pgstore.MergeFailed(s))
}

// TestSetStatementsByKey: the statements that change a set of rows in one
// (each write's merged, a claim's leases, the counters) reach each row
// through an index, whatever the statistics say: on a new database, with
// its empty tables analyzed, and with a few rows analyzed (where a scan
// of the whole table looks cheapest). Their generic plans are made once
// per connection and kept as tables grow (planRobust).
// genericPlan is the plan of sql (prepared with parameter types types,
// "" to infer them) executed with args, in a transaction under settings
// (the settings of writes and claims), rolled back.
func genericPlan(t *testing.T, conn *pgx.Conn, settings, sql, types, args string) string {
	t.Helper()
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer func() {
		require.NoError(t, tx.Rollback(ctx))
		_, err := conn.Exec(ctx, "DEALLOCATE p")
		require.NoError(t, err)
	}()
	_, err = tx.Exec(ctx, settings)
	require.NoError(t, err)
	if types != "" {
		types = "(" + types + ")"
	}
	_, err = tx.Exec(ctx, "PREPARE p"+types+" AS "+sql)
	require.NoError(t, err, sql)
	rows, err := tx.Query(ctx, "EXPLAIN EXECUTE p("+args+")")
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return strings.Join(lines, "\n")
}

func TestSetStatementsByKey(t *testing.T) {
	ctx := context.Background()
	url := database(t)
	s := open(t, url, nil)
	defer s.Close()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	settings, sqls := pgstore.SetStatements()
	param := regexp.MustCompile(`\$(\d+)`)
	check := func(when string) {
		for i, sql := range sqls {
			n := 0
			for _, m := range param.FindAllStringSubmatch(sql, -1) {
				k, err := strconv.Atoi(m[1])
				require.NoError(t, err)
				n = max(n, k)
			}
			nulls := strings.TrimSuffix(strings.Repeat("NULL, ", n), ", ")
			plan := genericPlan(t, conn, settings, sql, "", nulls)
			for _, bad := range []string{"Seq Scan on belay_", "Hash Join", "Merge Join", "Hash Cond"} {
				require.NotContains(t, plan, bad, "%s: statement %d\n%s\n%s", when, i, sql, plan)
			}
		}
	}
	check("a new database")
	_, err = conn.Exec(ctx, "ANALYZE")
	require.NoError(t, err)
	check("empty tables analyzed")
	for range 3 {
		x, err := s.CreateSession(ctx, belay.SessionInput{Provider: "fake"})
		require.NoError(t, err)
		_, _, err = s.CreateRun(ctx, belay.RunInput{Session: x.ID})
		require.NoError(t, err)
	}
	_, err = conn.Exec(ctx, "ANALYZE")
	require.NoError(t, err)
	check("a few rows analyzed")
}
