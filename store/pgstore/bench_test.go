package pgstore_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/testpg"
	"github.com/belayhq/belay/store/pgstore"
)

// BenchmarkConcurrentCommits measures synced commits from many writers,
// each on its own session, on a cluster with fsync on: "change" commits a
// state change (CreateRun, with its change-feed rows), "event" a caller
// event (Append: no feed row), the baseline of the same run. Their ratio
// is what the feed costs writers (docs/postgres.md).
//
//	go test -run '^$' -bench ConcurrentCommits -benchtime 2000x ./store/pgstore/
func BenchmarkConcurrentCommits(b *testing.B) {
	if cluster == nil {
		b.Skip("SKIPPING: PostgreSQL server binaries not found")
	}
	ctx := context.Background()
	pg, err := testpg.New(ctx, testpg.Options{Fsync: true, SharedBuffers: "128MB", MaxConnections: 100})
	require.NoError(b, err)
	defer func() { require.NoError(b, pg.Stop()) }()
	for _, kind := range []string{"event", "change"} {
		b.Run(kind, func(b *testing.B) {
			s, err := pgstore.Open(ctx, pg.Database(b), pgstore.Options{Migrate: true, MaxConns: 32})
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
