package anthropic

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/provider"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testKey = "sk-ant-api03-test0123456789"

const patience = 30 * time.Second

// ev formats one Messages stream event as the API sends it.
func ev(typ, data string) string {
	return fmt.Sprintf("event: %s\ndata: %s\n\n", typ, data)
}

// Streams from the documented formats.
var (
	start     = ev("message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude-test","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"output_tokens":1}}}`)
	textBlock = ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`) +
		ev("ping", `{"type": "ping"}`) +
		ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}`) +
		ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"!"}}`) +
		ev("content_block_stop", `{"type":"content_block_stop","index":0}`)
	thinkingBlock = ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}`) +
		ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me think."}}`) +
		ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBCgIYAhIM"}}`) +
		ev("content_block_stop", `{"type":"content_block_stop","index":0}`)
	toolUseBlock = ev("content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01","name":"get_weather","input":{}}}`) +
		ev("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}`) +
		ev("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"location\": \"San Fra"}}`) +
		ev("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"ncisco, CA\"}"}}`) +
		ev("content_block_stop", `{"type":"content_block_stop","index":1}`)
	endTurn = ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}`) +
		ev("message_stop", `{"type":"message_stop"}`)
	toolUse = ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}`) +
		ev("message_stop", `{"type":"message_stop"}`)
)

type recorder struct {
	mu     sync.Mutex
	events []provider.Event
}

func (r *recorder) emit(e provider.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
	return nil
}

func (r *recorder) kinds(k provider.EventKind) []provider.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []provider.Event
	for _, e := range r.events {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

func (r *recorder) text(k provider.EventKind) string {
	var b strings.Builder
	for _, e := range r.kinds(k) {
		b.WriteString(e.Text)
	}
	return b.String()
}

type captured struct {
	header http.Header
	body   []byte
}

// fixture is a loopback Messages API that answers with handler and
// records the requests.
type fixture struct {
	p    *Provider
	mu   sync.Mutex
	reqs []captured
}

func setup(t *testing.T, cfg Config, handler func(w http.ResponseWriter, r *http.Request)) *fixture {
	t.Helper()
	f := &fixture{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.reqs = append(f.reqs, captured{r.Header.Clone(), b})
		f.mu.Unlock()
		if r.URL.Path != "/v1/messages" {
			http.NotFound(w, r)
			return
		}
		handler(w, r)
	}))
	t.Cleanup(srv.Close)
	cfg.BaseURL = srv.URL + "/v1"
	if cfg.APIKey == "" && cfg.APIKeyFile == "" && cfg.APIKeyEnv == "" {
		cfg.APIKey = testKey
	}
	if cfg.Model == "" {
		cfg.Model = "claude-test"
	}
	p, err := New("anthropic", cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	f.p = p
	return f
}

func serve(body string) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, body)
	}
}

func fail(status int, header map[string]string, body string) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		for k, v := range header {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

func (f *fixture) run(t *testing.T, req provider.Request) (*recorder, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	rec := &recorder{}
	return rec, f.p.Run(ctx, req, rec.emit)
}

func TestText(t *testing.T) {
	t.Parallel()
	f := setup(t, Config{Headers: map[string]string{"anthropic-beta": "x-2025"}}, serve(start+thinkingBlock+strings.ReplaceAll(textBlock, `"index":0`, `"index":1`)+endTurn))
	rec, err := f.run(t, provider.Request{Prompt: "hi", Options: json.RawMessage(`{"system":"be kind","temperature":0.5,"max_tokens":200,"thinking":{"type":"enabled","budget_tokens":1024}}`)})
	require.NoError(t, err)
	require.Equal(t, "Hello!", rec.text(provider.TextDelta))
	require.Equal(t, "Let me think.", rec.text(provider.ThinkingDelta))
	require.NotEmpty(t, rec.kinds(provider.Keepalive), "ping is a keepalive")
	require.Equal(t, []provider.Event{{Kind: provider.TurnEnd, StopReason: "end_turn"}}, rec.kinds(provider.TurnEnd))
	u := rec.kinds(provider.Usage)
	require.Len(t, u, 1)
	require.Equal(t, provider.Tokens{Input: 25, Output: 15}, *u[0].Tokens)

	require.Len(t, f.reqs, 1)
	h := f.reqs[0].header
	require.Equal(t, testKey, h.Get("x-api-key"))
	require.Equal(t, DefaultVersion, h.Get("anthropic-version"))
	require.Equal(t, "x-2025", h.Get("anthropic-beta"))
	var body map[string]any
	require.NoError(t, json.Unmarshal(f.reqs[0].body, &body))
	require.Equal(t, "claude-test", body["model"])
	require.Equal(t, "be kind", body["system"])
	require.EqualValues(t, 200, body["max_tokens"])
	require.Equal(t, true, body["stream"])
	require.Equal(t, map[string]any{"type": "enabled", "budget_tokens": float64(1024)}, body["thinking"])
	require.Equal(t, []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "hi"}}}}, body["messages"])
}

