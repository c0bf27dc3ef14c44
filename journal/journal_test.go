package journal

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/vfs"
	"github.com/belayhq/belay/internal/vfs/vfstest"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestMain(m *testing.M) {
	if os.Getenv(crashChildEnv) != "" {
		crashChild()
		return
	}
	goleak.VerifyTestMain(m)
}

type bundle struct {
	dir string
	j   *Journal
}

func setup(t *testing.T, opts Options) *bundle {
	t.Helper()
	dir := t.TempDir()
	j, err := Open(dir, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = j.Close() })
	return &bundle{dir: dir, j: j}
}

func reopen(t *testing.T, b *bundle, opts Options) (*Journal, error) {
	t.Helper()
	require.NoError(t, b.j.Close())
	j, err := Open(b.dir, opts)
	if j != nil {
		t.Cleanup(func() { _ = j.Close() })
		b.j = j
	}
	return j, err
}

func ev(typ string, data string) Event { return Event{Type: typ, Data: json.RawMessage(data)} }

func appendN(t *testing.T, j *Journal, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		_, err := j.Append(context.Background(), Sync, ev("test.event", fmt.Sprintf(`{"i":%d}`, i)))
		require.NoError(t, err)
	}
}

func readAll(t *testing.T, j *Journal) []Event {
	t.Helper()
	evs, err := j.Read(0, 0)
	require.NoError(t, err)
	return evs
}

func requireGapFree(t *testing.T, evs []Event, n int) {
	t.Helper()
	require.Len(t, evs, n)
	for i, e := range evs {
		require.Equal(t, uint64(i+1), e.Seq)
	}
}

func fixedClock() func() time.Time {
	t0 := time.Date(2026, 11, 22, 0, 37, 34, 123456789, time.UTC)
	var mu sync.Mutex
	n := 0
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		n++
		return t0.Add(time.Duration(n) * time.Millisecond)
	}
}

func TestGoldenFormat(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Now: fixedClock()})
	ctx := context.Background()
	_, err := b.j.Append(ctx, Sync,
		Event{Type: "session.created", Data: json.RawMessage(`{"provider": "fake",
  "model":"echo"}`)},
		Event{Type: "run.created", ID: "key-1", Run: "run_01jfz0000000000000000000aa", Data: json.RawMessage(`{"prompt":"hi <there> & \"you\"\n"}`)},
	)
	require.NoError(t, err)
	_, err = b.j.Append(ctx, Buffered, Event{Type: "run.delta", Run: "run_01jfz0000000000000000000aa", Epoch: 3, Data: json.RawMessage(`{"text":"héllo\u2028"}`)})
	require.NoError(t, err)
	_, err = b.j.Append(ctx, Sync, Event{Type: "run.completed", Run: "run_01jfz0000000000000000000aa", Epoch: 3})
	require.NoError(t, err)
	require.NoError(t, b.j.Close())
	got, err := os.ReadFile(filepath.Join(b.dir, FileName))
	require.NoError(t, err)
	golden := filepath.Join("testdata", "golden.jsonl")
	if *update {
		require.NoError(t, os.WriteFile(golden, got, 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got))
	// Every line is plain JSON.
	for _, line := range bytes.Split(bytes.TrimSuffix(got, []byte("\n")), []byte("\n")) {
		require.True(t, json.Valid(line), "%s", line)
	}
}

func TestAppendAndRead(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{})
	ctx := context.Background()
	seqs, err := b.j.Append(ctx, Sync, ev("a", `1`), ev("b", `{"x": [1, 2]}`), Event{Type: "c"})
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 2, 3}, seqs)
	evs := readAll(t, b.j)
	requireGapFree(t, evs, 3)
	require.Equal(t, `{"x":[1,2]}`, string(evs[1].Data))
	require.Nil(t, evs[2].Data)
	part, err := b.j.Read(1, 1)
	require.NoError(t, err)
	require.Len(t, part, 1)
	require.Equal(t, uint64(2), part[0].Seq)
	none, err := b.j.Read(3, 0)
	require.NoError(t, err)
	require.Empty(t, none)
}

