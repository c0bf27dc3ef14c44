package runtime

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/clock"
	"github.com/belayhq/belay/provider"
	"github.com/belayhq/belay/store"
	"github.com/belayhq/belay/store/fsstore"
)

// heldClaims holds the first claim that leased runs between the store's
// answer and the runtime's runners, as a loaded machine may.
type heldClaims struct {
	store.Store
	held, release chan struct{}
	once          sync.Once
}

func (h *heldClaims) ClaimRuns(ctx context.Context, c store.Claim) ([]store.Claimed, error) {
	cs, err := h.Store.ClaimRuns(ctx, c)
	if len(cs) > 0 {
		h.once.Do(func() {
			close(h.held)
			<-h.release
		})
	}
	return cs, err
}

// TestCancelBeforeTheRunnerStarts: a cancel request committed after a
// claim leased the run, and seen on the change feed before the claim
// started the run's runner, is carried out by that runner.
func TestCancelBeforeTheRunnerStarts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(t0)
	st, err := fsstore.Open(ctx, t.TempDir(), fsstore.Options{Clock: clk})
	require.NoError(t, err)
	defer st.Close()
	h := &heldClaims{Store: st, held: make(chan struct{}), release: make(chan struct{})}
	rt, err := New(Options{Store: h, Clock: clk, PruneEvery: -1,
		Providers: provider.Registry{"hang": &funcProvider{name: "hang", run: hang}}})
	require.NoError(t, err)
	require.NoError(t, rt.Start(ctx))
	defer func() {
		stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		require.NoError(t, rt.Stop(stopCtx))
	}()

	run, err := rt.Submit(ctx, SubmitRequest{Provider: "hang", Prompt: "p"})
	require.NoError(t, err)
	<-h.held // leased to rt; no runner yet
	_, err = st.RequestCancel(ctx, run.ID, "not needed")
	require.NoError(t, err)
	waitFor(t, func() bool { // the feed brought the request to rt
		rt.mu.Lock()
		defer rt.mu.Unlock()
		_, ok := rt.cancelSeen[run.ID]
		return ok
	})
	close(h.release)
	waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	done, err := rt.Wait(waitCtx, run.ID)
	require.NoError(t, err)
	require.Equal(t, belay.RunCancelled, done.Status)
	require.Equal(t, "not needed", done.Reason)
	rt.mu.Lock()
	defer rt.mu.Unlock()
	require.Empty(t, rt.cancelSeen, "the note goes with the runner that took it")
}

// flakyRuns fails the next read of a run, once armed, as a store that
// could not be reached for a moment.
type flakyRuns struct {
	store.Store
	armed, failed atomic.Bool
}

func (f *flakyRuns) Run(ctx context.Context, id string) (belay.Run, error) {
	if f.armed.CompareAndSwap(true, false) {
		f.failed.Store(true)
		return belay.Run{}, fmt.Errorf("%w: a blip", belay.ErrStoreUnreachable)
	}
	return f.Store.Run(ctx, id)
}

// TestCancelSurvivesAFailedRead: when the owner cannot read the run its
// change feed says has a cancel request, the request is not dropped: it
// is carried out once the store answers.
func TestCancelSurvivesAFailedRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(t0)
	st, err := fsstore.Open(ctx, t.TempDir(), fsstore.Options{Clock: clk})
	require.NoError(t, err)
	defer st.Close()
	f := &flakyRuns{Store: st}
	rt, err := New(Options{Store: f, Clock: clk, PruneEvery: -1,
		Providers: provider.Registry{"hang": &funcProvider{name: "hang", run: hang}}})
	require.NoError(t, err)
	require.NoError(t, rt.Start(ctx))
	defer func() {
		stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		require.NoError(t, rt.Stop(stopCtx))
	}()
	run, err := rt.Submit(ctx, SubmitRequest{Provider: "hang", Prompt: "p"})
	require.NoError(t, err)
	waitFor(t, func() bool {
		r, err := st.Run(ctx, run.ID)
		return err == nil && r.Phase == belay.PhaseAwaitingResponse
	})
	f.armed.Store(true)
	_, err = st.RequestCancel(ctx, run.ID, "not needed")
	require.NoError(t, err)
	waitFor(t, f.failed.Load) // the owner's read of the request failed
	r, err := st.Run(ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, belay.RunRunning, r.Status)
	waitFor(t, func() bool {
		clk.Advance(time.Second)
		r, err := st.Run(ctx, run.ID)
		return err == nil && r.Status.Terminal()
	})
	done, err := st.Run(ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, belay.RunCancelled, done.Status)
	require.Equal(t, "not needed", done.Reason)
}