func TestToolUse(t *testing.T) {
	t.Parallel()
	f := setup(t, Config{}, serve(start+textBlock+toolUseBlock+toolUse))
	rec, err := f.run(t, provider.Request{Prompt: "weather?"})
	require.NoError(t, err)
	calls := rec.kinds(provider.ToolCall)
	require.Len(t, calls, 1)
	require.Equal(t, "toolu_01", calls[0].Call.ID)
	require.Equal(t, "get_weather", calls[0].Call.Name)
	require.JSONEq(t, `{"location":"San Francisco, CA"}`, string(calls[0].Call.Input))
	require.True(t, calls[0].Call.SideEffect, "side effects are unknown, so assumed")
	require.Equal(t, "tool_use", rec.kinds(provider.TurnEnd)[0].StopReason)
}

func TestHistory(t *testing.T) {
	t.Parallel()
	f := setup(t, Config{History: func(context.Context, provider.Request) ([]Message, error) {
		return []Message{
			{Role: "user", Text: "weather?"},
			{Role: "assistant", Text: "Checking.", ToolCalls: []ToolCall{{ID: "toolu_1", Name: "get_weather", Input: json.RawMessage(`{"location":"Paris"}`)}}},
			{Role: "tool", ToolCallID: "toolu_1", Text: "18C"},
		}, nil
	}}, serve(start+textBlock+endTurn))
	_, err := f.run(t, provider.Request{Prompt: "thanks"})
	require.NoError(t, err)
	var body struct {
		Messages []struct {
			Role    string           `json:"role"`
			Content []map[string]any `json:"content"`
		} `json:"messages"`
	}
	require.NoError(t, json.Unmarshal(f.reqs[0].body, &body))
	require.Len(t, body.Messages, 3)
	last := body.Messages[2]
	require.Equal(t, "user", last.Role)
	require.Equal(t, "tool_result", last.Content[0]["type"], "tool results come first")
	require.Equal(t, "text", last.Content[1]["type"])
}

func TestErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		handler func(w http.ResponseWriter, r *http.Request)
		class   belay.ErrorClass
		retry   time.Duration
	}{
		{"429", fail(429, map[string]string{"retry-after": "12"}, `{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}`), belay.ClassRateLimited, 12 * time.Second},
		{"529", fail(529, nil, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`), belay.ClassOverloaded, 0},
		{"500", fail(500, nil, `{"type":"error","error":{"type":"api_error","message":"Internal server error"}}`), belay.ClassTransient, 0},
		{"401", fail(401, nil, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`), belay.ClassAuth, 0},
		{"403", fail(403, nil, `{"type":"error","error":{"type":"permission_error","message":"no"}}`), belay.ClassAuth, 0},
		{"400", fail(400, nil, `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: field required"}}`), belay.ClassInvalidRequest, 0},
		{"prompt too long", fail(400, nil, `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}}`), belay.ClassContextOverflow, 0},
		{"overloaded mid-stream", serve(start + textBlock + ev("error", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)), belay.ClassOverloaded, 0},
		{"disconnect mid-stream", serve(start + textBlock), belay.ClassTransient, 0},
		{"malformed chunk", serve(start + "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"oops\n\n"), belay.ClassTransient, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t, Config{}, tt.handler)
			_, err := f.run(t, provider.Request{Prompt: "x"})
			require.Equal(t, tt.class, provider.ClassOf(err), "%v", err)
			require.Equal(t, tt.retry, provider.RetryAfterOf(err))
		})
	}
}

