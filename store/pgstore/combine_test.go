package pgstore_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

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
