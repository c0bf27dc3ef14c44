package fsstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/clock"
	"github.com/belayhq/belay/internal/ids"
	"github.com/belayhq/belay/store/storetest"
	"github.com/stretchr/testify/require"
)

// clockedStore opens a store in a new directory with opts on a fake
// clock, and returns the options to reopen it with.
func clockedStore(t *testing.T, opts Options) (string, *clock.Fake, Options, *Store) {
	t.Helper()
	dir := t.TempDir()
	clk := clock.NewFake(storetest.Start)
	opts.Clock = clk
	return dir, clk, opts, openStore(t, dir, opts)
}

// finishSome creates runs over a few sessions, some tagged, some on
// another provider, and finishes about two in three of them in a random
// order with every terminal status. It returns the runs' ids.
func finishSome(t *testing.T, s *Store, clk *clock.Fake, rng *rand.Rand, runs int) []string {
	t.Helper()
	ctx := context.Background()
	var sessions []string
	for range 3 {
		sessions = append(sessions, newSession(t, s).ID)
	}
	var ids []string
	for i := range runs {
		in := belay.RunInput{Session: sessions[i%len(sessions)]}
		if i%4 == 0 {
			in.Tags = []string{"even", fmt.Sprintf("n%d", i)}
		}
		if i%5 == 0 {
			in.Provider = "other"
		}
		r, _, err := s.CreateRun(ctx, in)
		require.NoError(t, err)
		ids = append(ids, r.ID)
		clk.Advance(time.Duration(rng.IntN(3)) * time.Second) // some share a time
	}
	for _, i := range rng.Perm(runs)[:runs*2/3] {
		id := ids[i]
		clk.Advance(time.Second)
		if i%7 == 0 {
			_, err := s.CancelQueuedRun(ctx, id, "not needed")
			require.NoError(t, err)
			continue
		}
		l, err := s.AcquireRunLease(ctx, id, "w", time.Minute, 0)
		require.NoError(t, err)
		phase := []belay.RunPhase{belay.PhaseComplete, belay.PhaseFailed, belay.PhaseStranded}[i%3]
		_, err = s.UpdateRun(ctx, id, l.Epoch, belay.RunUpdate{Phase: phase})
		require.NoError(t, err)
	}
	return ids
}

// listAll pages through ListRuns, limit at a time, in the order of the
// API's newest first (created at, then id).
func listAll(t *testing.T, s *Store, f belay.RunFilter, limit int) []belay.Run {
	t.Helper()
	less := func(a, b *belay.Run) bool {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c > 0
		}
		return a.ID > b.ID
	}
	var out []belay.Run
	var last *belay.Run
	for {
		var after func(*belay.Run) bool
		if last != nil {
			l := *last
			after = func(r *belay.Run) bool { return less(&l, r) }
		}
		page, more, err := s.ListRuns(context.Background(), f, less, after, limit)
		require.NoError(t, err)
		out = append(out, page...)
		if !more {
			return out
		}
		require.Len(t, page, limit)
		last = &page[len(page)-1]
	}
}

