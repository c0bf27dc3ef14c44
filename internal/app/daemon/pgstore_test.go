package daemon

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
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
// second daemon on the same database (another data directory: another
// node) serves at the same time, sees the first one's sessions, and runs
// what is sent to it; after the first stops, the second still serves
// everything.
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

	startOn(t, dirB, url) // a second node on the same database
	cb := client.New(client.Options{Socket: filepath.Join(dirB, SocketName)})
	again, err := cb.Run(ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, belay.RunComplete, again.Status)
	second, err := cb.CreateRun(ctx, apitype.CreateRunRequest{Session: run.Session, Prompt: "again"}, "")
	require.NoError(t, err)
	r, err = c.WaitRun(ctx, second.ID, 30*time.Second) // sent to B, waited on A
	require.NoError(t, err)
	require.Equal(t, belay.RunComplete, r.Status, r.Reason)
	hA, err := c.Health(ctx)
	require.NoError(t, err)
	hB, err := cb.Health(ctx)
	require.NoError(t, err)
	require.Equal(t, apitype.HealthOK, hA.Status)
	require.Equal(t, apitype.HealthOK, hB.Status)

	stopA()
	evs, err := cb.Events(ctx, run.Session, 0, 0, 0)
	require.NoError(t, err)
	var texts int
	for _, e := range evs.Events {
		if e.Type == "run.text" {
			texts++
		}
	}
	require.GreaterOrEqual(t, texts, 2, "both runs' answers are in the session")
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
