package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/provider"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var now = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func resp(status int, header http.Header, body string) *http.Response {
	if header == nil {
		header = http.Header{}
	}
	return &http.Response{StatusCode: status, Header: header, Body: io.NopCloser(strings.NewReader(body))}
}

func TestFromResponse(t *testing.T) {
	t.Parallel()
	h := func(kv ...string) http.Header {
		out := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			out.Set(kv[i], kv[i+1])
		}
		return out
	}
	tests := []struct {
		name   string
		status int
		header http.Header
		body   string
		class  belay.ErrorClass
		retry  time.Duration
	}{
		{"401", 401, nil, `{"error":{"message":"Incorrect API key","type":"invalid_request_error","code":"invalid_api_key"}}`, belay.ClassAuth, 0},
		{"403", 403, nil, `{"type":"error","error":{"type":"permission_error","message":"no"}}`, belay.ClassAuth, 0},
		{"429 seconds", 429, h("Retry-After", "7"), `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`, belay.ClassRateLimited, 7 * time.Second},
		{"429 http date", 429, h("Retry-After", now.Add(90*time.Second).Format(http.TimeFormat)), `{}`, belay.ClassRateLimited, 90 * time.Second},
		{"429 ms", 429, h("retry-after-ms", "1500", "Retry-After", "9"), `{}`, belay.ClassRateLimited, 1500 * time.Millisecond},
		{"429 quota", 429, h("Retry-After", "7"), `{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}`, belay.ClassQuota, 0},
		{"429 anthropic", 429, h("retry-after", "3"), `{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`, belay.ClassRateLimited, 3 * time.Second},
		{"503", 503, nil, `Service Unavailable`, belay.ClassOverloaded, 0},
		{"529", 529, h("retry-after", "2"), `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, belay.ClassOverloaded, 2 * time.Second},
		{"500", 500, nil, `{"error":{"message":"The server had an error","type":"server_error"}}`, belay.ClassTransient, 0},
		{"502 html", 502, nil, `<html>bad gateway</html>`, belay.ClassTransient, 0},
		{"500 overloaded type", 500, nil, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, belay.ClassOverloaded, 0},
		{"408", 408, nil, ``, belay.ClassTransient, 0},
		{"400", 400, nil, `{"error":{"message":"Invalid value for temperature","type":"invalid_request_error","param":"temperature","code":null}}`, belay.ClassInvalidRequest, 0},
		{"400 openai overflow", 400, nil, `{"error":{"message":"This model's maximum context length is 8192 tokens","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`, belay.ClassContextOverflow, 0},
		{"400 anthropic overflow", 400, nil, `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}`, belay.ClassContextOverflow, 0},
		{"400 numeric code", 400, nil, `{"error":{"message":"bad","code":400}}`, belay.ClassInvalidRequest, 0},
		{"400 string error", 400, nil, `{"error":"model 'x' not found"}`, belay.ClassInvalidRequest, 0},
		{"404", 404, nil, `{"error":{"message":"The model does not exist","code":"model_not_found"}}`, belay.ClassInvalidRequest, 0},
		{"413", 413, nil, `request too large`, belay.ClassContextOverflow, 0},
		{"402 billing", 402, nil, `{"type":"error","error":{"type":"billing_error","message":"credit balance too low"}}`, belay.ClassQuota, 0},
		{"retry-after ignored for non-retryable", 400, h("Retry-After", "5"), `{}`, belay.ClassInvalidRequest, 0},
		{"retry-after capped", 429, h("Retry-After", "999999"), `{}`, belay.ClassRateLimited, time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pe := FromResponse(resp(tt.status, tt.header, tt.body), "test", NewScrubber(), now)
			require.Equal(t, tt.class, pe.Class, pe.Error())
			require.Equal(t, tt.retry, pe.RetryAfter)
			require.Contains(t, pe.Message, fmt.Sprintf("HTTP %d", tt.status))
			require.Equal(t, tt.class, provider.ClassOf(pe))
		})
	}
}

func TestStreamError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		typ, code, msg string
		class          belay.ErrorClass
	}{
		{"overloaded_error", "", "Overloaded", belay.ClassOverloaded},
		{"rate_limit_error", "", "", belay.ClassRateLimited},
		{"api_error", "", "", belay.ClassTransient},
		{"invalid_request_error", "", "prompt is too long: 5 > 4", belay.ClassContextOverflow},
		{"invalid_request_error", "", "bad", belay.ClassInvalidRequest},
		{"", "server_error", "", belay.ClassTransient},
		{"", "rate_limit_exceeded", "", belay.ClassRateLimited},
		{"", "context_length_exceeded", "", belay.ClassContextOverflow},
		{"authentication_error", "", "", belay.ClassAuth},
		{"something_new", "", "", belay.ClassTransient},
	}
	for _, tt := range tests {
		pe := StreamError("test", tt.typ, tt.code, tt.msg, nil)
		require.Equal(t, tt.class, pe.Class, "%s/%s", tt.typ, tt.code)
	}
}

