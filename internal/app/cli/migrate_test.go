package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay/internal/testpg"
	"github.com/belayhq/belay/store/pgstore"
)

// TestMigrate: `belay migrate --status` shows pending migrations and
// changes nothing; `belay migrate` applies them; the store comes from
// --store, $BELAY_STORE or config.toml; the file store is told it needs
// none.
func TestMigrate(t *testing.T) {
	pg := testpg.Start(t, testpg.Options{})
	url := pg.Database(t)
	home := t.TempDir()
	env := map[string]string{"BELAY_HOME": home}

	code, _, stderr := run(t, env, "migrate")
	require.Equal(t, ExitUsage, code)
	require.Contains(t, stderr, "the file store needs no migrations")

	status := func(env map[string]string, args ...string) pgstore.MigrationStatus {
		code, out, stderr := run(t, env, append([]string{"migrate", "--status", "--json"}, args...)...)
		require.Equal(t, ExitOK, code, stderr)
		var st pgstore.MigrationStatus
		require.NoError(t, json.Unmarshal([]byte(out), &st))
		return st
	}
	st := status(env, "--store", url)
	require.Zero(t, st.Current)
	require.NotEmpty(t, st.Pending)
	require.Zero(t, status(env, "--store", url).Current, "--status changes nothing")

	code, out, stderr := run(t, map[string]string{"BELAY_HOME": home, "BELAY_STORE": url}, "migrate")
	require.Equal(t, ExitOK, code, stderr)
	require.Contains(t, stderr, "applied 0001_init")
	require.Contains(t, stderr, "applied 0002_delivery_expired_epoch")
	latest := st.Latest
	require.Contains(t, out, fmt.Sprintf("schema version %d of %d", latest, latest))
	all, err := pgstore.Migrations()
	require.NoError(t, err)
	for _, m := range all {
		require.Contains(t, stderr, fmt.Sprintf("applied %04d_%s", m.Version, m.Name))
	}

	require.NoError(t, os.WriteFile(filepath.Join(home, "config.toml"), []byte("[store]\nurl = \""+url+"\"\n"), 0o600))
	st = status(env)
	require.Equal(t, st.Latest, st.Current)
	require.Empty(t, st.Pending)

	code, _, stderr = run(t, env, "migrate", "--store", "mysql://nope")
	require.Equal(t, ExitUsage, code)
	require.Contains(t, stderr, "postgres://")
}

// TestMigrateNamesWhatToChange: a database that does not exist is a wrong
// store setting (exit 2), not an unreachable store (exit 6, "try again
// later"); the message says how to create it, and the same command works
// once it is there.
func TestMigrateNamesWhatToChange(t *testing.T) {
	pg := testpg.Start(t, testpg.Options{})
	env := map[string]string{"BELAY_HOME": t.TempDir()}
	missing := pg.URL("belay_to_create")
	args := []string{"migrate", "--store", missing}
	code, _, stderr := run(t, env, args...)
	require.Equal(t, ExitUsage, code, stderr)
	require.Contains(t, stderr, `database "belay_to_create" does not exist`)
	require.Contains(t, stderr, `CREATE DATABASE "belay_to_create"`)
	require.Contains(t, stderr, "then run the same command again")
	require.NotContains(t, stderr, "unreachable")

	admin, err := pgxpool.New(context.Background(), pg.Database(t))
	require.NoError(t, err)
	t.Cleanup(admin.Close)
	_, err = admin.Exec(context.Background(), `CREATE DATABASE "belay_to_create"`)
	require.NoError(t, err)
	code, _, stderr = run(t, env, args...)
	require.Equal(t, ExitOK, code, stderr)
	require.Contains(t, stderr, "applied 0001_init")
}
