package command

import (
	"encoding/json"
	"strings"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/provider"
)

// claudeDecoder reads claude -p --output-format stream-json --verbose:
//
//   - assistant: text blocks are answer text, thinking blocks reasoning,
//     tool_use blocks tool calls (side-effecting unless read-only). Text of
//     subagents (parent_tool_use_id set) is not the answer and is dropped;
//     their tool calls are reported.
//   - user: tool_result blocks settle the calls.
//   - system/api_retry: a keepalive (the CLI is waiting, not hung); its
//     error category is kept to classify a failed exit.
//   - result: usage and the turn end; an error subtype or is_error is the
//     run's failure, classified by api_error_status, then the error text.
//   - anything else (system/init, stream_event, hooks, ...) is ignored.
type claudeDecoder struct {
	stream
	readOnly map[string]bool
	texts    int // answer text blocks so far: each is a whole message
}

type claudeLine struct {
	Type    string `json:"type"`
	Subtype string `json:"subtype"`
	Message struct {
		Content json.RawMessage `json:"content"`
	} `json:"message"`
	Parent *string `json:"parent_tool_use_id"`
	// result
	IsError        bool            `json:"is_error"`
	Result         string          `json:"result"`
	Errors         json.RawMessage `json:"errors"`
	APIErrorStatus int             `json:"api_error_status"`
	StopReason     string          `json:"stop_reason"`
	Usage          *struct {
		Input       int `json:"input_tokens"`
		CacheCreate int `json:"cache_creation_input_tokens"`
		CacheRead   int `json:"cache_read_input_tokens"`
		Output      int `json:"output_tokens"`
	} `json:"usage"`
	// system/api_retry
	Error       string `json:"error"`
	ErrorStatus int    `json:"error_status"`
}

type claudeBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	Thinking  string          `json:"thinking"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

func (d *claudeDecoder) decode(line []byte) []provider.Event {
	var l claudeLine
	if !decodeObject(line, &l) {
		return nil
	}
	switch l.Type {
	case "assistant", "user":
		return d.message(l)
	case "system":
		if l.Subtype == "api_retry" {
			if l.Error != "" {
				d.lastErr = l.Error
			}
			return []provider.Event{{Kind: provider.Keepalive}}
		}
	case "result":
		return d.resultLine(l)
	}
	return nil
}

func (d *claudeDecoder) message(l claudeLine) []provider.Event {
	var blocks []claudeBlock
	if json.Unmarshal(l.Message.Content, &blocks) != nil {
		// A string content is a user's own text: not an event.
		return nil
	}
	sub := l.Parent != nil && *l.Parent != ""
	var evs []provider.Event
	for _, b := range blocks {
		switch b.Type {
		case "text":
			if l.Type == "assistant" && !sub && b.Text != "" {
				evs = append(evs, provider.Event{Kind: provider.TextDelta, Text: messageText(&d.texts, b.Text)})
			}
		case "thinking":
			if l.Type == "assistant" && !sub && b.Thinking != "" {
				evs = append(evs, provider.Event{Kind: provider.ThinkingDelta, Text: b.Thinking})
			}
		case "tool_use", "server_tool_use":
			if b.ID != "" {
				evs = append(evs, provider.Event{Kind: provider.ToolCall, Call: &provider.Call{
					ID: b.ID, Name: b.Name, Input: b.Input, SideEffect: !d.readOnly[b.Name],
				}})
			}
		case "tool_result":
			if b.ToolUseID != "" {
				evs = append(evs, provider.Event{Kind: provider.ToolResult, Result: &provider.Result{
					CallID: b.ToolUseID, Content: truncate(contentText(b.Content), maxContent), IsError: b.IsError,
				}})
			}
		}
	}
	return evs
}

func (d *claudeDecoder) resultLine(l claudeLine) []provider.Event {
	var evs []provider.Event
	if u := l.Usage; u != nil {
		evs = append(evs, provider.Event{Kind: provider.Usage, Tokens: &provider.Tokens{
			Input: u.Input + u.CacheCreate + u.CacheRead, Output: u.Output,
		}})
	}
	if !l.IsError && !strings.HasPrefix(l.Subtype, "error") {
		d.done = true
		return append(evs, provider.Event{Kind: provider.TurnEnd, StopReason: stopReason(l.StopReason)})
	}
	msg := l.Result
	var errs []string
	if json.Unmarshal(l.Errors, &errs) == nil && len(errs) > 0 {
		msg = strings.Join(errs, "; ")
	}
	if msg == "" {
		msg = l.Subtype
	}
	if d.lastErr != "" && msg == l.Subtype {
		msg += ": " + d.lastErr
	}
	class := statusClass(l.APIErrorStatus)
	if class == "" {
		class = classify(msg)
	}
	if class == "" {
		switch l.Subtype {
		case "error_max_turns", "error_max_budget_usd", "error_max_structured_output_retries":
			// A limit of the request: running it again hits it again.
			class = belay.ClassInvalidRequest
		}
	}
	d.fail(class, msg)
	return evs
}

// contentText flattens a tool result's content: a string, or a list of
// blocks whose text parts are joined.
func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &blocks) != nil {
		return string(raw)
	}
	var b strings.Builder
	for _, bl := range blocks {
		if bl.Text != "" {
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(bl.Text)
		}
	}
	return b.String()
}

// messageText returns a whole message's text as answer text: after the
// first, each is set apart by a blank line, so that the answer of a run
// that spoke several times does not run them together.
func messageText(n *int, text string) string {
	*n++
	if *n > 1 {
		return "\n\n" + text
	}
	return text
}
