package daemon

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/api"
	"github.com/belayhq/belay/client"
	"github.com/belayhq/belay/internal/testpg"
	"github.com/belayhq/belay/store/fsstore"
)

// startOn runs a daemon on dir with the given store until it is stopped.
func startOn(t *testing.T, dir, storeURL string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{DataDir: dir, Store: storeURL, Version: "test", Ready: func() { close(ready) }, Logger: slog.New(slog.DiscardHandler)})
	}()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("daemon: %v", err)
	}
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			require.NoError(t, <-done)
		}
	}
	t.Cleanup(stop)
	return stop
}

// TestDaemonOnPostgres: `belay serve --store postgres://...` runs work end
// to end with its sessions in the database, not in the data directory; a
// second daemon on the same database is refused and told who holds it;
// after the first stops, a daemon on another data directory serves the
// same sessions.
func TestDaemonOnPostgres(t *testing.T) {
	pg := testpg.Start(t, testpg.Options{})
	url := pg.Database(t)
	cfg := "[providers.agent]\ntype = \"command\"\nargv = [\"sh\", \"-c\", \"echo done: {prompt}\"]\nformat = \"text\"\n"
	dirA, dirB := t.TempDir(), t.TempDir()
	for _, d := range []string{dirA, dirB} {
		require.NoError(t, os.WriteFile(filepath.Join(d, ConfigName), []byte(cfg), 0o600))
	}
	stopA := startOn(t, dirA, url)
	ctx := context.Background()
	c := client.New(client.Options{Socket: filepath.Join(dirA, SocketName)})
	run, err := c.CreateRun(ctx, api.CreateRunRequest{Provider: "agent", Prompt: "tidy"}, "")
	require.NoError(t, err)
	r, err := c.WaitRun(ctx, run.ID, 30*time.Second)
	require.NoError(t, err)
	require.Equal(t, belay.RunComplete, r.Status, r.Reason)
	entries, err := os.ReadDir(filepath.Join(dirA, fsstore.SessionsName))
	if err == nil {
		require.Empty(t, entries, "no session is kept in the data directory")
	}

	err = Run(ctx, Options{DataDir: dirB, Store: url, Logger: slog.New(slog.DiscardHandler)})
	require.ErrorIs(t, err, belay.ErrStoreLocked)
	require.ErrorContains(t, err, "inc_")

	stopA()
	startOn(t, dirB, url)
	cb := client.New(client.Options{Socket: filepath.Join(dirB, SocketName)})
	again, err := cb.Run(ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, belay.RunComplete, again.Status)
	evs, err := cb.Events(ctx, run.Session, 0, 0, 0)
	require.NoError(t, err)
	var types []string
	for _, e := range evs.Events {
		types = append(types, e.Type)
	}
	require.Contains(t, types, "run.text")
}

// TestStoreSettingIsChecked: a store setting that is neither file: nor
// postgres:// is refused before anything starts.
func TestStoreSettingIsChecked(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"mysql://x", "file:/elsewhere"} {
		err := Run(context.Background(), Options{DataDir: t.TempDir(), Store: bad, Logger: slog.New(slog.DiscardHandler)})
		require.ErrorIs(t, err, belay.ErrInvalid, bad)
	}
}

// TestDaemonOnPostgresFencesItself: a daemon that can no longer prove its
// writer lock on the database (its lock connection killed, as in a
// partition) stops writing and exits fenced; the database is then free for
// another daemon.
func TestDaemonOnPostgresFencesItself(t *testing.T) {
	pg := testpg.Start(t, testpg.Options{})
	url := pg.Database(t)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, ConfigName), []byte("[store]\nlock_ttl = \"1s\"\n"), 0o600))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{DataDir: dir, Store: url, Version: "test", Ready: func() { close(ready) }, Logger: slog.New(slog.DiscardHandler)})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("daemon: %v", err)
	}
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var killed int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name LIKE 'belay daemon %'`).Scan(&killed))
	require.Equal(t, 1, killed)
	err = <-done
	require.ErrorIs(t, err, ErrFenced)
	require.ErrorContains(t, err, "writer lock")

	startOn(t, t.TempDir(), url) // the database is free again
}