func TestInvalidEvents(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{})
	ctx := context.Background()
	for _, e := range []Event{
		{},
		{Type: "Upper"},
		{Type: "9start"},
		{Type: "has space"},
		{Type: "ok", Data: json.RawMessage(`{bad`)},
		{Type: "ok", ID: string(bytes.Repeat([]byte("x"), 300))},
	} {
		_, err := b.j.Append(ctx, Sync, e)
		require.ErrorIs(t, err, ErrInvalidEvent, "%+v", e)
	}
	big := `"` + string(bytes.Repeat([]byte("x"), belay.MaxRecordSize)) + `"`
	_, err := b.j.Append(ctx, Sync, ev("ok", `1`), ev("big", big))
	require.ErrorIs(t, err, ErrTooLarge)
	// Nothing of the refused call was written, and seqs go on.
	seqs, err := b.j.Append(ctx, Sync, ev("ok", `2`))
	require.NoError(t, err)
	require.Equal(t, []uint64{1}, seqs)
	requireGapFree(t, readAll(t, b.j), 1)
}

func TestConcurrentAppendsAreGapFreeAndGrouped(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{})
	const writers, each = 32, 50
	var wg sync.WaitGroup
	got := make([][]uint64, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				seqs, err := b.j.Append(context.Background(), Sync, ev("w", fmt.Sprintf(`{"w":%d,"i":%d}`, w, i)))
				if err != nil {
					t.Error(err)
					return
				}
				got[w] = append(got[w], seqs[0])
			}
		}()
	}
	wg.Wait()
	for _, s := range got {
		for i := 1; i < len(s); i++ {
			require.Greater(t, s[i], s[i-1])
		}
	}
	j, err := reopen(t, b, Options{})
	require.NoError(t, err)
	evs := readAll(t, j)
	requireGapFree(t, evs, writers*each)
	for _, e := range evs {
		var d struct{ W, I int }
		require.NoError(t, json.Unmarshal(e.Data, &d))
		require.Equal(t, got[d.W][d.I], e.Seq)
	}
}

func TestIdempotentAppend(t *testing.T) {
	t.Parallel()
	for _, snapshot := range []bool{false, true} {
		t.Run(fmt.Sprintf("snapshot=%v", snapshot), func(t *testing.T) {
			t.Parallel()
			b := setup(t, Options{})
			ctx := context.Background()
			s1, err := b.j.Append(ctx, Sync, Event{Type: "a", ID: "once"}, Event{Type: "b"})
			require.NoError(t, err)
			s2, err := b.j.Append(ctx, Sync, Event{Type: "a", ID: "once"}, Event{Type: "c", ID: "c1"}, Event{Type: "c", ID: "c1"})
			require.NoError(t, err)
			require.Equal(t, []uint64{1, 2}, s1)
			require.Equal(t, []uint64{1, 3, 3}, s2)
			if snapshot {
				require.NoError(t, b.j.WriteSnapshot([]byte(`{}`), 3))
			}
			j, err := reopen(t, b, Options{})
			require.NoError(t, err)
			if snapshot {
				require.Equal(t, "trusted", j.Recovery().Snapshot)
			}
			s3, err := j.Append(ctx, Buffered, Event{Type: "a", ID: "once"}, Event{Type: "c", ID: "c1"}, Event{Type: "d", ID: "d1"})
			require.NoError(t, err)
			require.Equal(t, []uint64{1, 3, 4}, s3)
			s4, err := j.Append(ctx, Sync, Event{Type: "d", ID: "d1"})
			require.NoError(t, err)
			require.Equal(t, []uint64{4}, s4)
			require.Equal(t, uint64(4), j.LastSeq(), "a duplicate Sync waits for the original to be synced")
			requireGapFree(t, readAll(t, j), 4)
		})
	}
}

func TestBufferedIsCommittedWithinDelay(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{BufferedDelay: 5 * time.Millisecond})
	seqs, err := b.j.Append(context.Background(), Buffered, ev("delta", `"x"`))
	require.NoError(t, err)
	require.Equal(t, []uint64{1}, seqs)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, b.j.Wait(ctx, 0), "a buffered append is committed without another append")
	requireGapFree(t, readAll(t, b.j), 1)
}

func TestCloseCommitsBuffered(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{BufferedDelay: time.Hour})
	for i := 0; i < 10; i++ {
		_, err := b.j.Append(context.Background(), Buffered, ev("delta", `"x"`))
		require.NoError(t, err)
	}
	j, err := reopen(t, b, Options{})
	require.NoError(t, err)
	requireGapFree(t, readAll(t, j), 10)
	_, err = b.j.Append(context.Background(), Sync, ev("x", `1`))
	require.NoError(t, err)
}

