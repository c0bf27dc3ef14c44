package daemon

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/client"
	"github.com/belayhq/belay/internal/testpg"
	"github.com/belayhq/belay/store/fsstore"
	"github.com/belayhq/belay/store/pgstore"
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
	run, err := c.CreateRun(ctx, apitype.CreateRunRequest{Provider: "agent", Prompt: "tidy"}, "")
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

// writerLockKey is pgstore's writer lock (advisory lock key "belay", 2).
const writerLockKey int64 = 0x62656c6179_02

// runDaemon starts a daemon on dir and the store and returns the channel
// its end is reported on; the test stops it with cancel. Its log goes to
// logw (nil: nowhere).
func runDaemon(t *testing.T, ctx context.Context, dir, url string, logw io.Writer) <-chan error {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	if logw != nil {
		log = slog.New(slog.NewTextHandler(logw, nil))
	}
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{DataDir: dir, Store: url, Version: "test", Ready: func() { close(ready) }, Logger: log})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("daemon: %v", err)
	}
	return done
}

// TestDaemonOnPostgresRetakesItsLock: a daemon whose writer lock
// connection is killed (as by a database restart) stops writing, takes
// the lock again by itself since no other daemon held it meanwhile, and
// goes on serving without a restart.
func TestDaemonOnPostgresRetakesItsLock(t *testing.T) {
	pg := testpg.Start(t, testpg.Options{})
	url := pg.Database(t)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, ConfigName), []byte("[store]\nlock_ttl = \"1s\"\n"), 0o600))
	ctx, cancel := context.WithCancel(context.Background())
	done := runDaemon(t, ctx, dir, url, nil)
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var old int
	require.NoError(t, conn.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'belay daemon %'`).Scan(&old))
	_, err = conn.Exec(ctx, `SELECT pg_terminate_backend($1)`, old)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var pid int
		err := conn.QueryRow(ctx, `SELECT l.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE l.locktype = 'advisory' AND l.granted AND ((l.classid::bigint << 32) | l.objid::bigint) = $1
			AND a.application_name LIKE 'belay daemon %'`, writerLockKey).Scan(&pid)
		return err == nil && pid != old
	}, 30*time.Second, 20*time.Millisecond, "the daemon holds the writer lock again, on a new connection")
	c := client.New(client.Options{Socket: filepath.Join(dir, SocketName)})
	require.Eventually(t, func() bool {
		h, err := c.Health(ctx)
		return err == nil && h.Status == apitype.HealthOK
	}, 30*time.Second, 20*time.Millisecond)
	run, err := c.CreateRun(ctx, apitype.CreateRunRequest{Provider: "fake", Prompt: "still here"}, "")
	require.NoError(t, err)
	r, err := c.WaitRun(ctx, run.ID, 30*time.Second)
	require.NoError(t, err)
	require.Equal(t, belay.RunComplete, r.Status, r.Reason)
	select {
	case err := <-done:
		t.Fatalf("the daemon stopped: %v", err)
	default:
	}
}

// syncBuffer is a bytes.Buffer safe for the daemon's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestDaemonOnPostgresFencesItself: a daemon cut off from its writer lock
// while another holder takes the database has lost it for good: it stops
// writing and exits fenced, naming the store and the holder; the database
// is then free for another daemon.
func TestDaemonOnPostgresFencesItself(t *testing.T) {
	pg := testpg.Start(t, testpg.Options{})
	url := pg.Database(t)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, ConfigName), []byte("[store]\nlock_ttl = \"1s\"\n"), 0o600))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs syncBuffer
	done := runDaemon(t, ctx, dir, url, &logs)

	// Another holder waits for the lock, so it has it the moment the
	// daemon's lock connection dies, before the daemon can take it back.
	cfg, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	cfg.RuntimeParams["application_name"] = "another holder"
	other, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer other.Close(ctx)
	locked := make(chan error, 1)
	go func() {
		_, err := other.Exec(ctx, `SELECT pg_advisory_lock($1)`, writerLockKey)
		locked <- err
	}()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	require.Eventually(t, func() bool {
		var waiting bool
		err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE l.locktype = 'advisory' AND NOT l.granted AND a.application_name = 'another holder')`).Scan(&waiting)
		return err == nil && waiting
	}, 30*time.Second, 10*time.Millisecond)
	var killed int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name LIKE 'belay daemon %'`).Scan(&killed))
	require.Equal(t, 1, killed)
	require.NoError(t, <-locked)
	err = <-done
	require.ErrorIs(t, err, ErrFenced)
	require.ErrorIs(t, err, belay.ErrStoreLocked)
	require.ErrorContains(t, err, "another holder")
	// The error and the log name the store, not the data directory.
	require.ErrorContains(t, err, "database "+pgstore.Redact(url))
	require.NotContains(t, err.Error(), "data directory")
	var fenced string
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "stopped writing and exiting") {
			fenced = line
		}
	}
	require.Contains(t, fenced, "store=\"database "+pgstore.Redact(url)+"\"")
	require.NotContains(t, fenced, "data directory")

	_, err = other.Exec(ctx, `SELECT pg_advisory_unlock($1)`, writerLockKey)
	require.NoError(t, err)
	startOn(t, t.TempDir(), url) // the database is free again
}
