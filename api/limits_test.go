package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/runtime"
)

// TestRunInputLimitsAgree: what the API accepts, the journal stores; what
// it cannot store is refused with 413 naming the limit, and creates
// nothing.
func TestRunInputLimitsAgree(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	body := func(prompt string) string {
		raw, _ := json.Marshal(map[string]string{"provider": "fake", "prompt": prompt})
		return string(raw)
	}
	tooLarge := func(body string) map[string]any {
		t.Helper()
		code, raw := b.do("POST", "/v1/runs", body, nil)
		require.Equal(t, http.StatusRequestEntityTooLarge, code, "%.300s", raw)
		require.Equal(t, apitype.CodeTooLarge, errCode(t, raw))
		var e apitype.Error
		require.NoError(t, json.Unmarshal(raw, &e))
		require.NotNil(t, e.Error.Details["limit"], "the limit is named")
		return e.Error.Details
	}
	// Over the body cap (a 10 MB prompt): refused while reading.
	d := tooLarge(body(strings.Repeat("x", 10<<20)))
	require.EqualValues(t, MaxRunBody, d["limit"])
	// Under the body cap, but not storable once escaped as the journal
	// escapes it ("<" is six bytes there).
	d = tooLarge(`{"provider":"fake","prompt":"` + strings.Repeat("<", runtime.MaxInput/5) + `"}`)
	require.EqualValues(t, runtime.MaxInput, d["limit"])
	code, raw := b.do("GET", "/v1/sessions", "", nil)
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, `{"sessions":[]}`, string(raw), "a refused run creates no session")

	// The largest input that fits is stored and runs.
	prompt := strings.Repeat("y", runtime.MaxInput-len(`{"prompt":""}`))
	code, raw = b.do("POST", "/v1/runs", body(prompt), nil)
	require.Equal(t, http.StatusCreated, code, "%.300s", raw)
	var run apitype.Run
	require.NoError(t, json.Unmarshal(raw, &run))
	code, raw = b.do("GET", "/v1/runs/"+run.ID+"/wait?timeout=30s", "", nil)
	require.Equal(t, http.StatusOK, code)
	require.NoError(t, json.Unmarshal(raw, &run))
	require.Equal(t, "complete", string(run.Status), "%+v", run.Error)
	// One byte more is refused.
	tooLarge(body(prompt + "y"))
}
