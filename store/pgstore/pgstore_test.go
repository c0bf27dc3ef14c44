package pgstore_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/clock"
	"github.com/belayhq/belay/internal/testpg"
	"github.com/belayhq/belay/store"
	"github.com/belayhq/belay/store/pgstore"
	"github.com/belayhq/belay/store/storetest"
)

// cluster is the package's throwaway PostgreSQL; every test gets its own
// database in it.
var cluster *testpg.Cluster

func TestMain(m *testing.M) {
	code := func() int {
		if _, err := testpg.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "SKIPPING pgstore tests: %v\n", err)
			return m.Run()
		}
		c, err := testpg.New(context.Background(), testpg.Options{MaxConnections: 300})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		cluster = c
		defer func() {
			if err := c.Stop(); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
		}()
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		code := m.Run()
		if code == 0 {
			if err := goleak.Find(); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
		return code
	}()
	os.Exit(code)
}

// database returns a fresh database's URL, skipping loudly without
// PostgreSQL.
func database(t *testing.T) string {
	t.Helper()
	if cluster == nil {
		t.Skip("SKIPPING: PostgreSQL server binaries not found (apt-get install postgresql)")
	}
	return cluster.Database(t)
}

// twoNodes opens two stores (two pools, two listeners) on one fresh
// database, as two nodes are; they are closed when the test ends.
func twoNodes(t *testing.T) (a, b *pgstore.Store) {
	t.Helper()
	url := database(t)
	a, b = open(t, url, nil), open(t, url, nil)
	t.Cleanup(func() {
		require.NoError(t, a.Close())
		require.NoError(t, b.Close())
	})
	return a, b
}

func open(t *testing.T, url string, clk clock.Clock) *pgstore.Store {
	t.Helper()
	s, err := pgstore.Open(context.Background(), url, pgstore.Options{Clock: clk, Migrate: true, MaxConns: 4})
	require.NoError(t, err)
	return s
}

// opened remembers where each store of the suite lives, for Reopen.
var opened sync.Map

type where struct {
	url string
	clk clock.Clock
}

func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T, clk *clock.Fake) store.Store {
			url := database(t)
			s := open(t, url, clk)
			opened.Store(s, where{url, clk})
			return s
		},
		Reopen: func(t *testing.T, s store.Store) store.Store {
			v, ok := opened.Load(s)
			require.True(t, ok)
			w := v.(where)
			require.NoError(t, s.Close())
			again := open(t, w.url, w.clk)
			opened.Store(again, w)
			return again
		},
	})
}

// TestPeers runs the peer suite with one store per runtime instance over
// one database: each has its own connection pool and listener, as nodes
// on separate machines do.
func TestPeers(t *testing.T) {
	storetest.RunPeers(t, storetest.PeerHarness{New: func(t *testing.T, clk *clock.Fake, n int) []store.Store {
		url := database(t)
		out := make([]store.Store, n)
		for i := range out {
			out[i] = open(t, url, clk)
		}
		return out
	}})
}

// TestOpenRefusesAnOldServer: a server older than belay needs is named
// in a clear error, before anything is written.
func TestOpenRefusesAnOldServer(t *testing.T) {
	url := database(t)
	pgstore.RequireServerVersion(t, 990000)
	_, err := pgstore.Open(context.Background(), url, pgstore.Options{Migrate: true})
	require.ErrorIs(t, err, belay.ErrInvalid)
	require.ErrorContains(t, err, "belay needs PostgreSQL 12 or newer")
	require.ErrorContains(t, err, "is PostgreSQL 15.")
}

// TestRedact: no form of a connection string keeps its password.
func TestRedact(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, secret string }{
		{"postgres://belay:hunter2@db:5432/belay", "hunter2"},
		{"postgres://belay:hun%40ter2@db/belay", "hun"},
		{"postgresql://belay:p%3Aw@db/belay?sslmode=disable", "p%3Aw"},
		{"postgres://belay@db/belay?sslmode=disable&password=hunter2", "hunter2"},
		{"host=db user=belay password=hunter2 dbname=belay", "hunter2"},
		{"host=db password = 'hun ter2' dbname=belay", "ter2"},
	} {
		out := pgstore.Redact(tc.in)
		require.NotContains(t, out, tc.secret, tc.in)
		require.Contains(t, out, "xxxxx", tc.in)
		require.Contains(t, out, "db", "the rest stays: %s", tc.in)
	}
	require.Equal(t, "postgres://belay@db/belay", pgstore.Redact("postgres://belay@db/belay"), "nothing to hide")
}