func TestDisconnectIsUnexpectedEOF(t *testing.T) {
	t.Parallel()
	f := setup(t, Config{}, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, start+textBlock)
		_ = http.NewResponseController(w).Flush()
		panic(http.ErrAbortHandler) // the connection drops
	})
	rec, err := f.run(t, provider.Request{Prompt: "x"})
	require.Equal(t, belay.ClassTransient, provider.ClassOf(err))
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	require.Equal(t, "Hello!", rec.text(provider.TextDelta))
	require.Empty(t, rec.kinds(provider.TurnEnd))
}

func TestSecretScrubbing(t *testing.T) {
	t.Parallel()
	echo := func(w http.ResponseWriter, r *http.Request) {
		fail(401, nil, fmt.Sprintf(`{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key: %s"}}`, r.Header.Get("x-api-key")))(w, r)
	}
	streamEcho := func(w http.ResponseWriter, r *http.Request) {
		serve(start+ev("error", fmt.Sprintf(`{"type":"error","error":{"type":"api_error","message":"key %s"}}`, r.Header.Get("x-api-key"))))(w, r)
	}
	for _, h := range []func(http.ResponseWriter, *http.Request){echo, streamEcho} {
		f := setup(t, Config{}, h)
		rec, err := f.run(t, provider.Request{Prompt: "x"})
		require.Error(t, err)
		require.NotContains(t, err.Error(), testKey)
		require.NotContains(t, err.Error(), "test0123456789")
		require.Contains(t, err.Error(), "[REDACTED]")
		b, _ := json.Marshal(rec.events)
		require.NotContains(t, string(b), testKey)
	}
}

func TestConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key")
	require.NoError(t, os.WriteFile(keyFile, []byte(testKey), 0o600))
	loose := filepath.Join(dir, "loose")
	require.NoError(t, os.WriteFile(loose, []byte(testKey), 0o600))
	require.NoError(t, os.Chmod(loose, 0o604))
	tests := []struct {
		name    string
		cfg     Config
		errPart string
	}{
		{"key file", Config{APIKeyFile: keyFile}, ""},
		{"loose key file", Config{APIKeyFile: loose}, "chmod 600"},
		{"no key", Config{APIKeyEnv: "BELAY_TEST_SURELY_UNSET_VAR"}, "export BELAY_TEST_SURELY_UNSET_VAR"},
		{"bad url", Config{APIKey: testKey, BaseURL: "ftp://x"}, "not an http(s) URL"},
		{"x-api-key header", Config{APIKey: testKey, Headers: map[string]string{"X-Api-Key": "k"}}, "not a X-Api-Key header"},
		{"bad type", Config{APIKey: testKey, Type: "openai"}, `want "anthropic"`},
		{"negative max_tokens", Config{APIKey: testKey, MaxTokens: -1}, "max_tokens"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := New("anthropic", tt.cfg)
			if tt.errPart != "" {
				require.ErrorContains(t, err, tt.errPart)
				require.ErrorIs(t, err, belay.ErrInvalid)
				require.NotContains(t, err.Error(), testKey)
				return
			}
			require.NoError(t, err)
			require.Equal(t, provider.Capabilities{Tools: true}, p.Capabilities())
			_ = p.Close()
		})
	}
}
