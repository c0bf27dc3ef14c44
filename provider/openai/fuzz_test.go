package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/belayhq/belay/provider"
	"github.com/belayhq/belay/provider/internal/httpapi"
)

const fuzzKey = "sk-fuzz-key-0123456789abcdef"

func fuzzProvider() *Provider {
	return &Provider{name: "openai", cfg: Config{CursorEvery: 1}, scrub: httpapi.NewScrubber(fuzzKey)}
}

// checkStreamEvent checks that an event can be journaled and replayed:
// tool calls carry an id, a name and JSON input; texts are not empty.
func checkStreamEvent(e provider.Event) error {
	switch e.Kind {
	case provider.TextDelta, provider.ThinkingDelta:
		if e.Text == "" {
			return errors.New("empty text")
		}
	case provider.ToolCall:
		if e.Call == nil || e.Call.ID == "" || e.Call.Name == "" || !json.Valid(e.Call.Input) {
			return fmt.Errorf("bad tool call %+v", e.Call)
		}
	case provider.Usage:
		if e.Tokens == nil {
			return errors.New("usage without tokens")
		}
	case provider.RefUpdate:
		if e.Ref == nil || e.Ref.ID == "" {
			return errors.New("ref update without an id")
		}
	case provider.TurnEnd:
		if e.StopReason == "" {
			return errors.New("turn end without a reason")
		}
	case provider.Keepalive:
	default:
		return fmt.Errorf("kind %q", e.Kind)
	}
	_, err := json.Marshal(e)
	return err
}

// checkStreamErr checks that a stream's failure is a classified
// *provider.Error that does not show the key.
func checkStreamErr(t *testing.T, err error) {
	t.Helper()
	var pe *provider.Error
	if !errors.As(err, &pe) || pe.Class == "" {
		t.Fatalf("unclassified failure %#v", err)
	}
	if strings.Contains(err.Error(), fuzzKey) {
		t.Fatalf("failure shows the key: %v", err)
	}
}

// FuzzChatStream reads arbitrary Chat Completions stream bodies. Every
// event must be journalable; a stream that ends well ends with exactly one
// turn end; any other end is a classified error that does not show the
// key.
func FuzzChatStream(f *testing.F) {
	f.Add([]byte(`data: {"choices":[{"index":0,"delta":{"reasoning_content":"thinking..."}}]}` + "\n\n" +
		`data: {"choices":[{"index":0,"delta":{"content":"A"}}]}` + "\r\n\r\n" +
		`data: {"choices":[{"index":1,"delta":{"content":"other choice"}}]}` + "\n\n" +
		`: keepalive` + "\n\n" +
		`data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}` + "\n\n" +
		`data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}` + "\n\ndata: [DONE]\n\n"))
	f.Add([]byte(`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":"}}]}}]}` + "\n\n" +
		`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]}}]}` + "\n\n" +
		`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"id":"c2","function":{"name":"g"}}]}}]}` + "\n\n" +
		`data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}` + "\n\ndata: [DONE]\n\n"))
	f.Add([]byte(`data: {"error":{"message":"bad key ` + fuzzKey + `","type":"invalid_request_error","code":"invalid_api_key"}}` + "\n\n"))
	f.Add([]byte(`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":-1,"function":{"arguments":"x"}}]}}]}` + "\n\ndata: [DONE]\n\n"))
	f.Add([]byte("data: {\"choices\": [secret\n\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		var evs []provider.Event
		s := &chatStream{p: fuzzProvider(), req: provider.Request{Run: "run_x", Attempt: 1}, calls: map[int]*callAcc{},
			emit: func(e provider.Event) error { evs = append(evs, e); return nil }}
		err := s.read(context.Background(), bytes.NewReader(body))
		ends := 0
		for i, e := range evs {
			if cerr := checkStreamEvent(e); cerr != nil {
				t.Fatalf("event %d: %v", i, cerr)
			}
			if e.Kind == provider.TurnEnd {
				ends++
			}
		}
		if ends > 1 {
			t.Fatalf("%d turn ends", ends)
		}
		if err != nil {
			checkStreamErr(t, err)
			return
		}
		if ends != 1 {
			t.Fatal("a stream that ended well has no turn end")
		}
	})
}

