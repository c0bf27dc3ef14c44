package journal

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"testing"
)

var benchData = json.RawMessage(`{"text":"the quick brown fox jumps over the lazy dog, again and again and again and again"}`)

func benchJournal(b *testing.B) *Journal {
	b.Helper()
	j, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = j.Close() })
	return j
}

// BenchmarkAppendSync measures group-committed durable appends from 64
// concurrent writers (with GOMAXPROCS=2).
func BenchmarkAppendSync(b *testing.B) {
	j := benchJournal(b)
	b.SetParallelism(32)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		e := Event{Type: "bench", Data: benchData}
		for pb.Next() {
			if _, err := j.Append(context.Background(), Sync, e); err != nil {
				b.Error(err)
				return
			}
		}
	})
	st := j.Stats()
	b.ReportMetric(float64(st.Events)/float64(max(st.Commits, 1)), "events/commit")
}

func BenchmarkAppendBuffered(b *testing.B) {
	j := benchJournal(b)
	b.ReportAllocs()
	e := Event{Type: "bench", Data: benchData}
	for i := 0; i < b.N; i++ {
		if _, err := j.Append(context.Background(), Buffered, e); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := j.Append(context.Background(), Sync, e); err != nil {
		b.Fatal(err)
	}
}

func fillJournal(b *testing.B, j *Journal, n int) {
	b.Helper()
	batch := make([]Event, 1000)
	for i := range batch {
		batch[i] = Event{Type: "bench", Data: benchData}
	}
	for i := 0; i < n; i += len(batch) {
		if _, err := j.Append(context.Background(), Sync, batch...); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadRandomSeq measures a seek to a random seq and one read.
func BenchmarkReadRandomSeq(b *testing.B) {
	j := benchJournal(b)
	const n = 200_000
	fillJournal(b, j, n)
	rng := rand.New(rand.NewPCG(1, 1))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		after := rng.Uint64N(n)
		evs, err := j.Read(after, 1)
		if err != nil || evs[0].Seq != after+1 {
			b.Fatal(err)
		}
	}
}

// BenchmarkOpenWithSnapshot measures opening a journal with a trusted
// snapshot; compare sizes to see that it does not grow with the journal.
func BenchmarkOpenWithSnapshot(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(itoa(n), func(b *testing.B) {
			dir := b.TempDir()
			j, err := Open(dir, Options{})
			if err != nil {
				b.Fatal(err)
			}
			fillJournal(b, j, n)
			if err := j.WriteSnapshot([]byte(`{}`), j.LastSeq()); err != nil {
				b.Fatal(err)
			}
			_ = j.Close()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				j, err := Open(dir, Options{})
				if err != nil {
					b.Fatal(err)
				}
				if j.Recovery().Snapshot != "trusted" {
					b.Fatal(j.Recovery().Snapshot)
				}
				_ = j.Close()
			}
		})
	}
}

func BenchmarkEncode(b *testing.B) {
	e := Event{Seq: 123456, Type: "run.delta", Run: "run_01jfz0000000000000000000aa", Epoch: 3, Data: benchData}
	var buf []byte
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		buf, _ = appendRecord(buf[:0], &e)
	}
	b.SetBytes(int64(len(buf)))
}

func BenchmarkDecode(b *testing.B) {
	e := Event{Seq: 123456, Type: "run.delta", Run: "run_01jfz0000000000000000000aa", Epoch: 3, Data: benchData}
	line, _ := appendRecord(nil, &e)
	line = line[:len(line)-1]
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := decodeLine(line); err != nil {
			b.Fatal(err)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
