package cli

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
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

// TestStoreOutage: the daemon's database is stopped under it (pg_ctl
// stop). The daemon stays up and says it is degraded (/healthz answers
// 503, belay daemon status and doctor name the store); a send is refused
// with exit 6, names the store and writes nothing. When the database is
// back, the daemon resumes by itself, without a restart: sends work again
// and the run that was in flight ends with its answer.
func TestStoreOutage(t *testing.T) {
	pg := testpg.Start(t, testpg.Options{})
	url := pg.Database(t)
	home := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(home, daemon.ConfigName), []byte("[store]\nlock_ttl = \"1s\"\n"), 0o600))
	serveIn(t, home, url)
	env := map[string]string{"BELAY_HOME": home, "BELAY_NO_AUTOSTART": "1"}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", filepath.Join(home, daemon.SocketName))
	}}}
	defer hc.CloseIdleConnections()
	healthz := func() (int, apitype.Health) {
		resp, err := hc.Get("http://belay/healthz")
		require.NoError(t, err)
		defer resp.Body.Close()
		var h apitype.Health
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&h))
		return resp.StatusCode, h
	}
	code, h := healthz()
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, apitype.HealthOK, h.Status)

	// A run in flight across the outage: its answer starts after the
	// database went away.
	script := filepath.Join(t.TempDir(), "script.json")
	require.NoError(t, os.WriteFile(script, []byte(`{"reply":"answered after the outage","firstToken":"3s"}`), 0o600))
	code, out, stderr := run(t, env, "send", "--provider", "fake", "--script", script, "--json", "long")
	require.Equal(t, ExitOK, code, stderr)
	var inflight sendResult
	require.NoError(t, json.Unmarshal([]byte(out), &inflight))

	require.NoError(t, pg.Down(context.Background()))

	code, h = healthz()
	require.Equal(t, http.StatusServiceUnavailable, code, "a load balancer takes the node out")
	require.Equal(t, apitype.HealthDegraded, h.Status)
	require.NotEmpty(t, h.Problems)
	require.Contains(t, h.Problems[0], "store unreachable")

	code, out, stderr = run(t, env, "daemon", "status")
	require.Equal(t, ExitUnreachable, code, stderr)
	require.Contains(t, out, "degraded: store unreachable")
	require.Contains(t, stderr, "Try: belay doctor")
	code, out, _ = run(t, env, "daemon", "status", "--json")
	require.Equal(t, ExitUnreachable, code)
	var st daemonStatus
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	require.True(t, st.Running)
	require.Equal(t, apitype.HealthDegraded, st.Status)

	code, _, stderr = run(t, env, "send", "--provider", "fake", "--idempotency-key", "k1", "during the outage")
	require.Equal(t, ExitUnreachable, code, stderr)
	require.Contains(t, stderr, "store unreachable")
	require.Contains(t, stderr, "Nothing was written")
	require.Contains(t, stderr, "Try: belay daemon status")
	for _, args := range [][]string{{"daemon", "status"}, {"doctor"}} {
		// Every command a message names exists.
		code, _, stderr = run(t, env, append(args, "--help")...)
		require.Equal(t, ExitOK, code, stderr)
	}
	code, out, stderr = run(t, env, "doctor", "--json")
	require.Equal(t, ExitOK, code, stderr)
	var rep daemon.Report
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.Equal(t, "retry_later", rep.NextAction)
	require.Equal(t, "belay daemon status", rep.Command)
	require.True(t, strings.Contains(strings.Join(rep.Problems, "\n"), "degraded: store unreachable"), rep.Problems)
	require.True(t, rep.SessionsUnknown, "the sessions could not be counted, which is not none")
	code, out, stderr = run(t, env, "doctor")
	require.Equal(t, ExitOK, code, stderr)
	require.Contains(t, out, "sessions unknown (the store did not answer)")
	code, out, stderr = run(t, env, "daemon", "status")
	require.Contains(t, out, "queued runs unknown", "code %d: %s", code, stderr)

	require.NoError(t, pg.Up(context.Background()))
	require.Eventually(t, func() bool {
		code, _, _ := run(t, env, "daemon", "status")
		return code == ExitOK
	}, time.Minute, 50*time.Millisecond, "the daemon resumes by itself")
	code, h = healthz()
	require.Equal(t, http.StatusOK, code)
	require.Empty(t, h.Problems)

	code, out, stderr = run(t, env, "send", "--provider", "fake", "--idempotency-key", "k1", "--json", "after the outage")
	require.Equal(t, ExitOK, code, stderr)
	var after sendResult
	require.NoError(t, json.Unmarshal([]byte(out), &after))
	code, _, stderr = run(t, env, "wait", "--timeout", "1m", after.Run)
	require.Equal(t, ExitOK, code, stderr)
	code, _, stderr = run(t, env, "wait", "--timeout", "2m", inflight.Run)
	require.Equal(t, ExitOK, code, stderr)
	code, out, stderr = run(t, env, "read", inflight.Run)
	require.Equal(t, ExitOK, code, stderr)
	require.Contains(t, out, "answered after the outage")

	// The refused send wrote nothing: two runs in all.
	code, out, stderr = run(t, env, "runs", "list", "--json")
	require.Equal(t, ExitOK, code, stderr)
	var page struct{ Runs []json.RawMessage }
	require.NoError(t, json.Unmarshal([]byte(out), &page))
	require.Len(t, page.Runs, 2)
}