func TestNetworkError(t *testing.T) {
	t.Parallel()
	sc := NewScrubber("sk-secret-123456")
	err := NetworkError(context.Background(), "chat", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), sc)
	require.Equal(t, belay.ClassTransient, provider.ClassOf(err))
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)

	err = NetworkError(context.Background(), "chat", errors.New(`Post "http://h/?key=sk-secret-123456": dial tcp: connection refused`), sc)
	require.Equal(t, belay.ClassTransient, provider.ClassOf(err))
	require.NotContains(t, err.Error(), "sk-secret-123456")
	require.Nil(t, errors.Unwrap(err), "an unknown cause is not kept: it may hold secrets")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, NetworkError(ctx, "chat", io.ErrUnexpectedEOF, sc), context.Canceled)
}

func TestScrub(t *testing.T) {
	t.Parallel()
	sc := NewScrubber("my-very-secret-key", "")
	tests := []struct{ in, notWant string }{
		{"key my-very-secret-key leaked", "my-very-secret-key"},
		{"Authorization: Bearer abcdefghijkl", "abcdefghijkl"},
		{`{"authorization":"Bearer abcdefghijkl"}`, "abcdefghijkl"},
		{"x-api-key: sk-ant-api03-XYZXYZXYZ", "XYZXYZXYZ"},
		{"Incorrect API key provided: sk-proj-abcdef123456. You can find", "abcdef123456"},
		{"api_key=hunter2hunter2", "hunter2hunter2"},
		{"bearer zzzzzzzzzzzz in text", "zzzzzzzzzzzz"},
	}
	for _, tt := range tests {
		got := sc.String(tt.in)
		require.NotContains(t, got, tt.notWant, tt.in)
		require.Contains(t, got, Redacted, tt.in)
	}
	require.Equal(t, "a plain message about tokens", sc.String("a plain message about tokens"))
	// An error code ending in a key word keeps the message that follows.
	require.Equal(t, "openai: HTTP 401 invalid_api_key: Incorrect API key provided: "+Redacted+". You can find it",
		sc.String("openai: HTTP 401 invalid_api_key: Incorrect API key provided: sk-proj-abcdef123456. You can find it"))
	require.Equal(t, "OPENAI_API_KEY="+Redacted+" set", sc.String("OPENAI_API_KEY=hunter2hunter2 set"))
}

func TestLoadKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	require.NoError(t, os.WriteFile(good, []byte("file-key\n"), 0o600))
	loose := filepath.Join(dir, "loose")
	require.NoError(t, os.WriteFile(loose, []byte("file-key\n"), 0o644))
	require.NoError(t, os.Chmod(loose, 0o644))
	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.WriteFile(empty, nil, 0o600))
	env := map[string]string{"SET": "env-key", "EMPTY": ""}
	getenv := func(k string) string { return env[k] }

	tests := []struct {
		name    string
		src     KeySource
		want    string
		errPart string
	}{
		{"env first", KeySource{Env: "SET", File: good, Inline: "inline"}, "env-key", ""},
		{"file when env empty", KeySource{Env: "EMPTY", File: good, Inline: "inline"}, "file-key", ""},
		{"inline last", KeySource{Env: "EMPTY", Inline: "inline-key"}, "inline-key", ""},
		{"default env", KeySource{DefaultEnv: "SET"}, "env-key", ""},
		{"loose file refused", KeySource{File: loose, Inline: "inline"}, "", "chmod 600 " + loose},
		{"empty file", KeySource{File: empty}, "", "is empty"},
		{"missing file", KeySource{File: filepath.Join(dir, "nope")}, "", "no such file"},
		{"named env unset", KeySource{Env: "EMPTY"}, "", "export EMPTY="},
		{"nothing", KeySource{DefaultEnv: "EMPTY"}, "", "export EMPTY"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.src.Getenv = getenv
			key, origin, err := LoadKey(tt.src)
			if tt.errPart != "" {
				require.ErrorContains(t, err, tt.errPart)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, key)
			require.NotContains(t, origin, key)
		})
	}
}

func TestIdleTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: 1\n\n")
		http.NewResponseController(w).Flush()
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	c := NewClient(Timeouts{Connect: time.Second, FirstByte: 5 * time.Second, Idle: 200 * time.Millisecond})
	defer c.CloseIdleConnections()
	req, err := http.NewRequest("GET", srv.URL, nil)
	require.NoError(t, err)
	r, err := c.Do(context.Background(), req)
	require.NoError(t, err)
	defer r.Body.Close()
	_, err = io.ReadAll(r.Body)
	require.ErrorIs(t, err, ErrIdle)
	err = NetworkError(context.Background(), "stream", err, nil)
	require.Equal(t, belay.ClassTransient, provider.ClassOf(err))
	require.ErrorIs(t, err, ErrIdle)
}