func TestSeekThroughIndex(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{})
	pad := `"` + string(bytes.Repeat([]byte("p"), 1000)) + `"`
	const n = 500
	for i := 0; i < n; i += 50 {
		evs := make([]Event, 50)
		for k := range evs {
			evs[k] = ev("pad", pad)
		}
		_, err := b.j.Append(context.Background(), Sync, evs...)
		require.NoError(t, err)
	}
	for _, j := range []*Journal{b.j, mustReopen(t, b)} {
		j.mu.Lock()
		index := append([]indexEntry(nil), j.durable.index...)
		j.mu.Unlock()
		require.Greater(t, len(index), 5, "the index has entries every %d bytes", indexInterval)
		// A seek to a late seq starts reading well past 0.
		require.Greater(t, seekOffset(index, n-1).Off, int64(n/2*1000))
		for _, after := range []uint64{0, 1, 63, 64, 65, 250, n - 1} {
			evs, err := j.Read(after, 2)
			require.NoError(t, err)
			require.Equal(t, after+1, evs[0].Seq)
		}
	}
}

func TestSeekBisectsAThinnedIndex(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{})
	pad := `"` + string(bytes.Repeat([]byte("p"), 3000)) + `"`
	const n = 2000 // ~6 MB: ~95 index entries
	for i := 0; i < n; i += 100 {
		evs := make([]Event, 100)
		for k := range evs {
			evs[k] = ev("pad", pad)
		}
		_, err := b.j.Append(context.Background(), Sync, evs...)
		require.NoError(t, err)
	}
	b.j.snapIndexMax = 4
	require.NoError(t, b.j.WriteSnapshot([]byte(`{}`), n))
	j := mustReopen(t, b)
	require.Equal(t, "trusted", j.Recovery().Snapshot)
	require.Less(t, j.Recovery().Scanned, int64(indexInterval), "open reads a constant amount")
	j.mu.Lock()
	require.LessOrEqual(t, len(j.durable.index), 6)
	index, size := j.durable.index, j.durable.size
	j.mu.Unlock()
	for _, seq := range []uint64{1, 2, 17, 500, 999, 1000, 1001, 1500, 1999, 2000} {
		off, err := j.seek(index, size, seq)
		require.NoError(t, err)
		start, _, _, err := j.lineOf(seq)
		require.NoError(t, err)
		require.LessOrEqual(t, off, start, "seq %d", seq)
		require.Less(t, start-off, int64(3*indexInterval), "seq %d: bisection narrows the scan", seq)
		evs, err := j.Read(seq-1, 1)
		require.NoError(t, err)
		require.Equal(t, seq, evs[0].Seq)
	}
	// Appends after the snapshot extend the index as usual.
	appendN(t, j, 10)
	evs, err := j.Read(n+4, 1)
	require.NoError(t, err)
	require.Equal(t, uint64(n+5), evs[0].Seq)
}

func mustReopen(t *testing.T, b *bundle) *Journal {
	j, err := reopen(t, b, Options{})
	require.NoError(t, err)
	return j
}

func TestFollow(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{BufferedDelay: time.Millisecond})
	appendN(t, b.j, 3)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan []uint64)
	go func() {
		var seen []uint64
		for e, err := range b.j.Follow(ctx, 1) {
			if err != nil {
				break
			}
			seen = append(seen, e.Seq)
			if e.Seq == 20 {
				break
			}
		}
		done <- seen
	}()
	for i := 0; i < 17; i++ {
		_, err := b.j.Append(context.Background(), Buffered, ev("delta", `"x"`))
		require.NoError(t, err)
	}
	seen := <-done
	require.Len(t, seen, 19)
	for i, s := range seen {
		require.Equal(t, uint64(i+2), s)
	}
}

func TestWaitReturnsOnClose(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{})
	errc := make(chan error)
	go func() { errc <- b.j.Wait(context.Background(), 0) }()
	require.NoError(t, b.j.Close())
	require.ErrorIs(t, <-errc, ErrClosed)
	_, err := b.j.Append(context.Background(), Sync, ev("a", `1`))
	require.ErrorIs(t, err, ErrClosed)
}

func journalBytes(t *testing.T, dir string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, FileName))
	require.NoError(t, err)
	return raw
}

