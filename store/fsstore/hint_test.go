package fsstore

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/journal"
	"github.com/belayhq/belay/store"
)

// TestHintedFoldReadsLikeTheJournal: a run leased by a claim and changed
// by synced and buffered updates (with a ref, attempt data, an inbox
// item), whose payloads the fold takes as the store encoded them
// (applyWith), reads the same live as after a restart that folds the
// journal, and keeps nothing the caller changes afterwards.
func TestHintedFoldReadsLikeTheJournal(t *testing.T) {
	ctx := context.Background()
	dir, clk, opts, s := clockedStore(t, Options{})
	sess := newSession(t, s)
	r, _, err := s.CreateRun(ctx, belay.RunInput{Session: sess.ID, Input: json.RawMessage(`{"prompt":"hi"}`)})
	require.NoError(t, err)
	claimed, err := s.ClaimRuns(ctx, store.Claim{Owner: "inc_1", TTL: time.Minute})
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	epoch := claimed[0].Run.Epoch

	data := json.RawMessage(`{"attempt":1}`)
	ref := &belay.ConversationRef{Kind: "fake", ID: "conv <&>", Cursor: "1:0"}
	clk.Advance(time.Second)
	_, err = s.UpdateRun(ctx, r.ID, epoch, belay.RunUpdate{Phase: belay.PhaseAwaitingResponse, Attempt: 1, Data: data})
	require.NoError(t, err)
	clk.Advance(time.Second)
	_, err = s.UpdateRun(ctx, r.ID, epoch, belay.RunUpdate{Phase: belay.PhaseStreaming, Buffered: true})
	require.NoError(t, err)
	clk.Advance(time.Second)
	_, err = s.UpdateRun(ctx, r.ID, epoch, belay.RunUpdate{Ref: ref, Reason: "a reason \u2028"})
	require.NoError(t, err)
	// The caller's own values change after the calls: the state has its own.
	data[2] = 'X'
	ref.Cursor = "changed"

	live := func(s *Store) (belay.Run, belay.Session) {
		t.Helper()
		run, err := s.Run(ctx, r.ID)
		require.NoError(t, err)
		ss, err := s.Session(ctx, sess.ID)
		require.NoError(t, err)
		return run, ss
	}
	// reopened closes the store and opens it from the journal alone: the
	// snapshot and the store index a close writes hold the live state.
	reopened := func(s *Store) *Store {
		t.Helper()
		require.NoError(t, s.Close())
		for _, f := range []string{filepath.Join(dir, IndexName), filepath.Join(dir, SessionsName, sess.ID, journal.SnapshotName)} {
			if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
				t.Fatal(err)
			}
		}
		return openStore(t, dir, opts)
	}
	run, ss := live(s)
	require.Equal(t, "1:0", run.Ref.Cursor)
	require.Equal(t, belay.PhaseStreaming, run.Phase)
	s = reopened(s)
	run2, ss2 := live(s)
	require.Equal(t, run, run2, "a running run reads the same after the journal is folded")
	require.Equal(t, ss, ss2)

	clk.Advance(time.Second)
	_, err = s.UpdateRun(ctx, r.ID, epoch, belay.RunUpdate{Phase: belay.PhaseComplete,
		Deliver: &belay.DeliveryInput{Type: "run.completed", Key: r.ID, Data: json.RawMessage(`{"run":"` + r.ID + `"}`)}})
	require.NoError(t, err)
	run, ss = live(s)
	require.Equal(t, belay.RunComplete, run.Status)
	s = reopened(s)
	run2, ss2 = live(s)
	require.Equal(t, run, run2, "a finished run reads the same after the journal is folded")
	require.Equal(t, ss, ss2)
}
