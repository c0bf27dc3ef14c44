package pgstore_test

import (
	"context"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/store/pgstore"
)

// TestOpenRefusedForWhatTheURLSays: a server that answers and refuses the
// connection for what the store URL says (no such database, no such
// role, no CONNECT privilege) is a wrong --store, belay.ErrInvalid with
// what to change, not "store unreachable" (waiting fixes none of them);
// a server that does not answer still is unreachable.
func TestOpenRefusedForWhatTheURLSays(t *testing.T) {
	dbURL := database(t)
	ctx := context.Background()
	open := func(u string) error {
		s, err := pgstore.Open(ctx, u, pgstore.Options{Migrate: true})
		if err == nil {
			require.NoError(t, s.Close())
		}
		return err
	}
	refused := func(t *testing.T, err error, says ...string) {
		t.Helper()
		require.ErrorIs(t, err, belay.ErrInvalid)
		require.NotErrorIs(t, err, belay.ErrStoreUnreachable)
		for _, s := range says {
			require.ErrorContains(t, err, s)
		}
	}
	withUser := func(u, user string) string {
		p, err := url.Parse(u)
		require.NoError(t, err)
		p.User = url.User(user)
		return p.String()
	}

	t.Run("no such database", func(t *testing.T) {
		err := open(cluster.URL("belay_no_such_db"))
		refused(t, err, `database "belay_no_such_db" does not exist`, "createdb -h 127.0.0.1 -p ", " -U postgres belay_no_such_db",
			`CREATE DATABASE "belay_no_such_db"`, "then run belay migrate --store 'postgres://postgres@127.0.0.1:")
	})
	t.Run("no such role", func(t *testing.T) {
		refused(t, open(withUser(dbURL, "belay_nobody")), `did not let user "belay_nobody" in`, `role "belay_nobody" does not exist`, "SQLSTATE 28000", "fix the user or password in --store")
	})
	t.Run("no CONNECT privilege", func(t *testing.T) {
		admin, err := pgxpool.New(ctx, dbURL)
		require.NoError(t, err)
		defer admin.Close()
		p, err := url.Parse(dbURL)
		require.NoError(t, err)
		db := p.Path[1:]
		_, err = admin.Exec(ctx, `CREATE ROLE belay_outsider LOGIN`)
		require.NoError(t, err)
		t.Cleanup(func() { _, _ = admin.Exec(context.Background(), `DROP ROLE belay_outsider`) })
		_, err = admin.Exec(ctx, `REVOKE CONNECT ON DATABASE `+db+` FROM PUBLIC`)
		require.NoError(t, err)
		refused(t, open(withUser(dbURL, "belay_outsider")), `user "belay_outsider" may not connect to database "`+db+`"`, "SQLSTATE 42501", `GRANT CONNECT ON DATABASE "`+db+`" TO "belay_outsider"`)
	})
	t.Run("a server that does not answer", func(t *testing.T) {
		err := open("postgres://postgres@/x?host=" + url.QueryEscape(t.TempDir()) + "&port=5432&connect_timeout=5")
		require.ErrorIs(t, err, belay.ErrStoreUnreachable)
		require.NotErrorIs(t, err, belay.ErrInvalid)
	})
}
