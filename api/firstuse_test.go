package api

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/belayhq/belay/apitype"
	"github.com/stretchr/testify/require"
)

func TestRequestsAreValidatedAtTheDoor(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	cases := []struct {
		name, method, path, body string
		status                   int
		code                     string
		field                    string
	}{
		{"unknown provider session", "POST", "/v1/sessions", `{"provider":"nosuch"}`, 400, apitype.CodeInvalid, ""},
		{"bad fake model", "POST", "/v1/runs", `{"provider":"fake","model":"gpt-x","prompt":"p"}`, 400, apitype.CodeInvalid, "model"},
		{"bad fake script", "POST", "/v1/runs", `{"provider":"fake","prompt":"p","script":{"steps":[{"kind":"nope"}]}}`, 400, apitype.CodeInvalid, "script"},
		{"session state", "GET", "/v1/sessions?state=bogus", "", 400, apitype.CodeInvalid, "state"},
		{"invalid utf-8 prompt", "POST", "/v1/runs", "{\"provider\":\"fake\",\"prompt\":\"a\xff\xfeb\"}", 400, apitype.CodeInvalid, ""},
		{"lone surrogate", "POST", "/v1/runs", `{"provider":"fake","prompt":"a\ud800b"}`, 400, apitype.CodeInvalid, ""},
		{"lone low surrogate", "POST", "/v1/runs", `{"provider":"fake","prompt":"a\udc00"}`, 400, apitype.CodeInvalid, ""},
		{"invalid utf-8 label", "POST", "/v1/sessions", "{\"provider\":\"fake\",\"labels\":{\"k\":\"\xc3\"}}", 400, apitype.CodeInvalid, ""},
		{"unknown field still refused", "POST", "/v1/runs", `{"provider":"fake","bogus":1}`, 400, apitype.CodeInvalid, ""},
	}
	for _, tc := range cases {
		code, raw := b.do(tc.method, tc.path, tc.body, nil)
		require.Equal(t, tc.status, code, "%s: %s", tc.name, raw)
		require.Equal(t, tc.code, errCode(t, raw), tc.name)
		if tc.field != "" {
			var e apitype.Error
			require.NoError(t, json.Unmarshal(raw, &e))
			require.Equal(t, tc.field, e.Error.Details["field"], tc.name)
		}
	}
	code, raw := b.do("POST", "/v1/sessions", `{"provider":"nosuch"}`, nil)
	require.Equal(t, 400, code)
	require.Contains(t, string(raw), `configured: fake`)

	// A valid pair of surrogates and U+FFFD itself are kept byte-exact.
	code, raw = b.do("POST", "/v1/runs", `{"provider":"fake","prompt":"\ud83d\ude00 \ufffd \\ud800"}`, nil)
	require.Equal(t, http.StatusCreated, code, "%s", raw)
	var run apitype.Run
	require.NoError(t, json.Unmarshal(raw, &run))
	code, _ = b.do("GET", "/v1/runs/"+run.ID+"/wait?timeout=10s", "", nil)
	require.Equal(t, http.StatusOK, code)
	code, raw = b.do("GET", "/v1/sessions/"+run.Session+"/runs?status=bogus", "", nil)
	require.Equal(t, 400, code)
	require.Equal(t, apitype.CodeInvalid, errCode(t, raw))
	code, raw = b.do("GET", "/v1/sessions/"+run.Session+"/inbox?status=bogus", "", nil)
	require.Equal(t, 400, code)
	require.Equal(t, apitype.CodeInvalid, errCode(t, raw))
}

func TestIdempotencyKeyReuseIsAConflict(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	key := map[string]string{"Idempotency-Key": "k1"}
	code, raw := b.do("POST", "/v1/runs", `{"provider":"fake","prompt":"one"}`, key)
	require.Equal(t, http.StatusCreated, code, "%s", raw)
	code, raw = b.do("POST", "/v1/runs", `{"provider":"fake","prompt":"two"}`, key)
	require.Equal(t, http.StatusConflict, code, "%s", raw)
	require.Equal(t, apitype.CodeExists, errCode(t, raw))
	require.Contains(t, string(raw), "different prompt")
}

func TestCreatedRunHasARealActivityTime(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	code, raw := b.do("POST", "/v1/runs", `{"provider":"fake","prompt":"p","script":{"steps":[{"kind":"hang"}]}}`, nil)
	require.Equal(t, http.StatusCreated, code, "%s", raw)
	var run apitype.Run
	require.NoError(t, json.Unmarshal(raw, &run))
	require.NotNil(t, run.Activity, "%s", raw)
	require.WithinDuration(t, time.Now(), run.Activity.LastProgress, time.Minute, "%s", raw)
	code, _ = b.do("POST", "/v1/runs/"+run.ID+"/cancel", "", nil)
	require.Equal(t, http.StatusOK, code)
}

func TestRetryOverHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	code, raw := b.do("POST", "/v1/runs", `{"provider":"fake","prompt":"p","script":{"steps":[{"kind":"error","class":"invalid_request","message":"no"}]}}`, nil)
	require.Equal(t, http.StatusCreated, code, "%s", raw)
	var run apitype.Run
	require.NoError(t, json.Unmarshal(raw, &run))
	code, _ = b.do("GET", "/v1/runs/"+run.ID+"/wait?timeout=10s", "", nil)
	require.Equal(t, http.StatusOK, code)
	code, raw = b.do("POST", "/v1/runs/"+run.ID+"/retry", "", nil)
	require.Equal(t, http.StatusCreated, code, "%s", raw)
	var retry apitype.RetryResponse
	require.NoError(t, json.Unmarshal(raw, &retry))
	require.Equal(t, run.Session, retry.Session)
	require.Equal(t, "retry-"+run.ID, retry.IdempotencyKey)
	code, raw = b.do("POST", "/v1/runs/"+run.ID+"/retry", `{}`, nil)
	require.Equal(t, http.StatusCreated, code, "%s", raw)
	var again apitype.RetryResponse
	require.NoError(t, json.Unmarshal(raw, &again))
	require.Equal(t, retry.ID, again.ID)
}
