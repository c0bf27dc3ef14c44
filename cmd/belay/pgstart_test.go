package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay/internal/testpg"
)

// TestDaemonStartOnAMissingDatabase: `belay daemon start` whose daemon
// exits because the database of its store does not exist exits 2 (a
// wrong store setting), as `belay serve` does, not 1 or 6 (unreachable:
// "try again later"), and quotes what to do from the daemon's log.
func TestDaemonStartOnAMissingDatabase(t *testing.T) {
	pg := testpg.Start(t, testpg.Options{})
	bin := filepath.Join(t.TempDir(), "belay")
	require.NoError(t, os.Symlink(os.Args[0], bin))
	cmd := exec.CommandContext(t.Context(), bin, "daemon", "start")
	cmd.Env = append(os.Environ(), "BELAY_HOME="+t.TempDir(), "BELAY_STORE="+pg.URL("belay_missing"))
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "%v: %s", err, out)
	require.Equal(t, 2, ee.ExitCode(), "%s", out)
	require.Contains(t, string(out), `database "belay_missing" does not exist`)
	require.Contains(t, string(out), "createdb -h 127.0.0.1 -p ")
	require.Contains(t, string(out), "then run the same command again")
	require.NotContains(t, string(out), "unreachable")
}
