package pgstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/clock"
	"github.com/belayhq/belay/store"
	"github.com/belayhq/belay/store/pgstore"
)

// TestMigrateConcurrently: two nodes migrating one empty database at once
// apply each migration exactly once; a store opened without migrating
// refuses an unmigrated database and names the command that fixes it.
func TestMigrateConcurrently(t *testing.T) {
	ctx := context.Background()
	url := database(t)
	_, err := pgstore.Open(ctx, url, pgstore.Options{})
	require.ErrorContains(t, err, "belay migrate")

	st, err := pgstore.Status(ctx, url)
	require.NoError(t, err)
	require.Zero(t, st.Current)
	require.NotEmpty(t, st.Pending)

	var wg sync.WaitGroup
	applied := make([][]pgstore.Migration, 4)
	errs := make([]error, 4)
	for i := range applied {
		wg.Add(1)
		go func() {
			defer wg.Done()
			applied[i], errs[i] = pgstore.Migrate(ctx, url)
		}()
	}
	wg.Wait()
	total := 0
	for i := range applied {
		require.NoError(t, errs[i])
		total += len(applied[i])
	}
	require.Equal(t, len(st.Pending), total, "each migration is applied once")

	st, err = pgstore.Status(ctx, url)
	require.NoError(t, err)
	require.Equal(t, st.Latest, st.Current)
	require.Empty(t, st.Pending)
	s, err := pgstore.Open(ctx, url, pgstore.Options{})
	require.NoError(t, err)
	require.NoError(t, s.Close())
}

// TestTwoNodes: two stores on one database are two nodes. A watcher on
// node B is woken by appends on node A, and concurrent appends from both
// nodes to one session get gap-free, unique seqs in commit order.
func TestTwoNodes(t *testing.T) {
	ctx := context.Background()
	url := database(t)
	a := open(t, url, nil)
	defer a.Close()
	// Node B never polls: only notifications can wake its watchers.
	b, err := pgstore.Open(ctx, url, pgstore.Options{PollEvery: time.Hour})
	require.NoError(t, err)
	defer b.Close()
	sess, err := a.CreateSession(ctx, belay.SessionInput{Provider: "fake"})
	require.NoError(t, err)

	woke := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		woke <- b.WaitEvents(wctx, sess.ID, 1)
	}()
	_, err = a.Append(ctx, sess.ID, belay.Sync, belay.Event{Type: "note"})
	require.NoError(t, err)
	require.NoError(t, <-woke)

	const per = 50
	var wg sync.WaitGroup
	for n, st := range []*pgstore.Store{a, b} {
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < per; i++ {
					_, err := st.Append(ctx, sess.ID, belay.Sync, belay.Event{Type: "note", Data: json.RawMessage(fmt.Sprintf(`{"node":%d,"w":%d,"i":%d}`, n, w, i))})
					if err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	// A watcher on node B reads everything in order while it is written.
	var seen uint64 = 2
	for seen < 2+8*per {
		require.NoError(t, b.WaitEvents(ctx, sess.ID, seen))
		evs, err := b.Events(ctx, sess.ID, seen, 0)
		require.NoError(t, err)
		for _, e := range evs {
			require.Equal(t, seen+1, e.Seq, "gap-free, in order")
			seen = e.Seq
		}
	}
	wg.Wait()
	got, err := a.Session(ctx, sess.ID)
	require.NoError(t, err)
	require.Equal(t, uint64(2+8*per), got.LastSeq)
}

// TestDatabaseClock: without an injected clock, lease times are the
// database's now(), whatever the node's clock says.
func TestDatabaseClock(t *testing.T) {
	ctx := context.Background()
	url := database(t)
	s := open(t, url, nil)
	defer s.Close()
	sess, err := s.CreateSession(ctx, belay.SessionInput{Provider: "fake"})
	require.NoError(t, err)
	r, _, err := s.CreateRun(ctx, belay.RunInput{Session: sess.ID})
	require.NoError(t, err)
	var before, after time.Time
	require.NoError(t, s.Pool().QueryRow(ctx, `SELECT now()`).Scan(&before))
	l, err := s.AcquireRunLease(ctx, r.ID, "w", time.Hour, 0)
	require.NoError(t, err)
	require.NoError(t, s.Pool().QueryRow(ctx, `SELECT now()`).Scan(&after))
	require.False(t, l.Lease.GrantedAt.Before(before.UTC()))
	require.False(t, l.Lease.GrantedAt.After(after.UTC()))
	require.Equal(t, l.Lease.GrantedAt.Add(time.Hour), l.Lease.ExpiresAt)
}

// rowsOf counts a session's rows in each table that holds them.
func rowsOf(t *testing.T, s *pgstore.Store, session string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, table := range []string{"belay_events", "belay_runs", "belay_deliveries", "belay_notifications"} {
		var n int
		require.NoError(t, s.Pool().QueryRow(context.Background(), `SELECT count(*) FROM `+table+` WHERE session = $1`, session).Scan(&n))
		out[table] = n
	}
	return out
}

// TestDeleteSession: a session with an active run is kept; a finished one
// goes with all its rows (migration 10's trigger, not foreign keys), and
// another session's rows stay; so does one deleted by hand, as an
// operator or a node of an older belay would.
func TestDeleteSession(t *testing.T) {
	ctx := context.Background()
	s := open(t, database(t), nil)
	defer s.Close()
	other, err := s.CreateSession(ctx, belay.SessionInput{Provider: "fake"})
	require.NoError(t, err)
	_, _, err = s.CreateRun(ctx, belay.RunInput{Session: other.ID})
	require.NoError(t, err)
	_, _, err = s.PostDelivery(ctx, belay.DeliveryInput{Session: other.ID, Type: "t", Key: "k"})
	require.NoError(t, err)
	kept := rowsOf(t, s, other.ID)
	sess, err := s.CreateSession(ctx, belay.SessionInput{Provider: "fake"})
	require.NoError(t, err)
	r, _, err := s.CreateRun(ctx, belay.RunInput{Session: sess.ID})
	require.NoError(t, err)
	require.ErrorIs(t, s.DeleteSession(ctx, sess.ID, true), belay.ErrActive)
	_, err = s.CancelQueuedRun(ctx, r.ID, "")
	require.NoError(t, err)
	_, _, err = s.PostDelivery(ctx, belay.DeliveryInput{Session: sess.ID, Type: "t", Key: "k"})
	require.NoError(t, err)
	require.ErrorIs(t, s.DeleteSession(ctx, sess.ID, false), belay.ErrActive)
	require.NoError(t, s.DeleteSession(ctx, sess.ID, true))
	_, err = s.Session(ctx, sess.ID)
	require.ErrorIs(t, err, belay.ErrNotFound)
	_, err = s.Run(ctx, r.ID)
	require.ErrorIs(t, err, belay.ErrNotFound)
	require.Equal(t, map[string]int{"belay_events": 0, "belay_runs": 0, "belay_deliveries": 0, "belay_notifications": 0}, rowsOf(t, s, sess.ID))
	require.Equal(t, kept, rowsOf(t, s, other.ID))
	require.NotZero(t, kept["belay_events"])
	require.NotZero(t, kept["belay_runs"])
	require.NotZero(t, kept["belay_deliveries"])
	_, err = s.Pool().Exec(ctx, `DELETE FROM belay_sessions WHERE id = $1`, other.ID)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"belay_events": 0, "belay_runs": 0, "belay_deliveries": 0, "belay_notifications": 0}, rowsOf(t, s, other.ID))
}

