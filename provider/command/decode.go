package command

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/provider"
)

// A decoder turns an agent's output, one line at a time, into provider
// events. It must be a pure function of the lines it was given: a
// reattach rebuilds its state by decoding the output before the cursor
// again, discarding the events.
type decoder interface {
	// decode returns the events of one line, its newline included (the
	// last line of a finished agent may have none).
	decode(line []byte) []provider.Event
	// result reports whether the stream announced its end, and the
	// failure it announced, if any (an *provider.Error).
	result() (done bool, err error)
	// hint is the last error text the stream reported, used to classify
	// a failed exit.
	hint() string
}

// decoders make a decoder per format. readOnly holds the tools without
// side effects.
var decoders = map[string]func(readOnly map[string]bool) decoder{
	FormatClaude: func(ro map[string]bool) decoder { return &claudeDecoder{readOnly: ro} },
	FormatCodex:  func(ro map[string]bool) decoder { return &codexDecoder{readOnly: ro, started: map[string]bool{}} },
	FormatJSONL:  func(ro map[string]bool) decoder { return &jsonlDecoder{readOnly: ro} },
	FormatText:   func(map[string]bool) decoder { return &textDecoder{} },
}

// maxContent caps a tool result's content in the journal.
const maxContent = 64 << 10

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	// Cut on a rune boundary.
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…[truncated]"
}

// stream is the end-of-stream state every decoder keeps.
type stream struct {
	done    bool
	failure error
	lastErr string
}

func (s *stream) result() (bool, error) { return s.done, s.failure }
func (s *stream) hint() string          { return s.lastErr }

// fail records the failure the stream announced.
func (s *stream) fail(class belay.ErrorClass, msg string) {
	s.done = true
	s.lastErr = msg
	if class == "" {
		class = classify(msg)
	}
	if class == "" {
		class = belay.ClassTransient
	}
	s.failure = &provider.Error{Class: class, Message: "agent: " + truncate(msg, 500)}
}

// textDecoder: every line is answer text, newline included.
type textDecoder struct{ stream }

func (d *textDecoder) decode(line []byte) []provider.Event {
	return []provider.Event{{Kind: provider.TextDelta, Text: string(line)}}
}

// jsonlDecoder reads belay's generic JSONL (docs/providers.md):
//
//	{"type":"text","text":"..."}            answer text
//	{"type":"thinking","text":"..."}        reasoning text
//	{"type":"tool_call","id":"c1","name":"write_file","input":{...},"side_effect":true}
//	{"type":"tool_result","id":"c1","content":"...","is_error":false,"class":""}
//	{"type":"usage","input_tokens":12,"output_tokens":34}
//	{"type":"done","stop_reason":"end_turn"}   (or "result")
//	{"type":"error","message":"...","class":"rate_limited"}
//
// Unknown types, unknown fields and lines that are not JSON objects are
// ignored.
type jsonlDecoder struct {
	stream
	readOnly map[string]bool
}

type jsonlLine struct {
	Type       string           `json:"type"`
	Text       string           `json:"text"`
	ID         string           `json:"id"`
	Name       string           `json:"name"`
	Input      json.RawMessage  `json:"input"`
	SideEffect *bool            `json:"side_effect"`
	Content    string           `json:"content"`
	IsError    bool             `json:"is_error"`
	Class      belay.ErrorClass `json:"class"`
	In         int              `json:"input_tokens"`
	Out        int              `json:"output_tokens"`
	StopReason string           `json:"stop_reason"`
	Message    string           `json:"message"`
}

func (d *jsonlDecoder) decode(line []byte) []provider.Event {
	var l jsonlLine
	if !decodeObject(line, &l) {
		return nil
	}
	switch l.Type {
	case "text":
		if l.Text != "" {
			return []provider.Event{{Kind: provider.TextDelta, Text: l.Text}}
		}
	case "thinking":
		if l.Text != "" {
			return []provider.Event{{Kind: provider.ThinkingDelta, Text: l.Text}}
		}
	case "tool_call":
		if l.ID == "" {
			return nil
		}
		side := !d.readOnly[l.Name]
		if l.SideEffect != nil {
			side = *l.SideEffect
		}
		return []provider.Event{{Kind: provider.ToolCall, Call: &provider.Call{ID: l.ID, Name: l.Name, Input: l.Input, SideEffect: side}}}
	case "tool_result":
		if l.ID == "" {
			return nil
		}
		class := l.Class
		if !knownClass(class) {
			class = ""
		}
		return []provider.Event{{Kind: provider.ToolResult, Result: &provider.Result{CallID: l.ID, Content: truncate(l.Content, maxContent), IsError: l.IsError, Class: class}}}
	case "usage":
		return []provider.Event{{Kind: provider.Usage, Tokens: &provider.Tokens{Input: l.In, Output: l.Out}}}
	case "done", "result":
		d.done = true
		return []provider.Event{{Kind: provider.TurnEnd, StopReason: stopReason(l.StopReason)}}
	case "error":
		class := l.Class
		if !knownClass(class) {
			class = ""
		}
		d.fail(class, l.Message)
	}
	return nil
}

func stopReason(s string) string {
	if s == "" {
		return "end_turn"
	}
	return s
}

// decodeObject decodes a line that holds a JSON object; it reports false
// for anything else (log noise, a banner).
func decodeObject(line []byte, v any) bool {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' {
		return false
	}
	return json.Unmarshal(line, v) == nil
}

func knownClass(c belay.ErrorClass) bool {
	switch c {
	case belay.ClassAuth, belay.ClassChallenge, belay.ClassRateLimited, belay.ClassOverloaded,
		belay.ClassTransient, belay.ClassInvalidRequest, belay.ClassContextOverflow,
		belay.ClassPermissionDenied, belay.ClassTargetLost, belay.ClassUIDrift,
		belay.ClassCancelled, belay.ClassTimeout, belay.ClassInternal, belay.ClassQuota:
		return true
	}
	return false
}

// readOnlySet returns the tool names as a set.
func readOnlySet(names []string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[strings.TrimSpace(n)] = true
	}
	return m
}
