package testpg_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/belayhq/belay/internal/testpg"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestCluster starts a cluster, uses a fresh database over TCP and over the
// unix socket, survives a crash-restart, and leaves nothing behind.
func TestCluster(t *testing.T) {
	ctx := context.Background()
	var dir string
	t.Run("run", func(t *testing.T) {
		c := testpg.Start(t, testpg.Options{})
		dir = c.Dir
		name, err := c.CreateDatabase(ctx)
		require.NoError(t, err)
		url := c.URL(name)
		conn, err := pgx.Connect(ctx, url)
		require.NoError(t, err)
		_, err = conn.Exec(ctx, "CREATE TABLE x (n int); INSERT INTO x VALUES (42)")
		require.NoError(t, err)
		require.NoError(t, conn.Close(ctx))

		require.NoError(t, c.Restart(ctx))
		sock, err := pgx.Connect(ctx, c.SocketURL(name))
		require.NoError(t, err)
		defer sock.Close(ctx)
		var n int
		require.NoError(t, sock.QueryRow(ctx, "SELECT n FROM x").Scan(&n))
		require.Equal(t, 42, n)

		other := c.Database(t)
		require.NotEqual(t, url, other, "each test gets its own database")
	})
	_, err := os.Stat(dir)
	require.ErrorIs(t, err, os.ErrNotExist, "the cluster is removed when its test ends")
}

// TestReaper: a cluster whose process dies without stopping it (a panic,
// a test timeout) is stopped and removed by its reaper.
func TestReaper(t *testing.T) {
	if os.Getenv("TESTPG_CHILD") != "" {
		c, err := testpg.New(context.Background(), testpg.Options{})
		if err != nil {
			t.Fatal(err)
		}
		fmt.Println(c.Dir)
		os.Exit(0) // dies without Stop
	}
	if _, err := testpg.Find(); err != nil {
		t.Skip("SKIPPING: no PostgreSQL server binaries")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestReaper$")
	cmd.Env = append(os.Environ(), "TESTPG_CHILD=1")
	out, err := cmd.Output()
	require.NoError(t, err)
	dir := strings.TrimSpace(string(out))
	require.DirExists(t, dir)
	require.Eventually(t, func() bool {
		_, err := os.Stat(dir)
		return errors.Is(err, os.ErrNotExist)
	}, 60*time.Second, 100*time.Millisecond, "the orphaned cluster is stopped and removed")
}

// TestCPU: the cluster's CPU time grows with the work a backend does and
// keeps that work once the backend has exited.
func TestCPU(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("CPU reads /proc")
	}
	ctx := context.Background()
	c := testpg.Start(t, testpg.Options{})
	before, err := c.CPU()
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	require.NoError(t, err)
	var backend int
	require.NoError(t, conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend))
	// Work until the server has used a quarter second more than before
	// (a condition, not a duration).
	var during time.Duration
	for i := 0; during < before+250*time.Millisecond; i++ {
		require.Less(t, i, 1000, "the server's CPU time does not grow")
		var n int64
		require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM generate_series(1, 2000000)").Scan(&n))
		during, err = c.CPU()
		require.NoError(t, err)
	}
	require.NoError(t, conn.Close(ctx))
	// The backend exits and the postmaster reaps it: its time moves to
	// the postmaster's children's.
	require.Eventually(t, func() bool {
		_, err := os.Stat(fmt.Sprintf("/proc/%d", backend))
		return errors.Is(err, os.ErrNotExist)
	}, time.Minute, 10*time.Millisecond)
	after, err := c.CPU()
	require.NoError(t, err)
	require.GreaterOrEqual(t, after, during, "an exited backend's CPU time is still counted")
}