func writeJournal(t *testing.T, dir string, raw []byte) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(dir, FileName), raw, 0o600))
}

// lineOffsets returns the start offset of each line.
func lineOffsets(raw []byte) []int {
	offs := []int{0}
	for i, c := range raw {
		if c == '\n' && i+1 < len(raw) {
			offs = append(offs, i+1)
		}
	}
	return offs
}

func TestTornTailIsTruncatedAfterBackup(t *testing.T) {
	t.Parallel()
	cases := map[string]func(raw []byte, offs []int) []byte{
		"partial last line": func(raw []byte, _ []int) []byte { return append(raw, `{"seq":11,"ts":"2026`...) },
		"bad crc at eof": func(raw []byte, offs []int) []byte {
			raw = bytes.Clone(raw)
			raw[offs[9]+20] ^= 0x01
			return raw
		},
		"zeroed sector at eof": func(raw []byte, _ []int) []byte { return append(raw, make([]byte, 4096)...) },
		"zeroed last line": func(raw []byte, offs []int) []byte {
			raw = bytes.Clone(raw)
			clear(raw[offs[9]:])
			return raw
		},
		"half a line then zeroes": func(raw []byte, _ []int) []byte {
			return append(append(raw, `{"seq":11,"ts":"2026-11-22`...), make([]byte, 512)...)
		},
	}
	for name, damage := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, Options{})
			appendN(t, b.j, 10)
			require.NoError(t, b.j.Close())
			good := journalBytes(t, b.dir)
			bad := damage(good, lineOffsets(good))
			writeJournal(t, b.dir, bad)

			// A read-only open leaves the file alone.
			ro, err := Open(b.dir, Options{ReadOnly: true})
			require.NoError(t, err)
			require.GreaterOrEqual(t, ro.Recovery().TornAt, int64(0))
			require.NoError(t, ro.Close())
			require.Equal(t, bad, journalBytes(t, b.dir))

			j, err := Open(b.dir, Options{})
			require.NoError(t, err)
			b.j = j
			t.Cleanup(func() { _ = j.Close() })
			rec := j.Recovery()
			require.NotEmpty(t, rec.BrokenCopy)
			kept, err := os.ReadFile(rec.BrokenCopy)
			require.NoError(t, err)
			require.Equal(t, bad, kept, "the broken copy holds the journal as it was")
			n := 10
			if bytes.HasPrefix(bad, good) {
				require.Equal(t, good, journalBytes(t, b.dir))
			} else {
				n = 9
			}
			requireGapFree(t, readAll(t, j), n)
			seqs, err := j.Append(context.Background(), Sync, ev("after", `1`))
			require.NoError(t, err)
			require.Equal(t, []uint64{uint64(n + 1)}, seqs)
		})
	}
}

func TestDamageBeforeTailQuarantines(t *testing.T) {
	t.Parallel()
	cases := map[string]func(raw []byte, offs []int) []byte{
		"bit flip in the middle": func(raw []byte, offs []int) []byte {
			raw = bytes.Clone(raw)
			raw[offs[4]+30] ^= 0x10
			return raw
		},
		"zeroed sector in the middle": func(raw []byte, offs []int) []byte {
			raw = bytes.Clone(raw)
			clear(raw[offs[4] : offs[4]+40])
			return raw
		},
		"newline flipped": func(raw []byte, offs []int) []byte {
			raw = bytes.Clone(raw)
			raw[offs[5]-1] = ' '
			return raw
		},
		"duplicated line": func(raw []byte, offs []int) []byte {
			out := append([]byte(nil), raw[:offs[5]]...)
			out = append(out, raw[offs[4]:offs[5]]...)
			return append(out, raw[offs[5]:]...)
		},
		"valid line with a wrong seq at eof": func(raw []byte, offs []int) []byte {
			return append(bytes.Clone(raw), raw[:offs[1]]...)
		},
		"over-long line": func(raw []byte, offs []int) []byte {
			out := append([]byte(nil), raw[:offs[4]]...)
			out = append(out, bytes.Repeat([]byte("x"), belay.MaxRecordSize+10)...)
			out = append(out, '\n')
			return append(out, raw[offs[4]:]...)
		},
	}
	for name, damage := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, Options{})
			appendN(t, b.j, 10)
			require.NoError(t, b.j.Close())
			good := journalBytes(t, b.dir)
			offs := lineOffsets(good)
			bad := damage(good, offs)
			writeJournal(t, b.dir, bad)

			j, err := Open(b.dir, Options{})
			var q *QuarantineError
			require.ErrorAs(t, err, &q)
			require.ErrorIs(t, err, ErrReadOnly)
			require.NotNil(t, j)
			defer j.Close()
			wantOff := int64(len(good))
			if int(q.LastSeq) < len(offs) {
				wantOff = int64(offs[q.LastSeq])
			}
			require.Equal(t, wantOff, q.Offset)
			require.Contains(t, err.Error(), fmt.Sprintf("offset %d", q.Offset))
			evs, rerr := j.Read(0, 0)
			require.ErrorIs(t, rerr, ErrQuarantined, "a damaged journal is never read as if it ended")
			requireGapFree(t, evs, int(q.LastSeq))
			_, err = j.Append(context.Background(), Sync, ev("x", `1`))
			require.ErrorIs(t, err, ErrQuarantined)
			require.Error(t, j.WriteSnapshot([]byte(`{}`), 1))
			require.NoError(t, j.Close())
			require.Equal(t, bad, journalBytes(t, b.dir), "a damaged journal is never rewritten")
			matches, _ := filepath.Glob(filepath.Join(b.dir, FileName+".broken-*"))
			require.Empty(t, matches)
		})
	}
}

