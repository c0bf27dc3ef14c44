package fsstore

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
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

var crashCycles = flag.Int("crash.cycles", 20, "SIGKILL cycles in TestStoreCrashRecovery")

const crashChildEnv = "BELAY_FSSTORE_CRASH_CHILD"

// crashChild drives runs and deliveries through their lifecycles in a few
// sessions until killed, printing each acknowledged state change as
// "kind id state".
func crashChild(dir string) {
	ctx := context.Background()
	s, err := Open(ctx, dir, Options{LockTTL: 2 * time.Second, SnapshotEvery: 7})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(3)
	}
	out := bufio.NewWriter(os.Stdout)
	ack := func(format string, args ...any) {
		fmt.Fprintf(out, format+"\n", args...)
		_ = out.Flush()
	}
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(4)
	}
	for {
		sess, err := s.CreateSession(ctx, belay.SessionInput{Provider: "fake"})
		if err != nil {
			fail(err)
		}
		ack("session %s created", sess.ID)
		for i := 0; i < 5; i++ {
			r, _, err := s.CreateRun(ctx, belay.RunInput{Session: sess.ID, Input: json.RawMessage(`{"prompt":"x"}`)})
			if err != nil {
				fail(err)
			}
			ack("run %s queued", r.ID)
			r, err = s.AcquireRunLease(ctx, r.ID, "child", time.Hour, 0)
			if err != nil {
				fail(err)
			}
			ack("run %s running", r.ID)
			if _, err := s.Append(ctx, sess.ID, belay.Buffered, belay.Event{Type: "delta", Run: r.ID, Epoch: r.Epoch, Data: json.RawMessage(`"tok"`)}); err != nil {
				fail(err)
			}
			if _, err := s.UpdateRun(ctx, r.ID, r.Epoch, belay.RunUpdate{Phase: belay.PhaseComplete}); err != nil {
				fail(err)
			}
			ack("run %s complete", r.ID)
			d, _, err := s.PostDelivery(ctx, belay.DeliveryInput{Session: sess.ID, Type: "run.completed", Key: r.ID})
			if err != nil {
				fail(err)
			}
			ack("delivery %s pending", d.ID)
			got, err := s.LeaseDeliveries(ctx, sess.ID, "child", time.Hour, 1)
			if err != nil || len(got) != 1 {
				fail(fmt.Errorf("lease: %v %d", err, len(got)))
			}
			if _, err := s.SettleDelivery(ctx, got[0].ID, belay.Settlement{Kind: belay.SettleDone, Epoch: got[0].Epoch}); err != nil {
				fail(err)
			}
			ack("delivery %s done", got[0].ID)
		}
	}
}

// TestStoreCrashRecovery SIGKILLs a process that changes store state and
// checks, after each restart, that every acknowledged change is there and
// that the store is consistent and writable.
func TestStoreCrashRecovery(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	acked := map[string]string{} // "kind id" -> last acknowledged state
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	for cycle := 0; cycle < *crashCycles; cycle++ {
		child := crashtest.Start(t, crashChildEnv+"="+dir)
		first := child.First(t, fmt.Sprintf("it acknowledged anything (cycle %d)", cycle))
		time.Sleep(time.Duration(20+rng.IntN(80)) * time.Millisecond)
		record(acked, first)
		for _, line := range child.Kill(t) {
			record(acked, line)
		}

		// The dead child's lock is taken over at once.
		s, err := Open(context.Background(), dir, Options{})
		require.NoError(t, err, "cycle %d", cycle)
		checkAcked(t, s, acked, cycle)
		sessions, err := s.Sessions(context.Background(), belay.SessionFilter{})
		require.NoError(t, err)
		for _, sess := range sessions {
			require.NotEqual(t, belay.SessionQuarantined, sess.State, "cycle %d: %s", cycle, sess.Problem)
		}
		require.NoError(t, s.Close())
	}
}

func record(acked map[string]string, line string) {
	f := strings.Fields(line)
	if len(f) == 3 {
		acked[f[0]+" "+f[1]] = f[2]
	}
}

// rank orders states so that a later state satisfies an earlier ack.
var rank = map[string]int{"created": 0, "queued": 0, "running": 1, "complete": 2, "pending": 0, "done": 1}

func checkAcked(t *testing.T, s *Store, acked map[string]string, cycle int) {
	t.Helper()
	ctx := context.Background()
	for key, want := range acked {
		kind, id, _ := strings.Cut(key, " ")
		var got string
		switch kind {
		case "session":
			_, err := s.Session(ctx, id)
			require.NoError(t, err, "cycle %d: acknowledged session %s lost", cycle, id)
			got = "created"
		case "run":
			r, err := s.Run(ctx, id)
			require.NoError(t, err, "cycle %d: acknowledged run %s lost", cycle, id)
			got = string(r.Status)
		case "delivery":
			d, err := s.Delivery(ctx, id)
			require.NoError(t, err, "cycle %d: acknowledged delivery %s lost", cycle, id)
			got = string(d.Status)
		}
		require.GreaterOrEqual(t, rank[got], rank[want], "cycle %d: %s acknowledged %s, found %s", cycle, key, want, got)
	}
}
