package fsstore

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/crashtest"
)

const bufferedCrashChildEnv = "BELAY_FSSTORE_BUFFERED_CRASH_CHILD"

// bufferedCrashChild drives runs through the runner's phases, the
// in-attempt ones buffered, until killed, printing each acknowledged
// state: "run id queued|running|complete" and "phase id streaming" once
// a synced write after the buffered streaming change returned.
func bufferedCrashChild(dir string) {
	ctx := context.Background()
	// Frequent snapshots, taken while buffered changes are in flight.
	s, err := Open(ctx, dir, Options{LockTTL: 2 * time.Second, SnapshotEvery: 3})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(3)
	}
	out := bufio.NewWriter(os.Stdout)
	ack := func(format string, args ...any) {
		fmt.Fprintf(out, format+"\n", args...)
		_ = out.Flush()
	}
	must := func(err error) {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(4)
		}
	}
	for n := 0; ; n++ {
		sess, err := s.CreateSession(ctx, belay.SessionInput{Provider: "fake"})
		must(err)
		for i := 0; i < 4; i++ {
			r, _, err := s.CreateRun(ctx, belay.RunInput{Session: sess.ID, Input: json.RawMessage(`{"prompt":"x"}`)})
			must(err)
			ack("run %s queued", r.ID)
			r, err = s.AcquireRunLease(ctx, r.ID, "child", time.Hour, 0)
			must(err)
			_, err = s.UpdateRun(ctx, r.ID, r.Epoch, belay.RunUpdate{Phase: belay.PhaseAwaitingResponse, Attempt: 1})
			must(err)
			ack("run %s running", r.ID)
			_, err = s.UpdateRun(ctx, r.ID, r.Epoch, belay.RunUpdate{Phase: belay.PhaseStreaming, Buffered: true})
			must(err)
			_, err = s.Append(ctx, sess.ID, belay.Buffered, belay.Event{Type: "delta", Run: r.ID, Epoch: r.Epoch, Data: json.RawMessage(`"tok"`)})
			must(err)
			if (n+i)%2 == 0 {
				// A synced write carries the buffered change before it.
				_, err = s.RenewRunLease(ctx, r.ID, r.Epoch, time.Hour, nil)
				must(err)
				ack("phase %s streaming", r.ID)
			}
			_, err = s.UpdateRun(ctx, r.ID, r.Epoch, belay.RunUpdate{Phase: belay.PhaseFinishing, Buffered: true})
			must(err)
			if i == 3 {
				continue // left running, its last change buffered
			}
			_, err = s.UpdateRun(ctx, r.ID, r.Epoch, belay.RunUpdate{Phase: belay.PhaseComplete})
			must(err)
			ack("run %s complete", r.ID)
		}
	}
}

// TestBufferedPhaseCrashRecovery SIGKILLs a process that journals
// buffered phase changes between synced ones and checks, after each
// restart, that every acknowledged change is there, that a buffered
// change a synced write carried survived, and that the state rebuilt from
// the snapshots is the state rebuilt from the journals alone (a snapshot
// never covers a buffered change it did not fold).
func TestBufferedPhaseCrashRecovery(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	acked := map[string]string{}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 5))
	after := map[belay.RunPhase]int{belay.PhaseStreaming: 1, belay.PhaseFinishing: 2, belay.PhaseComplete: 3}
	for cycle := 0; cycle < *crashCycles; cycle++ {
		child := crashtest.Start(t, bufferedCrashChildEnv+"="+dir)
		record(acked, child.First(t, fmt.Sprintf("it acknowledged anything (cycle %d)", cycle)))
		// Let it work for a random number of acknowledgements.
		for k := rng.IntN(60); k > 0; k-- {
			l, ok := <-child.Lines
			if !ok {
				t.Fatalf("cycle %d: the child ended: %s", cycle, child.Stderr())
			}
			record(acked, l)
		}
		for _, line := range child.Kill(t) {
			record(acked, line)
		}

		s, err := Open(context.Background(), dir, Options{})
		require.NoError(t, err, "cycle %d", cycle)
		ctx := context.Background()
		for key, want := range acked {
			kind, id, _ := strings.Cut(key, " ")
			r, err := s.Run(ctx, id)
			require.NoError(t, err, "cycle %d: acknowledged run %s lost", cycle, id)
			switch kind {
			case "run":
				require.GreaterOrEqual(t, rank[string(r.Status)], rank[want], "cycle %d: %s acknowledged %s, found %s", cycle, key, want, r.Status)
			case "phase":
				require.Positive(t, after[r.Phase], "cycle %d: %s: the synced write after streaming survived, the phase is %s", cycle, id, r.Phase)
			}
		}
		fromSnap := capture(t, s)
		for _, sess := range fromSnap.Sessions {
			require.NotEqual(t, belay.SessionQuarantined, sess.State, "cycle %d: %s", cycle, sess.Problem)
		}
		require.NoError(t, s.Close())
		snaps := t.TempDir()
		require.NoError(t, os.CopyFS(snaps, os.DirFS(dir)))
		dropFolds(t, snaps)
		fromJournal := openStore(t, snaps, Options{})
		require.Equal(t, fromSnap, capture(t, fromJournal), "cycle %d", cycle)
		require.NoError(t, fromJournal.Close())
	}
}
