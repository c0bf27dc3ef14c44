package journal

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/belayhq/belay/internal/crashtest"
	"github.com/stretchr/testify/require"
)

var crashCycles = flag.Int("crash.cycles", 50, "SIGKILL cycles in TestCrashRecovery")

const crashChildEnv = "BELAY_JOURNAL_CRASH_CHILD"

// crashChild appends from several goroutines until killed, printing
// "seq writer counter" for every acknowledged Sync append.
func crashChild() {
	dir := os.Getenv(crashChildEnv)
	j, err := Open(dir, Options{BufferedDelay: time.Millisecond})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(3)
	}
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				d := Sync
				if i%3 == 2 {
					d = Buffered
				}
				data := fmt.Sprintf(`{"w":%d,"i":%d,"pid":%d}`, w, i, os.Getpid())
				seqs, err := j.Append(context.Background(), d, Event{Type: "crash.test", Data: json.RawMessage(data)})
				if err != nil {
					fmt.Fprintln(os.Stderr, "append:", err)
					os.Exit(4)
				}
				if d == Sync {
					mu.Lock()
					fmt.Fprintf(out, "%d %d %d\n", seqs[0], w, i)
					_ = out.Flush()
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
}

type ack struct{ w, i int }

// TestCrashRecovery SIGKILLs a child that appends under concurrent load,
// then checks after each reopen that every acknowledged Sync append is
// present with its data and that seqs are gap-free.
func TestCrashRecovery(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	acked := map[uint64]ack{}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	for cycle := 0; cycle < *crashCycles; cycle++ {
		child := crashtest.Start(t, crashChildEnv+"="+dir)
		// Wait for the first acknowledgement, then kill at a random point.
		first := child.First(t, fmt.Sprintf("its first ack (cycle %d)", cycle))
		time.Sleep(time.Duration(rng.IntN(30)) * time.Millisecond)
		recordAck(t, acked, first)
		for _, line := range child.Kill(t) {
			recordAck(t, acked, line)
		}

		j, err := Open(dir, Options{})
		require.NoError(t, err, "cycle %d", cycle)
		evs, err := j.Read(0, 0)
		require.NoError(t, err)
		require.NoError(t, j.Close())
		for i, e := range evs {
			require.Equal(t, uint64(i+1), e.Seq, "cycle %d: seqs are gap-free", cycle)
		}
		for seq, a := range acked {
			require.LessOrEqual(t, seq, uint64(len(evs)), "cycle %d: acknowledged seq %d lost", cycle, seq)
			var d struct{ W, I int }
			require.NoError(t, json.Unmarshal(evs[seq-1].Data, &d))
			require.Equal(t, a, ack{d.W, d.I}, "cycle %d: seq %d holds another event", cycle, seq)
		}
		// Acks accumulate: a later recovery must not lose an earlier ack.
	}
}

func recordAck(t *testing.T, acked map[uint64]ack, line string) {
	f := strings.Fields(line)
	if len(f) != 3 {
		return // a line cut by the kill
	}
	seq, err1 := strconv.ParseUint(f[0], 10, 64)
	w, err2 := strconv.Atoi(f[1])
	i, err3 := strconv.Atoi(f[2])
	if err1 != nil || err2 != nil || err3 != nil {
		return
	}
	acked[seq] = ack{w, i}
}