// TestFinishedRunsReadLikeLiveOnes: finished runs, kept encoded, are
// found, filtered, paged and ordered exactly as the runs kept whole, and
// read back the same after a restart from the index and from the
// journals.
func TestFinishedRunsReadLikeLiveOnes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir, clk, opts, s := clockedStore(t, Options{SnapshotEvery: 5})
	ids := finishSome(t, s, clk, rand.New(rand.NewPCG(1, 2)), 60)

	filters := []belay.RunFilter{
		{}, {Status: belay.RunComplete}, {Status: belay.RunQueued}, {Failed: true},
		{Provider: "other"}, {Tag: "even"}, {Tag: "even", Status: belay.RunFailed},
		{Since: storetest.Start.Add(30 * time.Second)},
	}
	type seen struct {
		byID  map[string]belay.Run
		lists [][]belay.Run
	}
	look := func(s *Store) seen {
		v := seen{byID: map[string]belay.Run{}}
		for _, id := range ids {
			r, err := s.Run(ctx, id)
			require.NoError(t, err)
			v.byID[id] = r
		}
		for _, f := range filters {
			all, err := s.Runs(ctx, f)
			require.NoError(t, err)
			for _, r := range all {
				require.True(t, f.Match(&r), "%+v lists %s (%s)", f, r.ID, r.Status)
				require.Equal(t, v.byID[r.ID], r)
			}
			slices.SortFunc(all, func(a, b belay.Run) int {
				if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
					return c
				}
				return -compareStrings(a.ID, b.ID)
			})
			for _, limit := range []int{1, 7, 100} {
				require.Equal(t, all, listAll(t, s, f, limit), "ListRuns %+v by %d", f, limit)
			}
			v.lists = append(v.lists, all)
		}
		return v
	}
	before := look(s)
	finished := 0
	for _, r := range before.byID {
		if r.Status.Terminal() {
			finished++
			require.False(t, r.EndedAt.IsZero())
		}
	}
	require.Equal(t, 40, finished)
	for i, f := range filters {
		if f == (belay.RunFilter{}) {
			require.Len(t, before.lists[i], len(ids))
		}
	}
	require.NoError(t, s.Close())

	s = openStore(t, dir, opts)
	require.Positive(t, s.Loaded().FromIndex)
	require.Equal(t, before, look(s), "restored from the index")
	require.NoError(t, s.Close())
	dropFolds(t, dir)
	s = openStore(t, dir, opts)
	require.Zero(t, s.Loaded().FromIndex)
	require.Equal(t, before, look(s), "folded from the journals")
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// TestFinishedRunKeptWholeWhenItCannotBeEncoded: a run that ends at a time
// unix nanos cannot hold stays whole among the live runs, and reads,
// lists, snapshots and restores as any other.
func TestFinishedRunKeptWholeWhenItCannotBeEncoded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	clk := clock.NewFake(time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC))
	opts := Options{Clock: clk, SnapshotEvery: 2}
	s := openStore(t, dir, opts)
	sess := newSession(t, s)
	r, _, err := s.CreateRun(ctx, belay.RunInput{Session: sess.ID})
	require.NoError(t, err)
	l, err := s.AcquireRunLease(ctx, r.ID, "w", time.Minute, 0)
	require.NoError(t, err)
	_, err = s.UpdateRun(ctx, r.ID, l.Epoch, belay.RunUpdate{Phase: belay.PhaseComplete})
	require.NoError(t, err)

	ss, err := s.session(sess.ID)
	require.NoError(t, err)
	ss.mu.Lock()
	require.Zero(t, ss.st.done.len(), "past 2262 a run is not kept encoded")
	require.Len(t, ss.st.Runs, 1)
	require.NoError(t, checkState(ss.st))
	ss.mu.Unlock()

	want, err := s.Run(ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, belay.RunComplete, want.Status)
	_, err = s.UpdateRun(ctx, r.ID, l.Epoch, belay.RunUpdate{Phase: belay.PhaseFailed})
	require.ErrorIs(t, err, belay.ErrTerminal)
	all, err := s.Runs(ctx, belay.RunFilter{Status: belay.RunComplete})
	require.NoError(t, err)
	require.Equal(t, []belay.Run{want}, all)
	require.Equal(t, []belay.Run{want}, listAll(t, s, belay.RunFilter{}, 5))
	require.NoError(t, s.Close())

	for _, drop := range []bool{false, true} {
		if drop {
			dropFolds(t, dir)
		}
		s = openStore(t, dir, opts)
		got, err := s.Run(ctx, r.ID)
		require.NoError(t, err)
		require.Equal(t, want, got, "dropped folds: %v", drop)
		v, err := s.Session(ctx, sess.ID)
		require.NoError(t, err)
		require.Equal(t, belay.SessionIdle, v.State)
		require.NoError(t, s.Close())
	}
}

// TestFinishedRunsOfARenamedSessionListAsTheyMatch: a session directory
// renamed (or copied) keeps its runs' own session; a finished run's key
// says that session, so ListRuns selects exactly what Runs does.
func TestFinishedRunsOfARenamedSessionListAsTheyMatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir, clk, opts, s := clockedStore(t, Options{})
	finishSome(t, s, clk, rand.New(rand.NewPCG(3, 4)), 9)
	sessions, err := s.Sessions(ctx, belay.SessionFilter{})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	from := sessions[0].ID
	to := ids.New(ids.Session)
	require.NoError(t, os.Rename(filepath.Join(dir, SessionsName, from), filepath.Join(dir, SessionsName, to)))
	dropFolds(t, dir)

	s = openStore(t, dir, opts)
	for _, f := range []belay.RunFilter{{}, {Session: to}, {Session: to, Status: belay.RunComplete}, {Status: belay.RunComplete}} {
		want, err := s.Runs(ctx, f)
		require.NoError(t, err)
		got := listAll(t, s, f, 2)
		require.ElementsMatch(t, want, got, "%+v", f)
	}
}

