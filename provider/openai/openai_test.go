package openai

import (
	"context"
	"encoding/json"
	"errors"
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

	"github.com/BurntSushi/toml"
	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/provider"
	"github.com/belayhq/belay/provider/openai/openaitest"
)

const testKey = "sk-test-0123456789abcdef"

// patience bounds every wait; generous for a loaded 2-core machine.
const patience = 30 * time.Second

// recorder collects a run's events; it is safe for concurrent reads.
type recorder struct {
	mu     sync.Mutex
	events []provider.Event
	onText func(string)
}

func (r *recorder) emit(ev provider.Event) error {
	r.mu.Lock()
	r.events = append(r.events, ev)
	f := r.onText
	r.mu.Unlock()
	if f != nil && ev.Kind == provider.TextDelta {
		f(ev.Text)
	}
	return nil
}

func (r *recorder) all() []provider.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]provider.Event(nil), r.events...)
}

func (r *recorder) text() string {
	var b strings.Builder
	for _, ev := range r.all() {
		if ev.Kind == provider.TextDelta {
			b.WriteString(ev.Text)
		}
	}
	return b.String()
}

func (r *recorder) kinds(k provider.EventKind) []provider.Event {
	var out []provider.Event
	for _, ev := range r.all() {
		if ev.Kind == k {
			out = append(out, ev)
		}
	}
	return out
}

