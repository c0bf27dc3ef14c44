package testpg_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
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
