package pgstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/store/pgstore"
)

// TestOpenRefusedForWhatTheURLSays: a server that answers and refuses the
// connection for what the store URL says (no such database, no such
// role, no CONNECT privilege) is a wrong store setting, belay.ErrInvalid
// with what to change, not "store unreachable" (waiting fixes none of
// them); a server that does not answer still is unreachable, and so is a
// multi-host URL whose first host refuses the role and whose second does
// not answer.
func TestOpenRefusedForWhatTheURLSays(t *testing.T) {
	dbURL := database(t)
	ctx := context.Background()
	admin, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(admin.Close) // after the cleanups below, which use it
	suffix := func() string {
		var b [4]byte
		_, _ = rand.Read(b[:])
		return hex.EncodeToString(b[:])
	}
	role := func(t *testing.T) string {
		name := "belay_r_" + suffix()
		_, err := admin.Exec(ctx, `CREATE ROLE `+name+` LOGIN`)
		require.NoError(t, err)
		t.Cleanup(func() {
			_, err := admin.Exec(context.Background(), `DROP ROLE `+name)
			require.NoError(t, err)
		})
		return name
	}
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
	withUser := func(u string, user *url.Userinfo) string {
		p, err := url.Parse(u)
		require.NoError(t, err)
		p.User = user
		return p.String()
	}
	p, err := url.Parse(dbURL)
	require.NoError(t, err)
	db := p.Path[1:]

	t.Run("no such database", func(t *testing.T) {
		name := "belay_no_db_" + suffix()
		refused(t, open(cluster.URL(name)), fmt.Sprintf(`database %q does not exist`, name),
			"createdb -h 127.0.0.1 -p "+p.Port()+" -U postgres "+name, `CREATE DATABASE "`+name+`"`, "then run the same command again")
	})
	t.Run("no such database, TLS preferred", func(t *testing.T) {
		// No sslmode: pgx tries TLS, then the same host without it.
		u := strings.Replace(cluster.URL("belay_no_db_tls"), "?sslmode=disable", "", 1)
		refused(t, open(u), "createdb -h 127.0.0.1 -p "+p.Port()+" -U postgres belay_no_db_tls")
	})
	t.Run("no such database, with a password", func(t *testing.T) {
		// The throwaway cluster trusts every local connection: the
		// password is not checked, and never shown.
		err := open(withUser(cluster.URL("belay_no_db_"+suffix()), url.UserPassword("postgres", "s3cret")))
		refused(t, err, "does not exist", "postgres://postgres:xxxxx@")
		require.NotContains(t, err.Error(), "s3cret")
	})
	t.Run("no database in the URL", func(t *testing.T) {
		// The server takes the user's name for the database.
		r := role(t)
		u := withUser(cluster.URL(""), url.User(r))
		refused(t, open(u), fmt.Sprintf(`database %q does not exist`, r), "-U "+r+" "+r, `CREATE DATABASE "`+r+`"`)
	})
	t.Run("no such role", func(t *testing.T) {
		refused(t, open(withUser(dbURL, url.User("belay_nobody"))), `did not let user "belay_nobody" in`, `role "belay_nobody" does not exist`, "SQLSTATE 28000", "fix the user or password")
	})
	t.Run("no CONNECT privilege", func(t *testing.T) {
		r := role(t)
		_, err := admin.Exec(ctx, `REVOKE CONNECT ON DATABASE `+db+` FROM PUBLIC`)
		require.NoError(t, err)
		t.Cleanup(func() {
			_, err := admin.Exec(context.Background(), `GRANT CONNECT ON DATABASE `+db+` TO PUBLIC`)
			require.NoError(t, err)
		})
		refused(t, open(withUser(dbURL, url.User(r))), fmt.Sprintf(`user %q may not connect to database %q`, r, db), "SQLSTATE 42501",
			fmt.Sprintf(`GRANT CONNECT ON DATABASE "%s" TO "%s"`, db, r))
	})
	t.Run("a server that does not answer", func(t *testing.T) {
		err := open("postgres://postgres@/x?host=" + url.QueryEscape(t.TempDir()) + "&port=5432&connect_timeout=5")
		require.ErrorIs(t, err, belay.ErrStoreUnreachable)
		require.NotErrorIs(t, err, belay.ErrInvalid)
	})
	t.Run("one host refuses the role, the next does not answer", func(t *testing.T) {
		dead, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		deadAddr := dead.Addr().String()
		require.NoError(t, dead.Close()) // a port nothing listens on
		u := fmt.Sprintf("postgres://belay_nobody@%s,%s/%s?sslmode=disable&connect_timeout=5", p.Host, deadAddr, db)
		err = open(u)
		require.ErrorIs(t, err, belay.ErrStoreUnreachable)
		require.NotErrorIs(t, err, belay.ErrInvalid)
	})
}

// TestRefusedBy: a connection is refused for its setting only when some
// attempt was refused for it and none failed for the server being away.
func TestRefusedBy(t *testing.T) {
	role := &pgconn.PgError{Code: "28000", Message: `role "x" does not exist`}
	noDB := &pgconn.PgError{Code: "3D000"}
	for _, c := range []struct {
		name     string
		attempts []error
		want     *pgconn.PgError
	}{
		{"one refusal", []error{fmt.Errorf("127.0.0.1:5432: %w", noDB)}, noDB},
		{"TLS refused, then the role", []error{errors.New("server refused TLS connection"), role}, role},
		{"a refusal, then a host away", []error{role, &net.OpError{Op: "dial", Err: errors.New("connection refused")}}, nil},
		{"a host cut off, then a refusal", []error{io.ErrUnexpectedEOF, noDB}, nil},
		{"a refusal, then one starting up", []error{role, &pgconn.PgError{Code: "57P03"}}, nil},
		{"at its connection limit", []error{&pgconn.PgError{Code: "53300"}}, nil},
		{"a timeout", []error{context.DeadlineExceeded}, nil},
		{"another server error", []error{&pgconn.PgError{Code: "XX000"}}, nil},
		{"nothing", nil, nil},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			require.Same(t, c.want, pgstore.RefusedBy(c.attempts))
		})
	}
}