func TestWriteFaultsMakeJournalReadOnly(t *testing.T) {
	t.Parallel()
	cases := map[string]vfstest.Faults{
		"short write": {Write: func(name string, p []byte) (int, error) { return len(p) / 2, nil }},
		"ENOSPC": {Write: func(name string, p []byte) (int, error) {
			return len(p) / 3, syscall.ENOSPC
		}},
		"EIO on fsync": {Sync: func(name string) error { return syscall.EIO }},
	}
	for name, faults := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ffs := vfstest.New(nil)
			b := setup(t, Options{FS: ffs})
			appendN(t, b.j, 5)
			ffs.Set(faults)
			_, err := b.j.Append(context.Background(), Sync, ev("doomed", `1`))
			require.ErrorIs(t, err, ErrReadOnly)
			require.ErrorIs(t, b.j.Err(), ErrReadOnly)
			ffs.Set(vfstest.Faults{})
			// Still read-only: an fsync is never retried on the descriptor.
			_, err = b.j.Append(context.Background(), Sync, ev("later", `1`))
			require.ErrorIs(t, err, ErrReadOnly)
			evs := readAll(t, b.j)
			requireGapFree(t, evs, 5)

			j, err := reopen(t, b, Options{FS: ffs})
			require.NoError(t, err)
			evs = readAll(t, j)
			// The acknowledged five are intact; the failed event may or may
			// not have reached the disk, but nothing is torn or duplicated.
			require.GreaterOrEqual(t, len(evs), 5)
			requireGapFree(t, evs, len(evs))
			seqs, err := j.Append(context.Background(), Sync, ev("after", `1`))
			require.NoError(t, err)
			require.Equal(t, uint64(len(evs)+1), seqs[0])
		})
	}
}

func TestWaitReturnsAfterCommitFailure(t *testing.T) {
	t.Parallel()
	ffs := vfstest.New(nil)
	b := setup(t, Options{FS: ffs})
	appendN(t, b.j, 1)
	errc := make(chan error, 1)
	go func() { errc <- b.j.Wait(context.Background(), 1) }()
	ffs.Set(vfstest.Faults{Sync: func(string) error { return syscall.EIO }})
	_, err := b.j.Append(context.Background(), Sync, ev("x", `1`))
	require.ErrorIs(t, err, ErrReadOnly)
	require.ErrorIs(t, <-errc, ErrReadOnly, "a failed journal wakes its waiters")
	require.ErrorIs(t, b.j.Wait(context.Background(), 1), ErrReadOnly)
}

// TestCloseCutsBackAFailedLastCommit: buffered appends whose commit fails
// as Close drains them were never acknowledged as durable: Close cuts
// their bytes off, and a reopen finds only what was acknowledged.
func TestCloseCutsBackAFailedLastCommit(t *testing.T) {
	t.Parallel()
	ffs := vfstest.New(nil)
	b := setup(t, Options{FS: ffs, BufferedDelay: time.Hour})
	appendN(t, b.j, 2)
	size := b.j.Size()
	_, err := b.j.Append(context.Background(), Buffered, ev("lost", `1`))
	require.NoError(t, err)
	var failed atomic.Bool
	ffs.Set(vfstest.Faults{Sync: func(string) error {
		if failed.CompareAndSwap(false, true) {
			return syscall.EIO // the drain's; the cut's succeeds
		}
		return nil
	}})
	require.NoError(t, b.j.Close())
	require.NotNil(t, b.j.Failed())
	j := mustReopen(t, b)
	require.Equal(t, uint64(2), j.LastSeq())
	require.Equal(t, size, j.Size())
}

