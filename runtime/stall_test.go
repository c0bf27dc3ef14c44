package runtime

import (
	"context"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/clock"
	"github.com/belayhq/belay/internal/vfs/vfstest"
	"github.com/belayhq/belay/provider"
	"github.com/belayhq/belay/store/fsstore"
)

// TestRunStalledByAFullDiskFinishesOnceSpaceIsFree: the disk fills while a
// run streams. The runner cannot record anything more and stops; the run
// is neither failed nor left "running" with nobody on it. Once space is
// free, it is retried in its slot (resent here: the provider cannot resume
// and no side effect ran) and completes, without a restart.
func TestRunStalledByAFullDiskFinishesOnceSpaceIsFree(t *testing.T) {
	t.Parallel()
	ffs := vfstest.New(nil)
	clk := clock.NewFake(t0)
	st, err := fsstore.Open(context.Background(), t.TempDir(), fsstore.Options{FS: ffs, Clock: clk})
	require.NoError(t, err)
	defer st.Close()

	streaming, gate := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	p := &funcProvider{name: "p", run: func(ctx context.Context, req provider.Request, emit func(provider.Event) error) error {
		if calls.Add(1) == 1 {
			if err := emit(provider.Event{Kind: provider.TextDelta, Text: "partial "}); err != nil {
				return err
			}
			close(streaming)
			select {
			case <-gate:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
		return echo(ctx, req, emit)
	}}
	stalled := make(chan error, 4)
	rt, err := New(Options{Store: st, Clock: clk, Providers: provider.Registry{"p": p}, PruneEvery: -1,
		OnStall: func(_ string, err error) { stalled <- err }})
	require.NoError(t, err)
	require.NoError(t, rt.Start(context.Background()))
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, rt.Stop(ctx))
	}()

	run, err := rt.Submit(context.Background(), SubmitRequest{Provider: "p", Prompt: "answer"})
	require.NoError(t, err)
	<-streaming
	ffs.Set(vfstest.Faults{Write: func(name string, p []byte) (int, error) {
		if strings.HasSuffix(name, "journal.jsonl") {
			return 0, syscall.ENOSPC
		}
		return len(p), nil
	}})
	close(gate)
	select {
	case err := <-stalled:
		require.ErrorIs(t, err, belay.ErrDiskFull)
	case <-time.After(20 * time.Second):
		t.Fatal("the runner did not stall")
	}
	got, err := st.Run(context.Background(), run.ID)
	require.NoError(t, err)
	require.Equal(t, belay.RunRunning, got.Status, "not failed: nothing went wrong with the run itself")
	rep, err := rt.Doctor(context.Background(), run.Session)
	require.NoError(t, err)
	require.Equal(t, "journal_write_failing", rep.Rule, "doctor says the disk is full: %s", rep.Reason)
	require.Contains(t, rep.Reason, "disk of the data directory is full")

	// Still full at the first retry: it stalls again, with a longer wait.
	clk.Advance(minStallBackoff)
	select {
	case <-stalled:
	case <-time.After(20 * time.Second):
		t.Fatal("the retry on a full disk did not stall again")
	}

	ffs.Set(vfstest.Faults{}) // space is free
	clk.Advance(2 * minStallBackoff)
	waitFor(t, func() bool {
		got, err = st.Run(context.Background(), run.ID)
		require.NoError(t, err)
		return got.Status.Terminal()
	})
	require.Equal(t, belay.RunComplete, got.Status, got.Reason)
	require.EqualValues(t, 2, calls.Load(), "resent once")
	evs, err := st.Events(context.Background(), run.Session, 0, 0)
	require.NoError(t, err)
	recovered := false
	for i, e := range evs {
		require.Equal(t, uint64(i+1), e.Seq)
		if e.Type == belay.EventRunRecovery && strings.Contains(string(e.Data), "journal write failed") {
			recovered = true
		}
	}
	require.True(t, recovered, "the recovery says why")
}

// TestFailedSendCreatesNothing: whichever journal write fails while a send
// creates a session, the send either fails and leaves no session, or
// succeeds with its run: never a session left without it (the session and
// its first run are one durable write).
func TestFailedSendCreatesNothing(t *testing.T) {
	t.Parallel()
	for k := 1; k <= 4; k++ {
		ffs := vfstest.New(nil)
		clk := clock.NewFake(t0)
		st, err := fsstore.Open(context.Background(), t.TempDir(), fsstore.Options{FS: ffs, Clock: clk})
		require.NoError(t, err)
		rt, err := New(Options{Store: st, Clock: clk, Providers: provider.Registry{"p": &funcProvider{name: "p", run: hang}}, PruneEvery: -1})
		require.NoError(t, err)
		require.NoError(t, rt.Start(context.Background()))
		var writes atomic.Int32
		ffs.Set(vfstest.Faults{Write: func(name string, p []byte) (int, error) {
			if strings.HasSuffix(name, "journal.jsonl") && writes.Add(1) == int32(k) {
				return 0, syscall.ENOSPC
			}
			return len(p), nil
		}})
		run, serr := rt.Submit(context.Background(), SubmitRequest{Provider: "p", Prompt: "x"})
		ffs.Set(vfstest.Faults{})
		sessions, err := st.Sessions(context.Background(), belay.SessionFilter{})
		require.NoError(t, err)
		if serr != nil {
			require.ErrorIs(t, serr, belay.ErrDiskFull, "write %d", k)
			require.Empty(t, sessions, "write %d failed: a failed send creates nothing", k)
		} else {
			require.Len(t, sessions, 1, "write %d", k)
			runs, err := st.Runs(context.Background(), belay.RunFilter{Session: sessions[0].ID})
			require.NoError(t, err)
			require.Len(t, runs, 1, "write %d: the session holds its run", k)
			require.Equal(t, run.ID, runs[0].ID)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		require.NoError(t, rt.Stop(ctx))
		cancel()
		require.NoError(t, st.Close())
	}
}
