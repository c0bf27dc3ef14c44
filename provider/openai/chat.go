package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/provider"
	"github.com/belayhq/belay/provider/internal/httpapi"
	"github.com/belayhq/belay/provider/internal/prompt"
	"github.com/belayhq/belay/provider/internal/sse"
)

// Chat Completions wire types (only the fields belay uses).

type chatRequest struct {
	Model           string          `json:"model"`
	Messages        []chatMessage   `json:"messages"`
	Stream          bool            `json:"stream"`
	StreamOptions   *streamOptions  `json:"stream_options,omitempty"`
	Temperature     *float64        `json:"temperature,omitempty"`
	TopP            *float64        `json:"top_p,omitempty"`
	MaxTokens       int             `json:"max_tokens,omitempty"`
	Stop            []string        `json:"stop,omitempty"`
	Tools           json.RawMessage `json:"tools,omitempty"`
	ToolChoice      json.RawMessage `json:"tool_choice,omitempty"`
	ReasoningEffort string          `json:"reasoning_effort,omitempty"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type chatMessage struct {
	Role       string         `json:"role"`
	Content    *string        `json:"content"`
	ToolCalls  []chatToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
}

type chatToolCall struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type chatChunk struct {
	ID      string          `json:"id"`
	Error   json.RawMessage `json:"error"`
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Content          *string        `json:"content"`
			ReasoningContent string         `json:"reasoning_content"`
			Reasoning        string         `json:"reasoning"`
			Refusal          string         `json:"refusal"`
			ToolCalls        []chatToolCall `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
}

func chatMessages(opts prompt.Options, msgs []prompt.Message) []chatMessage {
	var out []chatMessage
	str := func(s string) *string { return &s }
	if opts.System != "" {
		out = append(out, chatMessage{Role: "system", Content: str(opts.System)})
	}
	for _, m := range msgs {
		switch m.Role {
		case prompt.RoleTool:
			out = append(out, chatMessage{Role: "tool", ToolCallID: m.ToolCallID, Content: str(m.Text)})
		case prompt.RoleAssistant:
			cm := chatMessage{Role: "assistant"}
			if m.Text != "" || len(m.ToolCalls) == 0 {
				cm.Content = str(m.Text)
			}
			for _, c := range m.ToolCalls {
				tc := chatToolCall{ID: c.ID, Type: "function"}
				tc.Function.Name = c.Name
				tc.Function.Arguments = string(prompt.ToolInput(string(c.Input)))
				cm.ToolCalls = append(cm.ToolCalls, tc)
			}
			out = append(out, cm)
		default:
			out = append(out, chatMessage{Role: m.Role, Content: str(m.Text)})
		}
	}
	return out
}

func (p *Provider) runChat(ctx context.Context, req provider.Request, emit func(provider.Event) error) error {
	in, err := p.input(ctx, req, true)
	if err != nil {
		return err
	}
	body := chatRequest{
		Model:           in.model,
		Messages:        chatMessages(in.opts, in.msgs),
		Stream:          true,
		StreamOptions:   &streamOptions{IncludeUsage: true},
		Temperature:     in.opts.Temperature,
		TopP:            in.opts.TopP,
		MaxTokens:       in.opts.MaxTokens,
		Stop:            in.opts.Stop,
		Tools:           in.opts.Tools,
		ToolChoice:      in.opts.ToolChoice,
		ReasoningEffort: in.opts.ReasoningEffort,
	}
	resp, err := p.do(ctx, "chat completions", "POST", "/chat/completions", body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	s := &chatStream{p: p, req: req, emit: emit, calls: map[int]*callAcc{}}
	return s.read(ctx, resp.Body)
}

// callAcc assembles one tool call from its fragments.
type callAcc struct {
	id, name string
	args     strings.Builder
}

// chatStream reads one Chat Completions stream.
type chatStream struct {
	p      *Provider
	req    provider.Request
	emit   func(provider.Event) error
	calls  map[int]*callAcc
	ended  bool // the turn end was emitted
	chunks int
}

const chatWhat = "chat completions stream"

func (s *chatStream) read(ctx context.Context, body io.Reader) error {
	dec := sse.NewDecoder(body)
	for {
		ev, err := dec.Next()
		if err != nil {
			if s.ended && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)) {
				return nil // some servers close without [DONE]
			}
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			if errors.Is(err, sse.ErrLineTooLong) {
				return s.p.malformed(chatWhat, "", err)
			}
			return httpapi.NetworkError(ctx, s.p.name+": "+chatWhat+" ended before its finish_reason", err, s.p.scrub)
		}
		if ev.Comment {
			if err := s.emit(provider.Event{Kind: provider.Keepalive}); err != nil {
				return err
			}
			continue
		}
		data := strings.TrimSpace(ev.Data)
		if data == "[DONE]" {
			return s.finish("stop")
		}
		if data == "" {
			continue
		}
		if err := s.chunk(data); err != nil {
			return err
		}
	}
}