func newProvider(t *testing.T, cfg Config) *Provider {
	t.Helper()
	if cfg.APIKey == "" && cfg.APIKeyEnv == "" && cfg.APIKeyFile == "" {
		cfg.APIKey = testKey
	}
	if cfg.Model == "" {
		cfg.Model = "gpt-test"
	}
	p, err := New("openai", cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func server(t *testing.T, opts openaitest.Options) *openaitest.Server {
	t.Helper()
	if opts.APIKey == "" {
		opts.APIKey = testKey
	}
	s := openaitest.NewServer(opts)
	t.Cleanup(s.Close)
	return s
}

func run(t *testing.T, p *Provider, req provider.Request) (*recorder, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	rec := &recorder{}
	if req.Run == "" {
		req.Run, req.Attempt = "run_1", 1
	}
	err := p.Run(ctx, req, rec.emit)
	return rec, err
}

func TestChatText(t *testing.T) {
	t.Parallel()
	srv := server(t, openaitest.Options{Reply: "Hello, wörld! How are you?"})
	p := newProvider(t, Config{BaseURL: srv.URL, Organization: "org-1", Project: "proj-1", Headers: map[string]string{"X-Extra": "yes"}})
	rec, err := run(t, p, provider.Request{Prompt: "hi", Options: json.RawMessage(`{"temperature":0.2,"system":"be brief","max_tokens":50}`)})
	require.NoError(t, err)
	require.Equal(t, "Hello, wörld! How are you?", rec.text())
	ends := rec.kinds(provider.TurnEnd)
	require.Len(t, ends, 1)
	require.Equal(t, "stop", ends[0].StopReason)
	usage := rec.kinds(provider.Usage)
	require.Len(t, usage, 1)
	require.Equal(t, 1, usage[0].Tokens.Input)
	require.NotEmpty(t, rec.kinds(provider.Keepalive), "the role-only first chunk is a keepalive")

	reqs := srv.Requests()
	require.Len(t, reqs, 1)
	h := reqs[0].Header
	require.Equal(t, "Bearer "+testKey, h.Get("Authorization"))
	require.Equal(t, "org-1", h.Get("OpenAI-Organization"))
	require.Equal(t, "proj-1", h.Get("OpenAI-Project"))
	require.Equal(t, "yes", h.Get("X-Extra"))
	var body map[string]any
	require.NoError(t, json.Unmarshal(reqs[0].Body, &body))
	require.Equal(t, "gpt-test", body["model"])
	require.Equal(t, true, body["stream"])
	require.Equal(t, map[string]any{"include_usage": true}, body["stream_options"])
	require.Equal(t, 0.2, body["temperature"])
	require.EqualValues(t, 50, body["max_tokens"])
	require.Equal(t, []any{
		map[string]any{"role": "system", "content": "be brief"},
		map[string]any{"role": "user", "content": "hi"},
	}, body["messages"])
}

func TestChatModelAndOptionsOverride(t *testing.T) {
	t.Parallel()
	srv := server(t, openaitest.Options{Reply: "ok"})
	p := newProvider(t, Config{BaseURL: srv.URL})
	_, err := run(t, p, provider.Request{
		Prompt: "hi", Model: "other-model",
		Options: json.RawMessage(`{"temperature":0.2,"max_tokens":50}`),
		Input:   json.RawMessage(`{"prompt":"hi","options":{"temperature":0.9,"max_tokens":null}}`),
	})
	require.NoError(t, err)
	var body map[string]any
	require.NoError(t, json.Unmarshal(srv.Requests()[0].Body, &body))
	require.Equal(t, "other-model", body["model"])
	require.Equal(t, 0.9, body["temperature"], "run options override the session's")
	require.NotContains(t, body, "max_tokens", "null removes a session option")

	_, err = run(t, p, provider.Request{Prompt: "hi", Options: json.RawMessage(`{"temperature":"hot"}`)})
	require.Equal(t, belay.ClassInvalidRequest, provider.ClassOf(err))
}

func TestChatHistory(t *testing.T) {
	t.Parallel()
	srv := server(t, openaitest.Options{Reply: "ok"})
	p := newProvider(t, Config{BaseURL: srv.URL, History: func(ctx context.Context, req provider.Request) ([]Message, error) {
		return []Message{
			{Role: "user", Text: "weather?"},
			{Role: "assistant", ToolCalls: []ToolCall{{ID: "call_1", Name: "get_weather", Input: json.RawMessage(`{"city":"Paris"}`)}}},
			{Role: "tool", ToolCallID: "call_1", Text: "18C"},
		}, nil
	}})
	_, err := run(t, p, provider.Request{Prompt: "thanks"})
	require.NoError(t, err)
	var body struct {
		Messages []map[string]any `json:"messages"`
	}
	require.NoError(t, json.Unmarshal(srv.Requests()[0].Body, &body))
	require.Len(t, body.Messages, 4)
	require.Equal(t, "tool", body.Messages[2]["role"])
	require.Equal(t, "call_1", body.Messages[2]["tool_call_id"])
	calls := body.Messages[1]["tool_calls"].([]any)
	require.Equal(t, `{"city":"Paris"}`, calls[0].(map[string]any)["function"].(map[string]any)["arguments"])
	require.Equal(t, "thanks", body.Messages[3]["content"])
}

func TestChatToolCalls(t *testing.T) {
	t.Parallel()
	srv := server(t, openaitest.Options{Reply: "Let me check.", Chunk: 3, ToolCalls: []openaitest.ToolCall{
		{ID: "call_abc", Name: "get_weather", Arguments: `{"city":"Paris","unit":"C"}`},
		{ID: "call_def", Name: "get_time", Arguments: `{"tz":"Europe/Paris"}`},
	}})
	p := newProvider(t, Config{BaseURL: srv.URL})
	rec, err := run(t, p, provider.Request{Prompt: "weather?"})
	require.NoError(t, err)
	calls := rec.kinds(provider.ToolCall)
	require.Len(t, calls, 2)
	require.Equal(t, provider.Call{ID: "call_abc", Name: "get_weather", Input: json.RawMessage(`{"city":"Paris","unit":"C"}`), SideEffect: true}, *calls[0].Call)
	require.Equal(t, "call_def", calls[1].Call.ID)
	require.JSONEq(t, `{"tz":"Europe/Paris"}`, string(calls[1].Call.Input))
	ends := rec.kinds(provider.TurnEnd)
	require.Len(t, ends, 1)
	require.Equal(t, "tool_calls", ends[0].StopReason)
	// The calls come before the turn end.
	all := rec.all()
	var order []provider.EventKind
	for _, ev := range all {
		if ev.Kind == provider.ToolCall || ev.Kind == provider.TurnEnd {
			order = append(order, ev.Kind)
		}
	}
	require.Equal(t, []provider.EventKind{provider.ToolCall, provider.ToolCall, provider.TurnEnd}, order)
}

type (
	writer  = http.ResponseWriter
	request = http.Request
)

// sseServer serves one handler per request, in order (the last repeats).
func sseServer(t *testing.T, handlers ...func(w http.ResponseWriter, r *http.Request)) *httptest.Server {
	t.Helper()
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		h := handlers[min(n, len(handlers)-1)]
		n++
		mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// writeSSE writes raw SSE text and flushes.
func writeSSE(w http.ResponseWriter, s string) {
	if w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "text/event-stream")
	}
	_, _ = io.WriteString(w, s)
	_ = http.NewResponseController(w).Flush()
}

func TestChatRawStreams(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		body  string
		text  string
		class belay.ErrorClass
		check func(t *testing.T, rec *recorder, err error)
	}{
		{
			name: "reasoning, refusal, keepalive comments, no [DONE]",
			body: ": keepalive\n\n" +
				`data: {"choices":[{"index":0,"delta":{"reasoning_content":"thinking..."}}]}` + "\n\n" +
				`data: {"choices":[{"index":0,"delta":{"content":"A"}}]}` + "\r\n\r\n" +
				`data: {"choices":[{"index":1,"delta":{"content":"other choice"}}]}` + "\n\n" +
				`data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}` + "\n\n",
			text: "A",
			check: func(t *testing.T, rec *recorder, err error) {
				require.NoError(t, err)
				require.Equal(t, "thinking...", rec.kinds(provider.ThinkingDelta)[0].Text)
				require.Equal(t, "length", rec.kinds(provider.TurnEnd)[0].StopReason)
				require.NotEmpty(t, rec.kinds(provider.Keepalive))
			},
		},
		{
			name: "tool call without index, invalid JSON arguments",
			body: `data: {"choices":[{"index":0,"delta":{"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":"}}]}}]}` + "\n\n" +
				`data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}` + "\n\ndata: [DONE]\n\n",
			check: func(t *testing.T, rec *recorder, err error) {
				require.NoError(t, err)
				c := rec.kinds(provider.ToolCall)[0].Call
				require.Equal(t, "c1", c.ID)
				require.Equal(t, `"{\"a\":"`, string(c.Input), "invalid arguments are kept as a JSON string")
			},
		},
		{
			name:  "malformed chunk",
			body:  `data: {"choices":[{"index":0,"delta":{"content":"A"}}]}` + "\n\ndata: {\"choices\": [secret answer text\n\n",
			text:  "A",
			class: belay.ClassTransient,
			check: func(t *testing.T, rec *recorder, err error) {
				require.ErrorContains(t, err, "malformed chunk")
				require.NotContains(t, err.Error(), "secret answer text", "chunk content is not quoted")
			},
		},
		{
			name:  "error object mid-stream",
			body:  `data: {"choices":[{"index":0,"delta":{"content":"A"}}]}` + "\n\n" + `data: {"error":{"message":"The server had an error","type":"server_error","code":null}}` + "\n\n",
			text:  "A",
			class: belay.ClassTransient,
		},
		{
			name:  "context overflow mid-stream",
			body:  `data: {"error":{"message":"This model's maximum context length is 8192 tokens","type":"invalid_request_error","code":"context_length_exceeded"}}` + "\n\n",
			class: belay.ClassContextOverflow,
		},
		{
			name:  "ends without finish_reason",
			body:  `data: {"choices":[{"index":0,"delta":{"content":"A"}}]}` + "\n\n",
			text:  "A",
			class: belay.ClassTransient,
			check: func(t *testing.T, rec *recorder, err error) {
				require.ErrorIs(t, err, io.ErrUnexpectedEOF)
				require.Empty(t, rec.kinds(provider.TurnEnd))
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := sseServer(t, func(w http.ResponseWriter, r *http.Request) { writeSSE(w, tt.body) })
			p := newProvider(t, Config{BaseURL: srv.URL + "/v1"})
			rec, err := run(t, p, provider.Request{Prompt: "x"})
			require.Equal(t, tt.text, rec.text())
			if tt.class != "" {
				require.Equal(t, tt.class, provider.ClassOf(err), "%v", err)
			}
			if tt.check != nil {
				tt.check(t, rec, err)
			}
		})
	}
}