// TestDatabaseRestart: the database crashing and coming back under an
// open store loses no acknowledged event; the store reconnects by itself
// and its watchers are woken again.
func TestDatabaseRestart(t *testing.T) {
	ctx := context.Background()
	s := open(t, database(t), nil)
	defer s.Close()
	sess, err := s.CreateSession(ctx, belay.SessionInput{Provider: "fake"})
	require.NoError(t, err)
	// Start the listener.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	require.ErrorIs(t, s.WaitEvents(wctx, sess.ID, 1), context.DeadlineExceeded)
	cancel()
	seqs, err := s.Append(ctx, sess.ID, belay.Sync, belay.Event{Type: "note", ID: "before"})
	require.NoError(t, err)

	require.NoError(t, cluster.Restart(ctx))

	woke := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		woke <- s.WaitEvents(wctx, sess.ID, 2)
	}()
	// The first statements after the crash may fail on dead pooled
	// connections; they are refused, never half-applied.
	var again []uint64
	for i := 0; ; i++ {
		again, err = s.Append(ctx, sess.ID, belay.Sync, belay.Event{Type: "note", ID: "before"}, belay.Event{Type: "note", ID: "after"})
		if err == nil {
			break
		}
		require.ErrorIs(t, err, pgstore.ErrUnreachable)
		require.Less(t, i, 20)
	}
	require.Equal(t, seqs[0], again[0], "the acknowledged event survived the crash")
	require.Equal(t, seqs[0]+1, again[1])
	require.NoError(t, <-woke)
}

// TestPruneOnTwoNodes: two nodes pruning one database at once delete each
// old session once, and neither fails on a session the other deleted.
func TestPruneOnTwoNodes(t *testing.T) {
	ctx := context.Background()
	url := database(t)
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	a := open(t, url, clk)
	defer a.Close()
	b := open(t, url, clk)
	defer b.Close()
	const n = 60
	for range n {
		_, err := a.CreateSession(ctx, belay.SessionInput{Provider: "fake"})
		require.NoError(t, err)
	}
	clk.Advance(store.DefaultKeepComplete + time.Hour)
	var wg sync.WaitGroup
	reps := make([]belay.PruneReport, 2)
	errs := make([]error, 2)
	for i, s := range []*pgstore.Store{a, b} {
		wg.Go(func() { reps[i], errs[i] = s.Prune(ctx, store.PrunePolicy{}) })
	}
	wg.Wait()
	seen := map[string]bool{}
	for i := range reps {
		require.NoError(t, errs[i])
		for _, p := range reps[i].Pruned {
			require.False(t, seen[p.ID], "session %s pruned twice", p.ID)
			seen[p.ID] = true
		}
	}
	require.Len(t, seen, n)
	for id := range seen {
		require.Equal(t, map[string]int{"belay_events": 0, "belay_runs": 0, "belay_deliveries": 0, "belay_notifications": 0}, rowsOf(t, a, id))
	}
}
