package fsstore

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/vfs/vfstest"
	"github.com/belayhq/belay/store"
)

// TestSubmitLeasesInOneWrite: a submit that asks for the lease while
// nothing waits gets it, and the run's creation and its lease are one
// synced commit of the session's journal (one fdatasync with
// sync = "file"), where a submit and a claim take two. After a restart
// the run is leased, as written.
func TestSubmitLeasesInOneWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var syncs atomic.Int64
	dir := t.TempDir()
	opts := Options{Sync: SyncFile, ObserveSync: func(time.Duration) { syncs.Add(1) }}
	s, err := Open(ctx, dir, opts)
	require.NoError(t, err)
	sess, err := s.CreateSession(ctx, belay.SessionInput{Provider: "fake"})
	require.NoError(t, err)
	claim := store.Claim{Owner: "w1", TTL: time.Minute}
	cs, err := s.ClaimRuns(ctx, claim) // looks for runs to rescue: none
	require.NoError(t, err)
	require.Empty(t, cs)

	before := syncs.Load()
	res, err := s.Submit(ctx, store.SubmitInput{Policy: belay.PolicyEnqueue, Claim: &claim,
		RunInput: belay.RunInput{Session: sess.ID, Input: json.RawMessage(`{"prompt":"hi"}`)}})
	require.NoError(t, err)
	require.NotNil(t, res.Claimed, "nothing waits: the run is leased as it is created")
	require.Equal(t, int64(1), syncs.Load()-before, "one synced commit for the run and its lease")
	evs, err := s.Events(ctx, sess.ID, res.Run.InputSeq-1, 0)
	require.NoError(t, err)
	require.Len(t, evs, 2)
	require.Equal(t, belay.EventRunCreated, evs[0].Type)
	require.Equal(t, belay.EventRunLeased, evs[1].Type)
	require.Equal(t, uint64(1), evs[1].Epoch)

	// A plain submit then a claim: two.
	other, err := s.CreateSession(ctx, belay.SessionInput{Provider: "fake"})
	require.NoError(t, err)
	before = syncs.Load()
	plain, err := s.Submit(ctx, store.SubmitInput{Policy: belay.PolicyEnqueue, RunInput: belay.RunInput{Session: other.ID}})
	require.NoError(t, err)
	require.Nil(t, plain.Claimed)
	cs, err = s.ClaimRuns(ctx, claim)
	require.NoError(t, err)
	require.Len(t, cs, 1)
	require.Equal(t, int64(2), syncs.Load()-before)

	require.NoError(t, s.Close())
	s, err = Open(ctx, dir, opts)
	require.NoError(t, err)
	defer s.Close()
	r, err := s.Run(ctx, res.Run.ID)
	require.NoError(t, err)
	require.Equal(t, belay.RunRunning, r.Status)
	require.Equal(t, "w1", r.Lease.Owner)
	n, err := s.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, store.Counts{Running: 2}, n)
}

// TestSubmitLeaseGivenBackOnAFailedWrite: a submit asking for the lease
// whose write fails on a full disk creates nothing, and the room it set
// aside is given back: under a global cap of 1, the next submit (or a
// claim) takes it.
func TestSubmitLeaseGivenBackOnAFailedWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ffs := vfstest.New(nil)
	s := openStore(t, t.TempDir(), Options{FS: ffs})
	sess := newSession(t, s)
	claim := &store.Claim{Owner: "w1", TTL: time.Minute, Limits: store.Limits{Global: 1}}
	cs, err := s.ClaimRuns(ctx, *claim)
	require.NoError(t, err)
	require.Empty(t, cs)

	ffs.Set(vfstest.Faults{Write: func(name string, p []byte) (int, error) {
		if strings.HasSuffix(name, "journal.jsonl") {
			return 0, syscall.ENOSPC
		}
		return len(p), nil
	}})
	_, err = s.Submit(ctx, store.SubmitInput{Policy: belay.PolicyEnqueue, Claim: claim, RunInput: belay.RunInput{Session: sess.ID}})
	require.ErrorIs(t, err, belay.ErrDiskFull)
	n, err := s.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, store.Counts{}, n, "nothing created, nothing held")

	ffs.Set(vfstest.Faults{})
	res, err := s.Submit(ctx, store.SubmitInput{Policy: belay.PolicyEnqueue, Claim: claim, RunInput: belay.RunInput{Session: sess.ID}})
	require.NoError(t, err)
	require.NotNil(t, res.Claimed, "the cap's one slot is free again")
	runs, err := s.Runs(ctx, belay.RunFilter{Session: sess.ID})
	require.NoError(t, err)
	require.Len(t, runs, 1)
}

// TestSubmitLeaseWaitsForTheRescueLook: until a claim has looked for runs
// to rescue (at open, or when a lease or an owner may have expired), a
// submit leaves its run queued: a claim rescues first.
func TestSubmitLeaseWaitsForTheRescueLook(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, t.TempDir(), Options{})
	sess := newSession(t, s)
	claim := &store.Claim{Owner: "w1", TTL: time.Minute}
	res, err := s.Submit(ctx, store.SubmitInput{Policy: belay.PolicyEnqueue, Claim: claim, RunInput: belay.RunInput{Session: sess.ID}})
	require.NoError(t, err)
	require.Nil(t, res.Claimed, "no claim has looked for runs to rescue since the store opened")
	cs, err := s.ClaimRuns(ctx, *claim)
	require.NoError(t, err)
	require.Len(t, cs, 1)
	require.Equal(t, res.Run.ID, cs[0].Run.ID)
}
