package cli

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay/internal/testpg"
)

// TestOfflineReadsThePostgresStore: with no daemon running, the commands
// that read without one read the database the data directory's daemon
// would serve ($BELAY_STORE here), not the empty files: the run is listed
// and read, and doctor names the store.
func TestOfflineReadsThePostgresStore(t *testing.T) {
	pg := testpg.Start(t, testpg.Options{})
	url := pg.Database(t)
	home := t.TempDir()

	stop := serveIn(t, home, url)
	env := map[string]string{"BELAY_HOME": home, "BELAY_NO_AUTOSTART": "1"}
	code, out, stderr := run(t, env, "send", "--provider", "fake", "--wait", "--json", "hello from the database")
	require.Equal(t, ExitOK, code, stderr)
	var sent struct{ Run, Session string }
	require.NoError(t, json.Unmarshal([]byte(out), &sent))
	stop()

	env["BELAY_STORE"] = url
	code, out, stderr = run(t, env, "runs", "list", "--json")
	require.Equal(t, ExitOK, code, stderr)
	require.Contains(t, out, sent.Run)
	require.Contains(t, stderr, "read from the database postgres://")

	code, out, stderr = run(t, env, "read", sent.Run)
	require.Equal(t, ExitOK, code, stderr)
	require.Contains(t, out, "hello from the database")

	code, out, stderr = run(t, env, "sessions", "list", "--json")
	require.Equal(t, ExitOK, code, stderr)
	require.Contains(t, out, sent.Session)

	code, out, stderr = run(t, env, "doctor")
	require.Equal(t, ExitOK, code, stderr)
	require.Contains(t, out, "store  postgres://")
	require.Contains(t, out, "sessions 1 idle")
}
