package pgstore

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// migrationLock is the advisory lock key that serializes migrations: two
// nodes starting at once apply each migration once, the second waits and
// then finds nothing to do.
const migrationLock int64 = 0x62656c6179_01 // "belay", 1

// Migration is one versioned schema change shipped in the binary.
type Migration struct {
	Version int    `json:"version"`
	Name    string `json:"name"`
	SQL     string `json:"-"`
}

// AppliedMigration is a migration recorded in the database.
type AppliedMigration struct {
	Version   int       `json:"version"`
	Name      string    `json:"name"`
	AppliedAt time.Time `json:"appliedAt"`
}

// MigrationStatus is what `belay migrate --status` reports.
type MigrationStatus struct {
	// Current is the newest applied version (0: none).
	Current int `json:"current"`
	// Latest is the newest version this binary knows (versions may skip
	// numbers: compare Pending, not counts).
	Latest  int                `json:"latest"`
	Applied []AppliedMigration `json:"applied"`
	Pending []Migration        `json:"pending"`
	// Unknown are applied versions this binary does not know: the database
	// was migrated by a newer belay.
	Unknown []int `json:"unknown,omitempty"`
}

// Migrations returns the migrations in the binary, oldest first.
func Migrations() ([]Migration, error) {
	names, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, p := range names {
		base := strings.TrimSuffix(strings.TrimPrefix(p, "migrations/"), ".sql")
		num, name, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("pgstore: migration file %s is not NNNN_name.sql", p)
		}
		raw, err := migrationFS.ReadFile(p)
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: name, SQL: string(raw)})
	}
	// Applied in version order, by number, not by file name; versions may
	// skip numbers (a migration written on another branch lands later)
	// but never repeat.
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i := 1; i < len(out); i++ {
		if out[i].Version == out[i-1].Version {
			return nil, fmt.Errorf("pgstore: two migrations are numbered %d: %s and %s", out[i].Version, out[i-1].Name, out[i].Name)
		}
	}
	return out, nil
}

const createMigrationsTable = `CREATE TABLE IF NOT EXISTS belay_schema_migrations (
	version    integer PRIMARY KEY,
	name       text NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT now()
)`

// Migrate applies every pending migration, each in its own transaction,
// under an advisory lock, and returns the ones it applied.
func Migrate(ctx context.Context, url string) ([]Migration, error) {
	pool, err := connect(ctx, url, 2)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	return migrate(ctx, pool)
}

func migrate(ctx context.Context, pool *pgxpool.Pool) ([]Migration, error) {
	all, err := Migrations()
	if err != nil {
		return nil, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, wrapConn(err)
	}
	defer conn.Release()
	// A session-level advisory lock spans the per-migration transactions.
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, migrationLock); err != nil {
		return nil, wrapConn(err)
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, migrationLock)
	}()
	if _, err := conn.Exec(ctx, createMigrationsTable); err != nil {
		return nil, fmt.Errorf("pgstore: create belay_schema_migrations: %w", err)
	}
	applied, err := appliedVersions(ctx, conn.Conn())
	if err != nil {
		return nil, err
	}
	if newest, latest := maxKey(applied), latestVersion(all); newest > latest {
		return nil, fmt.Errorf("pgstore: the database is at schema version %d, newer than this belay knows (%d); upgrade belay", newest, latest)
	}
	var done []Migration
	for _, m := range all {
		if _, ok := applied[m.Version]; ok {
			continue
		}
		err := pgx.BeginFunc(ctx, conn.Conn(), func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO belay_schema_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name)
			return err
		})
		if err != nil {
			return done, fmt.Errorf("pgstore: migration %04d_%s: %w", m.Version, m.Name, err)
		}
		done = append(done, m)
	}
	return done, nil
}

func appliedVersions(ctx context.Context, conn *pgx.Conn) (map[int]AppliedMigration, error) {
	rows, err := conn.Query(ctx, `SELECT version, name, applied_at FROM belay_schema_migrations ORDER BY version`)
	if err != nil {
		return nil, fmt.Errorf("pgstore: read belay_schema_migrations: %w", err)
	}
	out := map[int]AppliedMigration{}
	for rows.Next() {
		var a AppliedMigration
		if err := rows.Scan(&a.Version, &a.Name, &a.AppliedAt); err != nil {
			return nil, err
		}
		a.AppliedAt = a.AppliedAt.UTC()
		out[a.Version] = a
	}
	return out, rows.Err()
}

// latestVersion is the newest version of all (sorted), 0 if none.
func latestVersion(all []Migration) int {
	if len(all) == 0 {
		return 0
	}
	return all[len(all)-1].Version
}

func maxKey(m map[int]AppliedMigration) int {
	n := 0
	for k := range m {
		n = max(n, k)
	}
	return n
}

// Status reports the applied and pending migrations without changing
// anything.
func Status(ctx context.Context, url string) (MigrationStatus, error) {
	pool, err := connect(ctx, url, 1)
	if err != nil {
		return MigrationStatus{}, err
	}
	defer pool.Close()
	return status(ctx, pool)
}

func status(ctx context.Context, pool *pgxpool.Pool) (MigrationStatus, error) {
	all, err := Migrations()
	if err != nil {
		return MigrationStatus{}, err
	}
	st := MigrationStatus{Latest: latestVersion(all), Applied: []AppliedMigration{}, Pending: []Migration{}}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return st, wrapConn(err)
	}
	defer conn.Release()
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('belay_schema_migrations') IS NOT NULL`).Scan(&exists); err != nil {
		return st, wrapConn(err)
	}
	applied := map[int]AppliedMigration{}
	if exists {
		if applied, err = appliedVersions(ctx, conn.Conn()); err != nil {
			return st, err
		}
	}
	known := map[int]bool{}
	for _, m := range all {
		known[m.Version] = true
		if a, ok := applied[m.Version]; ok {
			st.Applied = append(st.Applied, a)
			st.Current = max(st.Current, a.Version)
		} else {
			st.Pending = append(st.Pending, m)
		}
	}
	for v := range applied {
		if !known[v] {
			st.Unknown = append(st.Unknown, v)
			st.Current = max(st.Current, v)
		}
	}
	sort.Ints(st.Unknown)
	return st, nil
}