func TestChatMidStreamDisconnect(t *testing.T) {
	t.Parallel()
	srv := server(t, openaitest.Options{Reply: "one two three four five six", Chunk: 4, CutAfter: 3})
	p := newProvider(t, Config{BaseURL: srv.URL})
	rec, err := run(t, p, provider.Request{Prompt: "x"})
	require.Equal(t, belay.ClassTransient, provider.ClassOf(err), "%v", err)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	require.Equal(t, "one two ", rec.text())
	require.Empty(t, rec.kinds(provider.TurnEnd))
}

// TestChatSlowDrip: each chunk is emitted as it arrives; the server sends
// the next one only after the client has reported the previous one.
func TestChatSlowDrip(t *testing.T) {
	t.Parallel()
	seen := make(chan string, 16)
	words := []string{"slow ", "and ", "steady"}
	srv := sseServer(t, func(w http.ResponseWriter, r *http.Request) {
		for _, word := range words {
			writeSSE(w, fmt.Sprintf(`data: {"choices":[{"index":0,"delta":{"content":%q}}]}`+"\n\n", word))
			select {
			case got := <-seen:
				if got != word {
					return
				}
			case <-time.After(patience):
				return
			case <-r.Context().Done():
				return
			}
			writeSSE(w, ": still here\n\n")
		}
		writeSSE(w, `data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`+"\n\ndata: [DONE]\n\n")
	})
	p := newProvider(t, Config{BaseURL: srv.URL + "/v1"})
	rec := &recorder{onText: func(s string) { seen <- s }}
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	require.NoError(t, p.Run(ctx, provider.Request{Prompt: "x"}, rec.emit))
	require.Equal(t, "slow and steady", rec.text())
	require.Len(t, rec.kinds(provider.Keepalive), 3)
}

func TestChatHTTPErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		f     openaitest.Failure
		class belay.ErrorClass
		retry time.Duration
	}{
		{"auth", openaitest.Failure{Status: 401, Type: "invalid_request_error", Code: "invalid_api_key", Message: "Incorrect API key provided: " + testKey}, belay.ClassAuth, 0},
		{"rate limited", openaitest.Failure{Status: 429, RetryAfter: "2", Type: "requests", Code: "rate_limit_exceeded"}, belay.ClassRateLimited, 2 * time.Second},
		{"quota", openaitest.Failure{Status: 429, Type: "insufficient_quota", Code: "insufficient_quota"}, belay.ClassQuota, 0},
		{"overloaded", openaitest.Failure{Status: 503}, belay.ClassOverloaded, 0},
		{"server error", openaitest.Failure{Status: 500, Type: "server_error"}, belay.ClassTransient, 0},
		{"bad request", openaitest.Failure{Status: 400, Type: "invalid_request_error", Message: "Invalid temperature"}, belay.ClassInvalidRequest, 0},
		{"context overflow", openaitest.Failure{Status: 400, Type: "invalid_request_error", Code: "context_length_exceeded", Message: "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens."}, belay.ClassContextOverflow, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := server(t, openaitest.Options{Failures: []openaitest.Failure{tt.f}})
			p := newProvider(t, Config{BaseURL: srv.URL})
			_, err := run(t, p, provider.Request{Prompt: "x"})
			require.Equal(t, tt.class, provider.ClassOf(err), "%v", err)
			require.Equal(t, tt.retry, provider.RetryAfterOf(err))
			require.NotContains(t, err.Error(), testKey)
		})
	}
}

func TestAuthFailure(t *testing.T) {
	t.Parallel()
	srv := server(t, openaitest.Options{APIKey: "sk-the-right-key-000000"})
	p := newProvider(t, Config{BaseURL: srv.URL, APIKey: testKey})
	_, err := run(t, p, provider.Request{Prompt: "x"})
	require.Equal(t, belay.ClassAuth, provider.ClassOf(err), "%v", err)
	require.Contains(t, err.Error(), "HTTP 401")
}

// TestSecretScrubbing: a server that echoes the credentials back (as
// misconfigured proxies do) in an error body, a stream error and a
// malformed request line never gets them into an error or an event.
func TestSecretScrubbing(t *testing.T) {
	t.Parallel()
	echo := func(status int) func(w http.ResponseWriter, r *http.Request) {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			msg := fmt.Sprintf("bad credentials: Authorization: %s (key %s)", r.Header.Get("Authorization"), strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
			_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": "invalid_request_error"}})
		}
	}
	streamEcho := func(w http.ResponseWriter, r *http.Request) {
		writeSSE(w, fmt.Sprintf(`data: {"error":{"message":"upstream said %s","type":"server_error"}}`+"\n\n", r.Header.Get("Authorization")))
	}
	for i, h := range []func(http.ResponseWriter, *http.Request){echo(401), echo(500), echo(400), streamEcho} {
		srv := sseServer(t, h)
		p := newProvider(t, Config{BaseURL: srv.URL + "/v1"})
		rec, err := run(t, p, provider.Request{Prompt: "x"})
		require.Error(t, err, "case %d", i)
		require.NotContains(t, err.Error(), testKey, "case %d", i)
		require.NotContains(t, err.Error(), "0123456789abcdef", "case %d", i)
		require.Contains(t, err.Error(), "[REDACTED]", "case %d", i)
		b, _ := json.Marshal(rec.all())
		require.NotContains(t, string(b), testKey)
		var pe *provider.Error
		require.True(t, errors.As(err, &pe))
		if pe.Err != nil {
			require.NotContains(t, pe.Err.Error(), testKey)
		}
	}
	// A connection failure names the URL, never the key.
	p := newProvider(t, Config{BaseURL: "http://127.0.0.1:1/v1", ConnectTimeout: time.Second})
	_, err := run(t, p, provider.Request{Prompt: "x"})
	require.Equal(t, belay.ClassTransient, provider.ClassOf(err))
	require.NotContains(t, err.Error(), testKey)
}

func TestConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key")
	require.NoError(t, os.WriteFile(keyFile, []byte(testKey+"\n"), 0o600))
	loose := filepath.Join(dir, "loose")
	require.NoError(t, os.WriteFile(loose, []byte(testKey), 0o600))
	require.NoError(t, os.Chmod(loose, 0o640))

	tests := []struct {
		name    string
		cfg     Config
		errPart string
	}{
		{"local server without key", Config{BaseURL: "http://127.0.0.1:8000/v1", APIKeyEnv: ""}, ""},
		{"key file", Config{APIKeyFile: keyFile}, ""},
		{"loose key file", Config{APIKeyFile: loose}, "chmod 600"},
		{"bad url", Config{BaseURL: "localhost:8000", APIKey: "k-1234"}, "not an http(s) URL"},
		{"url with credentials", Config{BaseURL: "https://u:p@example.com/v1", APIKey: "k-1234"}, "must not carry credentials"},
		{"bad api", Config{API: "completions", APIKey: "k-1234"}, `want "chat" or "responses"`},
		{"bad type", Config{Type: "anthropic", APIKey: "k-1234"}, `want "openai"`},
		{"authorization header", Config{APIKey: "k-1234", Headers: map[string]string{"authorization": "x"}}, "not an Authorization header"},
		{"bad header", Config{APIKey: "k-1234", Headers: map[string]string{"bad header": "x"}}, "not a valid header name"},
		{"negative cursor", Config{APIKey: "k-1234", CursorEvery: -1}, "cursor_every"},
		{"env named but empty", Config{APIKeyEnv: "BELAY_TEST_SURELY_UNSET_VAR"}, "export BELAY_TEST_SURELY_UNSET_VAR"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := New("openai", tt.cfg)
			if tt.errPart != "" {
				require.ErrorContains(t, err, tt.errPart)
				require.ErrorIs(t, err, belay.ErrInvalid)
				require.NotContains(t, err.Error(), testKey)
				return
			}
			require.NoError(t, err)
			_ = p.Close()
		})
	}
}

// TestConfigTOML decodes the docs' examples.
func TestConfigTOML(t *testing.T) {
	t.Parallel()
	const doc = `
[providers.openai]
type = "openai"
api = "responses"
model = "gpt-5"
api_key_env = "OPENAI_API_KEY"
organization = "org-123"
project = "proj_456"
connect_timeout = "10s"
first_byte_timeout = "2m"
idle_timeout = "10m"
poll_interval = "5s"

[providers.local]
type = "openai"
base_url = "http://127.0.0.1:8000/v1"
model = "Qwen/Qwen2.5-7B-Instruct"
[providers.local.headers]
X-Team = "research"
`
	var file struct {
		Providers map[string]toml.Primitive `toml:"providers"`
	}
	md, err := toml.Decode(doc, &file)
	require.NoError(t, err)
	var cfg Config
	require.NoError(t, md.PrimitiveDecode(file.Providers["openai"], &cfg))
	require.Equal(t, APIResponses, cfg.API)
	require.Equal(t, 2*time.Minute, cfg.FirstByteTimeout)
	require.Equal(t, 5*time.Second, cfg.PollInterval)
	var local Config
	require.NoError(t, md.PrimitiveDecode(file.Providers["local"], &local))
	require.Empty(t, md.Undecoded())
	require.Equal(t, "research", local.Headers["X-Team"])
	p, err := New("local", local)
	require.NoError(t, err)
	require.Equal(t, "local", p.Name())
	require.False(t, p.Capabilities().Resume)
	_ = p.Close()
}
