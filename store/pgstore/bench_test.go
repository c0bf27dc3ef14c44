package pgstore_test

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/testpg"
	"github.com/belayhq/belay/store"
	"github.com/belayhq/belay/store/pgstore"
)

// benchCluster starts a cluster with fsync on, as production runs.
func benchCluster(b *testing.B) *testpg.Cluster {
	if cluster == nil {
		b.Skip("SKIPPING: PostgreSQL server binaries not found")
	}
	pg, err := testpg.New(context.Background(), testpg.Options{Fsync: true, SharedBuffers: "128MB", MaxConnections: 100})
	require.NoError(b, err)
	b.Cleanup(func() { require.NoError(b, pg.Stop()) })
	return pg
}

// BenchmarkConcurrentCommits measures synced commits from many writers,
// each on its own session, on a cluster with fsync on: "change" commits a
// state change (CreateRun, with its change-feed rows), "event" a caller
// event (Append: no feed row), the baseline of the same run. Their ratio
// is what the feed costs writers (docs/postgres.md). "alone" gives every
// write its own transaction (Options.WriteAlone), "shared" lets writes in
// flight at once share one (the default): their ratio is what the group
// commit gains.
//
//	go test -run '^$' -bench ConcurrentCommits -benchtime 2000x ./store/pgstore/
func BenchmarkConcurrentCommits(b *testing.B) {
	pg := benchCluster(b)
	ctx := context.Background()
	for _, mode := range []string{"alone", "shared"} {
		for _, kind := range []string{"event", "change"} {
			b.Run(mode+"/"+kind, func(b *testing.B) {
				s, err := pgstore.Open(ctx, pg.Database(b), pgstore.Options{Migrate: true, MaxConns: 32, WriteAlone: mode == "alone"})
				require.NoError(b, err)
				defer s.Close()
				b.SetParallelism(8) // 8 writers per CPU
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					sess, err := s.CreateSession(ctx, belay.SessionInput{Provider: "p"})
					if err != nil {
						b.Error(err)
						return
					}
					for pb.Next() {
						if kind == "change" {
							_, _, err = s.CreateRun(ctx, belay.RunInput{Session: sess.ID})
						} else {
							_, err = s.Append(ctx, sess.ID, belay.Sync, belay.Event{Type: "note"})
						}
						if err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}

// BenchmarkSubmit measures submitting runs to 500 sessions: "one" from 16
// submitters one run per call (Submit), "batch" 500 runs per call
// (SubmitBatch, the path of POST /v1/runs:batch), on the same cluster in
// the same run. It reports runs/s.
//
//	go test -run '^$' -bench Submit -benchtime 5000x ./store/pgstore/
func BenchmarkSubmit(b *testing.B) {
	pg := benchCluster(b)
	ctx := context.Background()
	for _, mode := range []string{"one", "batch"} {
		b.Run(mode, func(b *testing.B) {
			s, err := pgstore.Open(ctx, pg.Database(b), pgstore.Options{Migrate: true, MaxConns: 32})
			require.NoError(b, err)
			defer s.Close()
			sessions := make([]string, 500)
			for i := range sessions {
				sess, err := s.CreateSession(ctx, belay.SessionInput{Provider: "p"})
				require.NoError(b, err)
				sessions[i] = sess.ID
			}
			in := func(i int) store.SubmitInput {
				return store.SubmitInput{Policy: belay.PolicyEnqueue, RunInput: belay.RunInput{
					Session: sessions[i%len(sessions)], Input: json.RawMessage(`{"prompt":"ok"}`)}}
			}
			b.ResetTimer()
			start := time.Now()
			var next atomic.Int64
			var wg sync.WaitGroup
			per := int64(1)
			if mode == "batch" {
				per = 500
			}
			for range 16 {
				wg.Go(func() {
					for {
						from := next.Add(per) - per
						if from >= int64(b.N) {
							return
						}
						n := min(per, int64(b.N)-from)
						if mode == "one" {
							if _, err := s.Submit(ctx, in(int(from))); err != nil {
								b.Error(err)
								return
							}
							continue
						}
						ins := make([]store.SubmitInput, n)
						for k := range ins {
							ins[k] = in(int(from) + k)
						}
						_, errs := s.SubmitBatch(ctx, ins)
						for _, err := range errs {
							if err != nil {
								b.Error(err)
								return
							}
						}
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "runs/s")
		})
	}
}
