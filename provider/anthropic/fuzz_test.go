package anthropic

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
	"strings"
	"sync"
	"testing"

	"github.com/BurntSushi/toml"

	"github.com/belayhq/belay/provider"
	"github.com/belayhq/belay/provider/internal/httpapi"
)

const fuzzKey = "sk-ant-fuzz-key-0123456789"

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

// FuzzMessagesStream reads arbitrary Messages API stream bodies. Every
// event must be journalable; a stream that ends well ends with one turn
// end as its last event; any other end is a classified *provider.Error
// that does not show the key.
func FuzzMessagesStream(f *testing.F) {
	ev := func(typ, data string) string { return "event: " + typ + "\ndata: " + data + "\n\n" }
	start := ev("message_start", `{"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":10,"cache_read_input_tokens":2,"output_tokens":1}}}`)
	f.Add([]byte(start +
		ev("ping", `{"type":"ping"}`) +
		ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}`) +
		ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}}`) +
		ev("content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"text","text":"Hi"}}`) +
		ev("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":" there"}}`) +
		ev("content_block_start", `{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_1","name":"get","input":{}}}`) +
		ev("content_block_delta", `{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}}`) +
		ev("content_block_delta", `{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"1}"}}`) +
		ev("content_block_stop", `{"type":"content_block_stop","index":2}`) +
		ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":20}}`) +
		ev("message_stop", `{"type":"message_stop"}`)))
	f.Add([]byte(start + ev("error", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded `+fuzzKey+`"}}`)))
	f.Add([]byte(start + ": comment\n\n" + "data: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"oops\n\n"))
	// Regression: a tool_use block without an id or a name was reported
	// as a tool call that could never be settled or replayed.
	f.Add([]byte(start +
		ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use"}}`) +
		ev("content_block_stop", `{"type":"content_block_stop","index":0}`) +
		ev("message_stop", `{"type":"message_stop"}`)))
	f.Fuzz(func(t *testing.T, body []byte) {
		var evs []provider.Event
		s := &stream{p: &Provider{name: "anthropic", scrub: httpapi.NewScrubber(fuzzKey)}, blocks: map[int]*toolBlock{},
			emit: func(e provider.Event) error { evs = append(evs, e); return nil }}
		err := s.read(context.Background(), bytes.NewReader(body))
		ends := 0
		for i, e := range evs {
			if cerr := checkStreamEvent(e); cerr != nil {
				t.Fatalf("event %d: %v", i, cerr)
			}
			if e.Kind == provider.TurnEnd {
				ends++
				if i != len(evs)-1 {
					t.Fatal("events after the turn end")
				}
			}
		}
		if err != nil {
			var pe *provider.Error
			if !errors.As(err, &pe) || pe.Class == "" {
				t.Fatalf("unclassified failure %#v", err)
			}
			if strings.Contains(err.Error(), fuzzKey) {
				t.Fatalf("failure shows the key: %v", err)
			}
			if ends != 0 {
				t.Fatal("a turn end and a failure")
			}
			return
		}
		if ends != 1 {
			t.Fatalf("a stream that ended well has %d turn ends", ends)
		}
	})
}

// FuzzConfig decodes arbitrary [providers.NAME] tables (TOML, as the
// daemon does). A config New accepts must work: a run reaches a loopback
// server through net/http with every configured header, the version and
// the key, and its base URL keeps host and path. Anything else must be an
// error from New, never one from each run.
func FuzzConfig(f *testing.F) {
	f.Add("type = \"anthropic\"\nmodel = \"claude-sonnet-4-5\"\napi_key = \"" + fuzzKey + "\"\nmax_tokens = 8192\n[headers]\nanthropic-beta = \"interleaved-thinking-2025-05-14\"\n")
	f.Add("api_key = \"k\"\nbase_url = \"http://127.0.0.1:9/v1/\"\nidle_timeout = \"-1s\"\n")
	// Regressions: values net/http refuses, and a base URL fragment.
	f.Add("api_key = \"k\"\n[headers]\nX-A = \"a\\nb\"\n")
	f.Add("api_key = \"k\"\nanthropic_version = \"2023-06-01\\r\\nX: y\"\n")
	f.Add("api_key = \"k\\u0000\"\n")
	f.Add("api_key = \"k\"\nbase_url = \"http://h/v1#x\"\n")
	var mu sync.Mutex
	var got http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.Header.Clone()
		mu.Unlock()
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	}))
	defer srv.Close()
	f.Fuzz(func(t *testing.T, table string) {
		var cfg Config
		if _, err := toml.Decode(table, &cfg); err != nil {
			return
		}
		t.Setenv(DefaultAPIKeyEnv, "")
		p, err := New("a", cfg)
		if err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("error is not ErrConfig: %v", err)
			}
			return
		}
		defer p.Close()
		c := p.cfg
		if c.ConnectTimeout < 0 || c.FirstByteTimeout < 0 || c.IdleTimeout < 0 || c.MaxTokens <= 0 || c.AnthropicVersion == "" {
			t.Fatalf("config after defaults: %+v", c)
		}
		base, err := url.Parse(c.BaseURL)
		if err != nil {
			t.Fatal(err)
		}
		if u, err := url.Parse(c.BaseURL + "/messages"); err != nil || u.Host != base.Host || u.Path != base.Path+"/messages" {
			t.Fatalf("base %q sends to %v (%v)", c.BaseURL, u, err)
		}
		p.cfg.BaseURL = srv.URL + "/v1"
		p.client = httpapi.NewClient(httpapi.Timeouts{})
		var evs []provider.Event
		err = p.Run(context.Background(), provider.Request{Model: "m", Prompt: "hi"}, func(e provider.Event) error { evs = append(evs, e); return nil })
		if err != nil {
			t.Fatalf("a run of a valid config fails: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		want := map[string]map[string]bool{}
		for k, v := range c.Headers {
			ck := http.CanonicalHeaderKey(k)
			if want[ck] == nil {
				want[ck] = map[string]bool{}
			}
			want[ck][v] = true
		}
		for _, own := range []string{"Content-Type", "Accept", "User-Agent", "Anthropic-Version"} {
			delete(want, own)
		}
		for k, vs := range want {
			if !vs[got.Get(k)] {
				t.Fatalf("header %s: sent %q, configured %v", k, got.Get(k), vs)
			}
		}
		if got.Get("x-api-key") != p.key || got.Get("anthropic-version") != c.AnthropicVersion {
			t.Fatalf("key or version not sent")
		}
	})
}
