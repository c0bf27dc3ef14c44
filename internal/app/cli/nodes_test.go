package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/internal/app/daemon"
	"github.com/belayhq/belay/internal/testpg"
)

// TestTwoNodes: two daemons serve one PostgreSQL database at once. `belay
// doctor` on either lists both as live nodes; a run sent to one and
// running there is shown alive, not dead, by `belay sessions doctor` asked
// of the other; `belay daemon status` answers on both.
func TestTwoNodes(t *testing.T) {
	url := testpg.Start(t, testpg.Options{}).Database(t)
	homeA, homeB := t.TempDir(), t.TempDir()
	for _, h := range []string{homeA, homeB} {
		require.NoError(t, os.WriteFile(filepath.Join(h, daemon.ConfigName), []byte("[runs]\nlease_ttl = \"5s\"\n"), 0o600))
		serveIn(t, h, url)
	}
	envA := map[string]string{"BELAY_HOME": homeA, "BELAY_NO_AUTOSTART": "1"}
	envB := map[string]string{"BELAY_HOME": homeB, "BELAY_NO_AUTOSTART": "1"}

	for _, env := range []map[string]string{envA, envB} {
		code, out, stderr := run(t, env, "doctor", "--json")
		require.Equal(t, ExitOK, code, stderr)
		var rep daemon.Report
		require.NoError(t, json.Unmarshal([]byte(out), &rep))
		live := 0
		for _, n := range rep.Nodes {
			if n.Live {
				live++
			}
		}
		require.Equal(t, 2, live, "%+v", rep.Nodes)
		require.Equal(t, "none", rep.NextAction, rep.Problems)
		code, out, stderr = run(t, env, "doctor")
		require.Equal(t, ExitOK, code, stderr)
		require.Equal(t, 2, strings.Count(out, " live, heartbeat "), out)
		code, _, stderr = run(t, env, "daemon", "status")
		require.Equal(t, ExitOK, code, stderr)
	}

	// A run that streams slowly, sent to A: it runs on A or B; the other
	// one's session doctor must see its owner alive.
	code, out, stderr := run(t, envA, "send", "--provider", "fake", "--json",
		"--model", "script:reply=one two three four five six seven eight nine ten;rate=1", "slow")
	require.Equal(t, ExitOK, code, stderr)
	var sent struct{ Session, Run string }
	require.NoError(t, json.Unmarshal([]byte(out), &sent), out)
	for _, env := range []map[string]string{envA, envB} {
		require.Eventually(t, func() bool {
			code, out, _ := run(t, env, "sessions", "doctor", sent.Session, "--json")
			if code != ExitOK {
				return false
			}
			var rep apitype.DoctorReport
			if json.Unmarshal([]byte(out), &rep) != nil || rep.Lease == nil {
				return false
			}
			require.Equal(t, apitype.OwnerAlive, rep.Lease.OwnerState, out)
			return true
		}, time.Minute, 20*time.Millisecond)
	}
}