// TestLastTS: the time of the last synced event, as appended, as a scan
// of the file finds it, and through a trusted snapshot.
func TestLastTS(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{})
	require.True(t, b.j.LastTS().IsZero())
	ctx := context.Background()
	last := time.Date(2026, 11, 27, 12, 0, 0, 123456789, time.UTC)
	_, err := b.j.Append(ctx, Sync, Event{Type: "a", TS: last.Add(time.Hour)}, Event{Type: "b", TS: last})
	require.NoError(t, err)
	require.Equal(t, last, b.j.LastTS(), "the last, not the latest")
	j := mustReopen(t, b)
	require.Equal(t, last, j.LastTS())
	require.NoError(t, j.WriteSnapshot([]byte(`{}`), j.LastSeq()))
	require.NoError(t, j.Close())
	j = mustReopen(t, b)
	require.Equal(t, "trusted", j.Recovery().Snapshot)
	require.Equal(t, last, j.LastTS())
}

func TestAppendUnique(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{})
	ctx := context.Background()
	seqs, err := b.j.AppendUnique(ctx, Sync, Event{Type: "a", ID: "x"}, Event{Type: "b"})
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 2}, seqs)
	_, err = b.j.AppendUnique(ctx, Sync, Event{Type: "c", ID: "y"}, Event{Type: "a", ID: "x"})
	require.ErrorIs(t, err, ErrDuplicate)
	_, err = b.j.AppendUnique(ctx, Sync, Event{Type: "c", ID: "z"}, Event{Type: "c", ID: "z"})
	require.ErrorIs(t, err, ErrDuplicate)
	requireGapFree(t, readAll(t, b.j), 2)
	seqs, err = b.j.Append(ctx, Sync, Event{Type: "c", ID: "y"})
	require.NoError(t, err)
	require.Equal(t, []uint64{3}, seqs, "nothing of a refused call was written or reserved")
}

func TestEIOFailsEveryWaiter(t *testing.T) {
	t.Parallel()
	ffs := vfstest.New(nil)
	b := setup(t, Options{FS: ffs})
	ffs.Set(vfstest.Faults{Sync: func(string) error { return syscall.EIO }})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := b.j.Append(context.Background(), Sync, ev("x", `1`))
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.ErrorIs(t, err, ErrReadOnly)
	}
	require.Equal(t, uint64(0), b.j.LastSeq())
}

