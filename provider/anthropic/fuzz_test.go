package anthropic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

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
