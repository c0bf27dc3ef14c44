package pgstore_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/provider"
	"github.com/belayhq/belay/runtime"
	"github.com/belayhq/belay/store"
)

// partitioned is a node cut off from the database by a silent partition
// while cut is set: its lease renewals and owner heartbeats hang, with no
// answer and no error, until their context ends.
type partitioned struct {
	store.Store
	cut atomic.Bool
}

func (p *partitioned) hang(ctx context.Context) error {
	if !p.cut.Load() {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}

func (p *partitioned) RenewRunLease(ctx context.Context, id string, epoch uint64, ttl time.Duration, act *belay.RunActivity) (belay.Run, error) {
	if err := p.hang(ctx); err != nil {
		return belay.Run{}, err
	}
	return p.Store.RenewRunLease(ctx, id, epoch, ttl, act)
}

func (p *partitioned) HeartbeatOwner(ctx context.Context, owner string, ttl time.Duration) error {
	if err := p.hang(ctx); err != nil {
		return err
	}
	return p.Store.HeartbeatOwner(ctx, owner, ttl)
}

type silent struct {
	started chan struct{}
	stopped chan error
	calls   atomic.Int32
}

func (s *silent) Name() string                        { return "silent" }
func (s *silent) Capabilities() provider.Capabilities { return provider.Capabilities{} }
func (s *silent) Run(ctx context.Context, req provider.Request, emit func(provider.Event) error) error {
	if s.calls.Add(1) == 1 {
		close(s.started)
		<-ctx.Done() // silent: no event, so no write, until stopped
		s.stopped <- context.Cause(ctx)
		return ctx.Err()
	}
	if err := emit(provider.Event{Kind: provider.TextDelta, Text: "rescued"}); err != nil {
		return err
	}
	return emit(provider.Event{Kind: provider.TurnEnd, StopReason: "end_turn"})
}

// TestPartitionedNodeStopsItsRuns: a node cut off from the database by a
// silent partition (its renewals hang: no answer, no error) while its
// provider is silent too (no first token yet, so the run writes nothing)
// stops the run's work before its lease expires by the database's clock,
// and cancels it rather than detaching it (its work must not go on beside
// a rescuer's); another node then rescues and finishes the run. Real
// clocks: the fence is a timer of the runner's own, independent of the
// renewal that hangs.
func TestPartitionedNodeStopsItsRuns(t *testing.T) {
	ctx := context.Background()
	url := database(t)
	const ttl = 4 * time.Second
	sa, sb := open(t, url, nil), open(t, url, nil)
	defer sa.Close()
	defer sb.Close()
	cut := &partitioned{Store: sa}
	p := &silent{started: make(chan struct{}), stopped: make(chan error, 1)}
	start := func(st store.Store) *runtime.Runtime {
		rt, err := runtime.New(runtime.Options{Store: st, Providers: provider.Registry{"silent": p}, LeaseTTL: ttl, PruneEvery: -1})
		require.NoError(t, err)
		require.NoError(t, rt.Start(ctx))
		t.Cleanup(func() {
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			_ = rt.Stop(sctx)
		})
		return rt
	}
	a := start(cut)
	sess, err := sa.CreateSession(ctx, belay.SessionInput{Provider: "silent"})
	require.NoError(t, err)
	run, err := a.Submit(ctx, runtime.SubmitRequest{Session: sess.ID, Prompt: "hi"})
	require.NoError(t, err)
	<-p.started
	cut.cut.Store(true)
	var cause error
	select {
	case cause = <-p.stopped:
	case <-time.After(time.Minute):
		t.Fatal("the partitioned node did not stop its run's work")
	}
	stoppedAt := time.Now()
	held, err := sb.Run(ctx, run.ID)
	require.NoError(t, err)
	require.NotNil(t, held.Lease)
	require.Equal(t, a.Incarnation(), held.Lease.Owner)
	require.True(t, stoppedAt.Before(held.Lease.ExpiresAt), "stopped at %v, the lease expires at %v", stoppedAt, held.Lease.ExpiresAt)
	require.ErrorContains(t, cause, "could not be renewed")
	require.NotErrorIs(t, cause, provider.ErrDetach, "cancelled, not detached")

	b := start(sb)
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	done, err := b.Wait(wctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, belay.RunComplete, done.Status, done.Reason)
	require.Greater(t, done.Epoch, held.Epoch)
}
