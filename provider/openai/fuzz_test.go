package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

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