// FuzzResponsesStream reads arbitrary Responses API stream bodies. Every
// event must be journalable; tool calls are reported once; the cursor
// only moves forward and never past the events applied; a stream that
// ends well ends with one turn end as its last event; any other end is a
// broken stream to resume, a poll, or a classified error.
func FuzzResponsesStream(f *testing.F) {
	f.Add([]byte(`data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_1","status":"queued"}}` + "\n\n" +
		`data: {"type":"response.output_text.delta","sequence_number":1,"item_id":"m1","delta":"Hel"}` + "\n\n" +
		`data: {"type":"response.reasoning_summary_text.delta","sequence_number":2,"item_id":"r1","delta":"hmm"}` + "\n\n" +
		`data: {"type":"response.output_item.added","sequence_number":3,"item":{"id":"fc1","type":"function_call","call_id":"call_1","name":"f","arguments":""}}` + "\n\n" +
		`data: {"type":"response.function_call_arguments.delta","sequence_number":4,"item_id":"fc1","delta":"{\"a\":1}"}` + "\n\n" +
		`data: {"type":"response.output_item.done","sequence_number":5,"item":{"id":"fc1","type":"function_call","call_id":"call_1","name":"f"}}` + "\n\n" +
		`data: {"type":"response.completed","sequence_number":6,"response":{"id":"resp_1","status":"completed","usage":{"input_tokens":3,"output_tokens":4}}}` + "\n\n"))
	f.Add([]byte(`data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_1"}}` + "\n\n" +
		`data: {"type":"response.failed","sequence_number":1,"response":{"id":"resp_1","status":"failed","error":{"code":"server_error","message":"boom"}}}` + "\n\n"))
	f.Add([]byte(`data: {"type":"error","sequence_number":1,"code":"x","message":"y"}` + "\n\n"))
	f.Add([]byte(`data: {"type":"response.incomplete","sequence_number":9,"response":{"id":"r","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"}}}` + "\n\n"))
	f.Add([]byte(`data: {"type":"response.output_item.done","sequence_number":1,"item":{"id":"fc1","type":"function_call","call_id":"call_1","name":""}}` + "\n\n" +
		`data: {"type":"response.done","sequence_number":2,"response":{"id":"r"}}` + "\n\n"))
	f.Add([]byte(`data: {"type":"response.cancelled","sequence_number":-5,"response":{"id":"r","status":"cancelled"}}` + "\n\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		p := fuzzProvider()
		st := newRespState()
		var evs []provider.Event
		resp := &http.Response{StatusCode: 200, Body: io.NopCloser(bytes.NewReader(body))}
		err := p.stream(context.Background(), st, resp, func(e provider.Event) error { evs = append(evs, e); return nil })
		calls := map[string]bool{}
		cursor := int64(-1)
		ends := 0
		for i, e := range evs {
			if cerr := checkStreamEvent(e); cerr != nil {
				t.Fatalf("event %d: %v", i, cerr)
			}
			switch e.Kind {
			case provider.ToolCall:
				if calls[e.Call.ID] {
					t.Fatalf("call %s reported twice", e.Call.ID)
				}
				calls[e.Call.ID] = true
			case provider.RefUpdate:
				c, perr := strconv.ParseInt(e.Ref.Cursor, 10, 64)
				if perr != nil || c < cursor || e.Ref.Kind != RefKind {
					t.Fatalf("ref %+v after cursor %d", e.Ref, cursor)
				}
				cursor = c
			case provider.TurnEnd:
				ends++
				if i != len(evs)-1 {
					t.Fatal("events after the turn end")
				}
			}
		}
		if cursor > st.cursor {
			t.Fatalf("reported cursor %d is past the applied %d", cursor, st.cursor)
		}
		var broke *streamBroke
		switch {
		case err == nil:
			if ends != 1 || !st.done {
				t.Fatalf("a stream that ended well: %d turn ends, done %v", ends, st.done)
			}
		case errors.Is(err, errPollNow):
		case errors.As(err, &broke):
			checkStreamErr(t, broke.err)
		default:
			checkStreamErr(t, err)
		}
		if err != nil && ends > 0 {
			t.Fatalf("a turn end and an error: %v", err)
		}
	})
}