// TestFinishedRunKeysSayTheirRunsSession: finished runs of two sessions
// in one state (a state no fold makes, but a snapshot may hold) each keep
// their own session in their key.
func TestFinishedRunKeysSayTheirRunsSession(t *testing.T) {
	t.Parallel()
	var d doneRuns
	a, b := ids.New(ids.Session), ids.New(ids.Session)
	for i, sess := range []string{a, b, a, b} {
		r := &belay.Run{ID: ids.New(ids.Run), Session: sess, Status: belay.RunCancelled, Phase: belay.PhaseCancelled, InputSeq: uint64(10 - i), CreatedAt: storetest.Start, UpdatedAt: storetest.Start}
		require.NoError(t, d.add(r, nil))
	}
	for i := range d.len() {
		r, err := d.run(i)
		require.NoError(t, err)
		require.Equal(t, r.Session, d.key(i).Session)
	}
}

// BenchmarkListRunsNewestFirst pages the newest runs of a session with
// 20,000 finished ones: the order in which every finished run, visited
// oldest first, would enter the page for a moment.
func BenchmarkListRunsNewestFirst(b *testing.B) {
	st := newState()
	st.Session.ID = ids.New(ids.Session)
	t0 := storetest.Start
	for i := range 20000 {
		r := &belay.Run{
			ID: fmt.Sprintf("run_%026d", i), Session: st.Session.ID, Status: belay.RunComplete, Phase: belay.PhaseComplete,
			Provider: "fake", InputSeq: uint64(i + 1), CreatedAt: t0.Add(time.Duration(i) * time.Second),
		}
		r.UpdatedAt, r.EndedAt = r.CreatedAt, r.CreatedAt
		require.NoError(b, st.done.add(r, nil))
	}
	s := &Store{sessions: map[string]*session{st.Session.ID: {id: st.Session.ID, st: st}}}
	less := func(a, b *belay.Run) bool { return a.CreatedAt.After(b.CreatedAt) }
	b.ReportAllocs()
	for b.Loop() {
		page, _, err := s.ListRuns(context.Background(), belay.RunFilter{Session: st.Session.ID}, less, nil, 50)
		if err != nil || len(page) != 50 {
			b.Fatal(len(page), err)
		}
	}
}

// TestFinishedRunsInChunks: finished runs of every size, one larger than
// a whole chunk among them, read back whole and by id from their chunks,
// and growing the chunks never moves what they hold.
func TestFinishedRunsInChunks(t *testing.T) {
	t.Parallel()
	var d doneRuns
	ts := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	var want []*belay.Run
	var first *byte
	for i := range 300 {
		r := &belay.Run{ID: ids.New(ids.Run), Session: "ses_1", Status: belay.RunComplete, Phase: belay.PhaseComplete,
			InputSeq: uint64(i + 1), CreatedAt: ts, UpdatedAt: ts}
		switch {
		case i == 150:
			r.Reason = strings.Repeat("x", doneChunkMax+100) // larger than any chunk
		case i%7 == 0:
			r.Reason = fmt.Sprint(make([]int, i))
		}
		require.NoError(t, d.add(r, nil))
		want = append(want, r)
		if i == 0 {
			first = &d.chunks[0][0]
		}
	}
	require.Same(t, first, &d.chunks[0][0], "the first run's JSON stays where it was written")
	size, kept := 0, 0
	for _, c := range d.chunks {
		size, kept = size+cap(c), kept+len(c)
	}
	require.LessOrEqual(t, size, 2*kept+doneChunkMax, "about twice what the runs take at most")
	require.Greater(t, len(d.chunks), 3)
	// A session with a few runs keeps about what they take.
	var few doneRuns
	for i := range 4 {
		require.NoError(t, few.add(&belay.Run{ID: ids.New(ids.Run), Session: "ses_1", Status: belay.RunComplete,
			InputSeq: uint64(i + 1), CreatedAt: ts, UpdatedAt: ts}, nil))
		fsize, fkept := 0, 0
		for _, c := range few.chunks {
			fsize, fkept = fsize+cap(c), fkept+len(c)
		}
		require.LessOrEqual(t, fsize, 2*fkept, "%d runs: %d bytes for %d", i+1, fsize, fkept)
		if i+1 != 3 {
			require.Equal(t, fkept, fsize, "%d runs of one size take their size", i+1)
		}
	}
	big := 0
	for _, c := range d.chunks {
		if cap(c) > doneChunkMax {
			big++
			n := len(d.raw(d.find(want[150].ID)))
			require.Equal(t, n, cap(c), "a run larger than a chunk has one of its own size")
		}
	}
	require.Equal(t, 1, big)
	for i, r := range want {
		j := d.find(r.ID)
		require.Equal(t, i, j)
		got, err := d.run(j)
		require.NoError(t, err)
		require.Equal(t, r, got)
	}
}
