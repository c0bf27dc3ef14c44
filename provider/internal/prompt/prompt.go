// Package prompt builds what the HTTP providers send from a
// provider.Request: the provider options of the session and the run
// (temperature, max_tokens, system, tools, ...) and the conversation (the
// history a History function supplies, then the run's prompt as the user
// turn). The openai and anthropic packages re-export Message and History,
// so the transcript toolkit has one neutral message type to produce for
// both.
package prompt

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/belayhq/belay/provider"
)

// Options are the provider options a request carries. Unknown keys are
// ignored (a session's options may hold keys meant for other tools); a
// known key of the wrong type is an error.
type Options struct {
	Temperature *float64 `json:"temperature,omitempty"`
	TopP        *float64 `json:"top_p,omitempty"`
	// MaxTokens bounds the answer (max_tokens for Chat Completions and
	// Anthropic, max_output_tokens for the Responses API).
	MaxTokens int `json:"max_tokens,omitempty"`
	// System is the system prompt (instructions for the Responses API).
	System string `json:"system,omitempty"`
	// Stop sequences.
	Stop []string `json:"stop,omitempty"`
	// Tools and ToolChoice are passed through in the provider's own
	// format.
	Tools      json.RawMessage `json:"tools,omitempty"`
	ToolChoice json.RawMessage `json:"tool_choice,omitempty"`
	// ReasoningEffort is OpenAI's reasoning effort ("low", "medium",
	// "high").
	ReasoningEffort string `json:"reasoning_effort,omitempty"`
	// Thinking is Anthropic's extended thinking object, passed through
	// ({"type":"enabled","budget_tokens":2048}).
	Thinking json.RawMessage `json:"thinking,omitempty"`
}

// ParseOptions merges the session's options (req.Options) and the run's
// (the "options" field of req.Input), the run's winning key by key.
func ParseOptions(req provider.Request) (Options, error) {
	merged := map[string]json.RawMessage{}
	if err := mergeObject(merged, req.Options, "session options"); err != nil {
		return Options{}, err
	}
	if len(req.Input) > 0 {
		var in struct {
			Options json.RawMessage `json:"options"`
		}
		if json.Unmarshal(req.Input, &in) == nil {
			if err := mergeObject(merged, in.Options, "run options"); err != nil {
				return Options{}, err
			}
		}
	}
	var o Options
	if len(merged) == 0 {
		return o, nil
	}
	b, _ := json.Marshal(merged)
	if err := json.Unmarshal(b, &o); err != nil {
		return Options{}, fmt.Errorf("provider options: %v", err)
	}
	if o.MaxTokens < 0 {
		return Options{}, fmt.Errorf("provider options: max_tokens %d is negative", o.MaxTokens)
	}
	return o, nil
}

func mergeObject(dst map[string]json.RawMessage, raw json.RawMessage, what string) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return fmt.Errorf("%s must be a JSON object: %v", what, err)
	}
	for k, v := range m {
		if string(bytes.TrimSpace(v)) == "null" {
			delete(dst, k)
			continue
		}
		dst[k] = v
	}
	return nil
}

// Roles of a Message.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	// RoleTool carries a tool call's result back to the model.
	RoleTool = "tool"
)

// Message is one message of a conversation, in a form every HTTP provider
// can map to its wire format.
type Message struct {
	// Role is system, user, assistant or tool.
	Role string `json:"role"`
	// Text is the message text (for a tool message, the result content).
	Text string `json:"text,omitempty"`
	// Thinking is an assistant's reasoning text, kept for providers that
	// take it back; Signature is Anthropic's signature for it.
	Thinking  string `json:"thinking,omitempty"`
	Signature string `json:"signature,omitempty"`
	// ToolCalls are an assistant message's tool calls.
	ToolCalls []ToolCall `json:"toolCalls,omitempty"`
	// ToolCallID names the call a tool message answers.
	ToolCallID string `json:"toolCallId,omitempty"`
	// IsError marks a tool message that reports a failed call.
	IsError bool `json:"isError,omitempty"`
}

// ToolCall is a tool call inside an assistant message.
type ToolCall struct {
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input,omitempty"`
}

// History returns the session's conversation before the run's prompt,
// oldest first. The transcript toolkit provides one; a provider without
// one sends the prompt alone.
type History func(ctx context.Context, req provider.Request) ([]Message, error)

// Conversation returns the messages to send: the history (if h is set)
// then the prompt as a user message (if it is not empty).
func Conversation(ctx context.Context, h History, req provider.Request) ([]Message, error) {
	var msgs []Message
	if h != nil {
		hist, err := h(ctx, req)
		if err != nil {
			return nil, fmt.Errorf("session history: %w", err)
		}
		msgs = append(msgs, hist...)
	}
	if req.Prompt != "" {
		msgs = append(msgs, Message{Role: RoleUser, Text: req.Prompt})
	}
	if len(msgs) == 0 {
		return nil, fmt.Errorf("nothing to send: the prompt is empty")
	}
	return msgs, nil
}

// ToolInput returns a tool call's assembled arguments as JSON: "{}" when
// empty, the text itself when it is valid JSON, otherwise the text as a
// JSON string (models can produce invalid JSON; the journal must not hold
// it raw).
func ToolInput(args string) json.RawMessage {
	b := bytes.TrimSpace([]byte(args))
	if len(b) == 0 {
		return json.RawMessage(`{}`)
	}
	if json.Valid(b) {
		return json.RawMessage(b)
	}
	s, _ := json.Marshal(args)
	return s
}