// FuzzConfig decodes arbitrary [providers.NAME] tables (TOML, as the
// daemon does). A config New accepts must work: its timeouts are not
// negative, and the requests it builds keep the configured base URL's
// host and path, and carry every configured header and the key, as sent
// through net/http to a loopback server. Anything else must be an error
// from New, never one from each run.
func FuzzConfig(f *testing.F) {
	f.Add("type = \"openai\"\nmodel = \"gpt-4.1\"\napi_key = \"" + fuzzKey + "\"\norganization = \"org-1\"\nproject = \"proj_1\"\n")
	f.Add("type = \"openai\"\napi = \"responses\"\nbase_url = \"http://127.0.0.1:8000/v1/\"\npoll_interval = \"5s\"\ncursor_every = 3\n")
	f.Add("base_url = \"http://127.0.0.1:8000/v1\"\nfirst_byte_timeout = \"-1s\"\nstream_retries = 4\n[headers]\nX-Extra = \"a\"\n")
	// Regressions: values net/http refuses, and a base URL whose fragment
	// swallowed every request path.
	f.Add("base_url = \"http://h/v1\"\n[headers]\nX-A = \"a\\nb\"\n")
	f.Add("base_url = \"http://h/v1\"\norganization = \"org\\r\\nX-Injected: 1\"\n")
	f.Add("base_url = \"http://h/v1\"\napi_key = \"abc\\ndef\"\n")
	f.Add("base_url = \"http://h/v1#frag\"\n")
	var mu sync.Mutex
	var got http.Header
	var gotPath string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got, gotPath = r.Header.Clone(), r.URL.Path
		mu.Unlock()
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	f.Fuzz(func(t *testing.T, table string) {
		var cfg Config
		if _, err := toml.Decode(table, &cfg); err != nil {
			return
		}
		t.Setenv(DefaultAPIKeyEnv, "")
		p, err := New("o", cfg)
		if err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("error is not ErrConfig: %v", err)
			}
			return
		}
		defer p.Close()
		c := p.cfg
		for _, d := range []time.Duration{c.ConnectTimeout, c.FirstByteTimeout, c.IdleTimeout, c.CancelTimeout, c.PollInterval} {
			if d < 0 {
				t.Fatalf("negative duration %v", d)
			}
		}
		if c.CancelTimeout == 0 || c.PollInterval == 0 || c.StreamRetries <= 0 || c.CursorEvery <= 0 {
			t.Fatalf("defaults not applied: %+v", c)
		}
		// The request as built for the configured base URL.
		r, err := p.newRequest(context.Background(), "POST", "/chat/completions", map[string]string{})
		if err != nil {
			t.Fatalf("a valid config builds no request: %v", err)
		}
		base, err := url.Parse(c.BaseURL)
		if err != nil {
			t.Fatal(err)
		}
		if r.URL.Host != base.Host || r.URL.Path != base.Path+"/chat/completions" {
			t.Fatalf("base %q sends to host %q path %q", c.BaseURL, r.URL.Host, r.URL.Path)
		}
		// The same request sent to a loopback server.
		r.URL.Scheme, r.URL.Host, r.Host = "http", strings.TrimPrefix(srv.URL, "http://"), ""
		resp, err := srv.Client().Do(r)
		if err != nil {
			t.Fatalf("net/http refuses the request of a valid config: %v", err)
		}
		resp.Body.Close()
		mu.Lock()
		defer mu.Unlock()
		// Headers the provider sets itself win; of two names that differ
		// only in case, one is sent.
		want := map[string]map[string]bool{}
		for k, v := range c.Headers {
			ck := http.CanonicalHeaderKey(k)
			if want[ck] == nil {
				want[ck] = map[string]bool{}
			}
			want[ck][v] = true
		}
		for _, own := range []string{"Content-Type", "Accept", "User-Agent", "Openai-Organization", "Openai-Project"} {
			delete(want, own)
		}
		for k, vs := range want {
			if !vs[got.Get(k)] {
				t.Fatalf("header %s: sent %q, configured %v", k, got.Get(k), vs)
			}
		}
		if p.key != "" && got.Get("Authorization") != "Bearer "+p.key {
			t.Fatalf("key not sent")
		}
		_ = gotPath
	})
}
