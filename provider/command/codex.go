package command

import (
	"encoding/json"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/jsonx"
	"github.com/belayhq/belay/provider"
)

// codexDecoder reads codex exec --json:
//
//   - item.completed agent_message: answer text; reasoning: reasoning text.
//   - command_execution, file_change, mcp_tool_call and web_search items
//     are tool calls: item.started is the intent, item.completed the
//     settlement (an item completed without a start reports both). Commands
//     and file changes are side-effecting, web searches are not, MCP tools
//     unless read-only. A failed item, or a command with a non-zero exit
//     code, is an error result; a declined one did not run
//     (permission_denied).
//   - turn.completed: usage and the turn end; turn.failed: the failure.
//   - a top-level error line is kept as the hint, it does not end the run.
//   - anything else (thread.started, todo lists, warnings) is ignored.
type codexDecoder struct {
	stream
	readOnly map[string]bool
	started  map[string]bool // tool items whose intent was reported
	texts    int             // agent messages so far: each is a whole message
}

type codexLine struct {
	Type  string     `json:"type"`
	Item  *codexItem `json:"item"`
	Usage *struct {
		Input  int `json:"input_tokens"`
		Output int `json:"output_tokens"`
	} `json:"usage"`
	Error   *codexError `json:"error"`
	Message string      `json:"message"`
}

type codexError struct {
	Message string `json:"message"`
}

type codexItem struct {
	ID               string          `json:"id"`
	Type             string          `json:"type"`
	Text             string          `json:"text"`
	Command          string          `json:"command"`
	AggregatedOutput string          `json:"aggregated_output"`
	ExitCode         *int            `json:"exit_code"`
	Status           string          `json:"status"`
	Server           string          `json:"server"`
	Tool             string          `json:"tool"`
	Arguments        json.RawMessage `json:"arguments"`
	Result           json.RawMessage `json:"result"`
	Error            *codexError     `json:"error"`
	Changes          json.RawMessage `json:"changes"`
	Query            string          `json:"query"`
}

func (d *codexDecoder) decode(line []byte) []provider.Event {
	var l codexLine
	if !decodeObject(line, &l) {
		return nil
	}
	switch l.Type {
	case "item.started":
		if l.Item != nil {
			if call := d.call(l.Item); call != nil && !d.started[call.ID] {
				d.started[call.ID] = true
				return []provider.Event{{Kind: provider.ToolCall, Call: call}}
			}
		}
	case "item.completed":
		if l.Item != nil {
			return d.completed(l.Item)
		}
	case "turn.completed":
		d.done = true
		var evs []provider.Event
		if u := l.Usage; u != nil {
			evs = append(evs, provider.Event{Kind: provider.Usage, Tokens: &provider.Tokens{Input: u.Input, Output: u.Output}})
		}
		return append(evs, provider.Event{Kind: provider.TurnEnd, StopReason: "end_turn"})
	case "turn.failed":
		msg := d.lastErr
		if l.Error != nil && l.Error.Message != "" {
			msg = l.Error.Message
		}
		if msg == "" {
			msg = "turn failed"
		}
		d.fail("", msg)
	case "error":
		if l.Message != "" {
			d.lastErr = l.Message
		}
	}
	return nil
}

// call returns the tool call an item stands for, or nil.
func (d *codexDecoder) call(it *codexItem) *provider.Call {
	if it.ID == "" {
		return nil
	}
	c := &provider.Call{ID: it.ID, Name: it.Type, SideEffect: true}
	switch it.Type {
	case "command_execution":
		c.Input = jsonx.Must(map[string]string{"command": it.Command})
	case "file_change":
		c.Input = jsonx.Must(map[string]json.RawMessage{"changes": it.Changes})
	case "mcp_tool_call":
		c.Name = it.Tool
		c.Input = it.Arguments
		c.SideEffect = !d.readOnly[it.Tool]
	case "web_search":
		c.Input = jsonx.Must(map[string]string{"query": it.Query})
		c.SideEffect = false
	default:
		return nil
	}
	return c
}

func (d *codexDecoder) completed(it *codexItem) []provider.Event {
	switch it.Type {
	case "agent_message":
		if it.Text != "" {
			return []provider.Event{{Kind: provider.TextDelta, Text: messageText(&d.texts, it.Text)}}
		}
		return nil
	case "reasoning":
		if it.Text != "" {
			return []provider.Event{{Kind: provider.ThinkingDelta, Text: it.Text}}
		}
		return nil
	}
	call := d.call(it)
	if call == nil {
		return nil
	}
	var evs []provider.Event
	if !d.started[call.ID] {
		d.started[call.ID] = true
		evs = append(evs, provider.Event{Kind: provider.ToolCall, Call: call})
	}
	res := &provider.Result{CallID: it.ID}
	switch it.Type {
	case "command_execution":
		res.Content = it.AggregatedOutput
		res.IsError = it.ExitCode != nil && *it.ExitCode != 0
	case "mcp_tool_call":
		res.Content = string(it.Result)
	case "file_change":
		res.Content = string(it.Changes)
	}
	switch it.Status {
	case "failed":
		res.IsError = true
	case "declined":
		res.IsError, res.Class = true, belay.ClassPermissionDenied
	}
	if it.Error != nil && it.Error.Message != "" {
		res.IsError = true
		res.Content = it.Error.Message
	}
	res.Content = truncate(res.Content, maxContent)
	return append(evs, provider.Event{Kind: provider.ToolResult, Result: res})
}