func TestSnapshotTrustAndRebuild(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{})
	appendN(t, b.j, 100)
	require.NoError(t, b.j.WriteSnapshot([]byte(`{"count":100}`), 100))
	appendN(t, b.j, 5)

	j := mustReopen(t, b)
	rec := j.Recovery()
	require.Equal(t, "trusted", rec.Snapshot)
	require.Less(t, rec.Scanned, j.Size()/10, "only the part after the snapshot is scanned")
	state, seq, ok := j.Snapshot()
	require.True(t, ok)
	require.Equal(t, uint64(100), seq)
	require.JSONEq(t, `{"count":100}`, string(state))
	requireGapFree(t, readAll(t, j), 105)

	// A snapshot at an older seq is fine too.
	require.NoError(t, j.WriteSnapshot([]byte(`{"count":50}`), 50))
	j = mustReopen(t, b)
	_, seq, ok = j.Snapshot()
	require.True(t, ok)
	require.Equal(t, uint64(50), seq)
	require.NoError(t, j.Close())

	snapPath := filepath.Join(b.dir, SnapshotName)
	good, err := os.ReadFile(snapPath)
	require.NoError(t, err)

	// A corrupt snapshot is ignored; the journal is canonical.
	bad := bytes.Clone(good)
	bad[len(bad)/2] ^= 0x04
	require.NoError(t, os.WriteFile(snapPath, bad, 0o600))
	j, err = Open(b.dir, Options{})
	require.NoError(t, err)
	require.Contains(t, j.Recovery().Snapshot, "corrupt")
	_, _, ok = j.Snapshot()
	require.False(t, ok)
	requireGapFree(t, readAll(t, j), 105)
	require.NoError(t, j.Close())

	// A snapshot that covers more than the journal (the journal was
	// replaced or cut) is not trusted.
	require.NoError(t, os.WriteFile(snapPath, good, 0o600))
	raw := journalBytes(t, b.dir)
	writeJournal(t, b.dir, raw[:lineOffsets(raw)[40]])
	j, err = Open(b.dir, Options{})
	require.NoError(t, err)
	require.Contains(t, j.Recovery().Snapshot, "covers")
	requireGapFree(t, readAll(t, j), 40)
	require.NoError(t, j.Close())

	// A snapshot whose seq does not sit at its size is not trusted.
	other := setup(t, Options{})
	appendN(t, other.j, 60)
	require.NoError(t, other.j.Close())
	require.NoError(t, os.WriteFile(filepath.Join(other.dir, SnapshotName), good, 0o600))
	appendRaw := journalBytes(t, other.dir)
	// Same sizes, but different timestamps move line boundaries: make it differ.
	writeJournal(t, other.dir, append([]byte(nil), appendRaw...))
	j, err = Open(other.dir, Options{})
	require.NoError(t, err)
	require.NotEqual(t, "trusted", j.Recovery().Snapshot)
	require.NoError(t, j.Close())
}

func TestReadOnlyOpen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, err := Open(dir, Options{ReadOnly: true})
	require.ErrorIs(t, err, os.ErrNotExist)
	j, err := Open(dir, Options{})
	require.NoError(t, err)
	appendN(t, j, 3)
	require.NoError(t, j.Close())
	ro, err := Open(dir, Options{ReadOnly: true})
	require.NoError(t, err)
	defer ro.Close()
	requireGapFree(t, readAll(t, ro), 3)
	_, err = ro.Append(context.Background(), Sync, ev("x", `1`))
	require.ErrorIs(t, err, ErrReadOnly)
}

func TestOpenErrors(t *testing.T) {
	t.Parallel()
	_, err := Open(filepath.Join(t.TempDir(), "missing", "dir"), Options{})
	require.Error(t, err)
	require.True(t, errors.Is(err, os.ErrNotExist))
	require.False(t, Exists(vfs.OS, t.TempDir()))
}

// TestDurableAndOnCommit checks what a store folding buffered events
// relies on: Durable says queued, synced or never, and OnCommit is called
// after a commit made appends durable.
func TestDurableAndOnCommit(t *testing.T) {
	t.Parallel()
	ffs := vfstest.New(nil)
	commits := make(chan struct{}, 16)
	opts := Options{FS: ffs, BufferedDelay: time.Hour, OnCommit: func() { commits <- struct{}{} }}
	b := setup(t, opts)
	ctx := context.Background()
	seqs, err := b.j.Append(ctx, Buffered, ev("buffered", `1`))
	require.NoError(t, err)
	synced, never := b.j.Durable(seqs[0])
	require.False(t, synced || never, "queued: neither")
	_, err = b.j.Append(ctx, Sync, ev("sync", `1`))
	require.NoError(t, err)
	<-commits
	synced, never = b.j.Durable(seqs[0])
	require.True(t, synced)
	require.False(t, never)

	seqs, err = b.j.Append(ctx, Buffered, ev("lost", `1`))
	require.NoError(t, err)
	ffs.Set(vfstest.Faults{Sync: func(string) error { return syscall.EIO }})
	_, err = b.j.Append(ctx, Sync, ev("doomed", `1`))
	require.ErrorIs(t, err, ErrReadOnly)
	synced, never = b.j.Durable(seqs[0])
	require.False(t, synced)
	require.True(t, never, "a failed commit takes it for good")
	require.Empty(t, commits, "no call for a failed commit")

	// Close commits what is queued: a buffered event is synced, not lost.
	ffs.Set(vfstest.Faults{})
	j2, err := reopen(t, b, opts)
	require.NoError(t, err)
	seqs, err = j2.Append(ctx, Buffered, ev("at-close", `1`))
	require.NoError(t, err)
	require.NoError(t, j2.Close())
	synced, never = j2.Durable(seqs[0])
	require.True(t, synced)
	require.False(t, never)
}
