package cli

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/runtime"
)

// TestRetryKeepsTheDeadline: belay runs retry gives the new run as long
// as the original had (its deadline relative to its creation), unless
// --deadline says otherwise; a bad --deadline is a usage error.
func TestRetryKeepsTheDeadline(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	serveIn(t, home, "")
	env := map[string]string{"BELAY_HOME": home, "BELAY_NO_AUTOSTART": "1"}
	show := func(id string) belay.Run {
		t.Helper()
		code, out, stderr := run(t, env, "runs", "show", id, "--json")
		require.Equal(t, ExitOK, code, stderr)
		var rep runReport
		require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
		return rep.Run
	}
	retry := func(args ...string) belay.Run {
		t.Helper()
		code, out, stderr := run(t, env, append([]string{"runs", "retry"}, append(args, "--json")...)...)
		require.Equal(t, ExitOK, code, stderr)
		var res retryResult
		require.NoError(t, json.Unmarshal([]byte(out), &res), out)
		return show(res.Run)
	}

	code, out, stderr := run(t, env, "send", "hello", "--provider", "fake", "--deadline", "90m", "--wait", "--json")
	require.Equal(t, ExitOK, code, stderr)
	var sent struct {
		Run string `json:"run"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &sent), out)
	orig := show(sent.Run)
	require.Equal(t, 90*time.Minute, runtime.RelativeDeadline(orig))

	kept := retry(orig.ID)
	require.NotEqual(t, orig.ID, kept.ID)
	require.Equal(t, 90*time.Minute, runtime.RelativeDeadline(kept), "the retry keeps the original's 90m, not the default 2h")

	other := retry(orig.ID, "--deadline", "3h", "--idempotency-key", "retry-3h")
	require.Equal(t, 3*time.Hour, runtime.RelativeDeadline(other))

	// A retry of a run sent without a deadline has the default.
	code, out, stderr = run(t, env, "send", "again", "--provider", "fake", "--wait", "--json")
	require.Equal(t, ExitOK, code, stderr)
	require.NoError(t, json.Unmarshal([]byte(out), &sent), out)
	require.Equal(t, runtime.DefaultDeadline, runtime.RelativeDeadline(retry(sent.Run)))

	code, _, stderr = run(t, env, "runs", "retry", orig.ID, "--deadline", "-5m")
	require.Equal(t, ExitUsage, code, stderr)
	require.Contains(t, stderr, "positive duration")
}