func (s *chatStream) chunk(data string) error {
	s.chunks++
	var c chatChunk
	if err := json.Unmarshal([]byte(data), &c); err != nil {
		return s.p.malformed(chatWhat, data, err)
	}
	if len(c.Error) > 0 && string(c.Error) != "null" {
		e := httpapi.ParseError([]byte(data))
		return httpapi.StreamError(s.p.name+": "+chatWhat, e.Type, e.Code, e.Message, s.p.scrub)
	}
	progressed := false
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			continue // belay asks for one choice
		}
		d := ch.Delta
		for _, t := range []struct {
			kind provider.EventKind
			text string
		}{
			{provider.ThinkingDelta, d.ReasoningContent},
			{provider.ThinkingDelta, d.Reasoning},
			{provider.TextDelta, deref(d.Content)},
			{provider.TextDelta, d.Refusal},
		} {
			if t.text == "" {
				continue
			}
			progressed = true
			if err := s.emit(provider.Event{Kind: t.kind, Text: t.text}); err != nil {
				return err
			}
		}
		for _, tc := range d.ToolCalls {
			s.addCall(tc)
		}
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			if err := s.finish(*ch.FinishReason); err != nil {
				return err
			}
			progressed = true
		}
	}
	if c.Usage != nil {
		return s.emit(provider.Event{Kind: provider.Usage, Tokens: &provider.Tokens{Input: c.Usage.PromptTokens, Output: c.Usage.CompletionTokens}})
	}
	if !progressed {
		// A role-only or empty chunk: the server is there.
		return s.emit(provider.Event{Kind: provider.Keepalive})
	}
	return nil
}

// addCall merges one tool call fragment. Fragments are keyed by index;
// a server that omits it gets one call per distinct id.
func (s *chatStream) addCall(tc chatToolCall) {
	idx := 0
	switch {
	case tc.Index != nil:
		idx = *tc.Index
	case tc.ID != "":
		idx = len(s.calls)
		for i, c := range s.calls {
			if c.id == tc.ID {
				idx = i
			}
		}
	default:
		idx = max(len(s.calls)-1, 0)
	}
	c := s.calls[idx]
	if c == nil {
		c = &callAcc{}
		s.calls[idx] = c
	}
	if tc.ID != "" && c.id == "" {
		c.id = tc.ID
	}
	if tc.Function.Name != "" && c.name == "" {
		c.name = tc.Function.Name
	}
	c.args.WriteString(tc.Function.Arguments)
}

// finish reports the assembled tool calls and the turn end, once.
func (s *chatStream) finish(reason string) error {
	if s.ended {
		return nil
	}
	s.ended = true
	idxs := make([]int, 0, len(s.calls))
	for i := range s.calls {
		idxs = append(idxs, i)
	}
	sort.Ints(idxs)
	for _, i := range idxs {
		c := s.calls[i]
		id := c.id
		if id == "" {
			id = fmt.Sprintf("call_%s_%d_%d", s.req.Run, s.req.Attempt, i)
		}
		if c.name == "" {
			return provider.Errorf(belay.ClassTransient, "%s: %s: tool call %s has no name", s.p.name, chatWhat, id)
		}
		call := &provider.Call{ID: id, Name: c.name, Input: prompt.ToolInput(c.args.String()), SideEffect: true}
		if err := s.emit(provider.Event{Kind: provider.ToolCall, Call: call}); err != nil {
			return err
		}
	}
	return s.emit(provider.Event{Kind: provider.TurnEnd, StopReason: reason})
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
