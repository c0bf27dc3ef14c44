package testpg_test

import (
	"context"
	"os"
	"testing"

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
