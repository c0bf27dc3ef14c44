package anthropic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/provider"
	"github.com/belayhq/belay/provider/internal/httpapi"
	"github.com/belayhq/belay/provider/internal/prompt"
	"github.com/belayhq/belay/provider/internal/sse"
)

// Provider is an Anthropic Messages API provider. It is safe for
// concurrent runs.
type Provider struct {
	name   string
	cfg    Config
	key    string
	scrub  *httpapi.Scrubber
	client *httpapi.Client
	now    func() time.Time
}

var _ provider.Provider = (*Provider)(nil)

// New validates cfg, loads the API key and returns the provider named
// name (the registry key, e.g. "anthropic" or "claude").
func New(name string, cfg Config) (*Provider, error) {
	if name == "" {
		name = "anthropic"
	}
	if err := cfg.validate(name); err != nil {
		return nil, err
	}
	key, _, err := httpapi.LoadKey(httpapi.KeySource{Env: cfg.APIKeyEnv, File: cfg.APIKeyFile, Inline: cfg.APIKey, DefaultEnv: DefaultAPIKeyEnv})
	if err != nil {
		return nil, fmt.Errorf("%w: provider %q: %v", ErrConfig, name, err)
	}
	cfg.APIKey = ""
	return &Provider{
		name:  name,
		cfg:   cfg,
		key:   key,
		scrub: httpapi.NewScrubber(key),
		client: httpapi.NewClient(httpapi.Timeouts{
			Connect: cfg.ConnectTimeout, FirstByte: cfg.FirstByteTimeout, Idle: cfg.IdleTimeout,
		}),
		now: time.Now,
	}, nil
}

// Name returns the provider's name.
func (p *Provider) Name() string { return p.name }

// Capabilities: Tools only; a message stream cannot be resumed.
func (p *Provider) Capabilities() provider.Capabilities {
	return provider.Capabilities{Tools: true}
}

// Close closes idle connections. The provider stays usable.
func (p *Provider) Close() error {
	p.client.CloseIdleConnections()
	return nil
}

// Wire types.

type messagesRequest struct {
	Model         string          `json:"model"`
	MaxTokens     int             `json:"max_tokens"`
	System        string          `json:"system,omitempty"`
	Messages      []wireMessage   `json:"messages"`
	Stream        bool            `json:"stream"`
	Temperature   *float64        `json:"temperature,omitempty"`
	TopP          *float64        `json:"top_p,omitempty"`
	StopSequences []string        `json:"stop_sequences,omitempty"`
	Tools         json.RawMessage `json:"tools,omitempty"`
	ToolChoice    json.RawMessage `json:"tool_choice,omitempty"`
	Thinking      json.RawMessage `json:"thinking,omitempty"`
}

type wireMessage struct {
	Role    string  `json:"role"`
	Content []block `json:"content"`
}

type block struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	Thinking  string          `json:"thinking,omitempty"`
	Signature string          `json:"signature,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   string          `json:"content,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
}

// wireMessages maps the neutral messages: tool results go into a user
// message (first, before any text), consecutive messages of one role are
// merged, and system messages join the system prompt.
func wireMessages(system string, msgs []prompt.Message) (string, []wireMessage) {
	var out []wireMessage
	add := func(role string, b ...block) {
		if len(b) == 0 {
			return
		}
		if n := len(out); n > 0 && out[n-1].Role == role {
			if role == "user" && b[0].Type == "tool_result" {
				// Results come first in the user message.
				out[n-1].Content = append(b, out[n-1].Content...)
				return
			}
			out[n-1].Content = append(out[n-1].Content, b...)
			return
		}
		out = append(out, wireMessage{Role: role, Content: b})
	}
	for _, m := range msgs {
		switch m.Role {
		case prompt.RoleSystem:
			if system != "" {
				system += "\n\n"
			}
			system += m.Text
		case prompt.RoleTool:
			add("user", block{Type: "tool_result", ToolUseID: m.ToolCallID, Content: m.Text, IsError: m.IsError})
		case prompt.RoleAssistant:
			var bs []block
			if m.Thinking != "" && m.Signature != "" {
				bs = append(bs, block{Type: "thinking", Thinking: m.Thinking, Signature: m.Signature})
			}
			if m.Text != "" {
				bs = append(bs, block{Type: "text", Text: m.Text})
			}
			for _, c := range m.ToolCalls {
				bs = append(bs, block{Type: "tool_use", ID: c.ID, Name: c.Name, Input: prompt.ToolInput(string(c.Input))})
			}
			add("assistant", bs...)
		default:
			if m.Text != "" {
				add("user", block{Type: "text", Text: m.Text})
			}
		}
	}
	return system, out
}

// Run streams one message.
func (p *Provider) Run(ctx context.Context, req provider.Request, emit func(provider.Event) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if req.Resume {
		return provider.Errorf(belay.ClassInvalidRequest, "%s: the Messages API cannot resume a run", p.name)
	}
	model := req.Model
	if model == "" {
		model = p.cfg.Model
	}
	if model == "" {
		return provider.Errorf(belay.ClassInvalidRequest, "%s: no model: set model in [providers.%s] or give the run one", p.name, p.name)
	}
	opts, err := prompt.ParseOptions(req)
	if err != nil {
		return provider.Errorf(belay.ClassInvalidRequest, "%s: %v", p.name, err)
	}
	msgs, err := prompt.Conversation(ctx, p.cfg.History, req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &provider.Error{Class: belay.ClassInvalidRequest, Message: p.scrub.String(p.name + ": " + err.Error())}
	}
	system, wire := wireMessages(opts.System, msgs)
	body := messagesRequest{
		Model: model, MaxTokens: p.cfg.MaxTokens, System: system, Messages: wire, Stream: true,
		Temperature: opts.Temperature, TopP: opts.TopP, StopSequences: opts.Stop,
		Tools: opts.Tools, ToolChoice: opts.ToolChoice, Thinking: opts.Thinking,
	}
	if opts.MaxTokens > 0 {
		body.MaxTokens = opts.MaxTokens
	}
	b, err := json.Marshal(body)
	if err != nil {
		return provider.Errorf(belay.ClassInvalidRequest, "%s: encode request: %v", p.name, err)
	}
	r, err := http.NewRequestWithContext(ctx, "POST", p.cfg.BaseURL+"/messages", bytes.NewReader(b))
	if err != nil {
		return provider.Errorf(belay.ClassInvalidRequest, "%s: %s", p.name, p.scrub.String(err.Error()))
	}
	for k, v := range p.cfg.Headers {
		r.Header.Set(k, v)
	}
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Accept", "text/event-stream")
	r.Header.Set("User-Agent", "belay")
	r.Header.Set("anthropic-version", p.cfg.AnthropicVersion)
	r.Header.Set("x-api-key", p.key)
	resp, err := p.client.Do(ctx, r)
	if err != nil {
		return httpapi.NetworkError(ctx, p.name+": messages", err, p.scrub)
	}
	if resp.StatusCode/100 != 2 {
		return httpapi.FromResponse(resp, p.name+": messages", p.scrub, p.now())
	}
	defer resp.Body.Close()
	s := &stream{p: p, emit: emit, blocks: map[int]*toolBlock{}}
	return s.read(ctx, resp.Body)
}

// Stream event payloads.
type streamEvent struct {
	Type    string `json:"type"`
	Message *struct {
		ID    string `json:"id"`
		Usage *usage `json:"usage"`
	} `json:"message"`
	Index        int `json:"index"`
	ContentBlock *struct {
		Type string `json:"type"`
		ID   string `json:"id"`
		Name string `json:"name"`
		Text string `json:"text"`
	} `json:"content_block"`
	Delta *struct {
		Type        string  `json:"type"`
		Text        string  `json:"text"`
		Thinking    string  `json:"thinking"`
		PartialJSON string  `json:"partial_json"`
		StopReason  *string `json:"stop_reason"`
	} `json:"delta"`
	Usage *usage            `json:"usage"`
	Error *httpapi.APIError `json:"error"`
}

type usage struct {
	InputTokens              *int `json:"input_tokens"`
	OutputTokens             *int `json:"output_tokens"`
	CacheCreationInputTokens int  `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int  `json:"cache_read_input_tokens"`
}

type toolBlock struct {
	id, name string
	json     strings.Builder
}

// stream reads one Messages stream.
type stream struct {
	p          *Provider
	emit       func(provider.Event) error
	blocks     map[int]*toolBlock
	input      int
	output     int
	stopReason string
}

const what = "messages stream"

func (s *stream) read(ctx context.Context, body io.Reader) error {
	dec := sse.NewDecoder(body)
	for {
		ev, err := dec.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			if errors.Is(err, sse.ErrLineTooLong) {
				return s.malformed(0, err)
			}
			return httpapi.NetworkError(ctx, s.p.name+": "+what+" ended before message_stop", err, s.p.scrub)
		}
		if ev.Comment {
			if err := s.emit(provider.Event{Kind: provider.Keepalive}); err != nil {
				return err
			}
			continue
		}
		data := strings.TrimSpace(ev.Data)
		if data == "" {
			continue
		}
		var e streamEvent
		if err := json.Unmarshal([]byte(data), &e); err != nil {
			return s.malformed(len(data), err)
		}
		if e.Type == "" {
			e.Type = ev.Type
		}
		done, err := s.apply(&e)
		if err != nil || done {
			return err
		}
	}
}

// malformed: a chunk that does not parse is transient (see
// docs/providers.md); its content is not quoted.
func (s *stream) malformed(n int, err error) error {
	return &provider.Error{Class: belay.ClassTransient, Message: s.p.scrub.String(fmt.Sprintf("%s: %s: malformed chunk (%d bytes): %v", s.p.name, what, n, err))}
}

// apply handles one event; it reports true after message_stop.
func (s *stream) apply(e *streamEvent) (bool, error) {
	switch e.Type {
	case "ping":
		return false, s.emit(provider.Event{Kind: provider.Keepalive})
	case "message_start":
		if e.Message != nil && e.Message.Usage != nil {
			s.addUsage(e.Message.Usage)
		}
		return false, s.emit(provider.Event{Kind: provider.Keepalive})
	case "content_block_start":
		if e.ContentBlock == nil {
			return false, nil
		}
		switch e.ContentBlock.Type {
		case "tool_use":
			s.blocks[e.Index] = &toolBlock{id: e.ContentBlock.ID, name: e.ContentBlock.Name}
		case "text":
			if e.ContentBlock.Text != "" {
				return false, s.emit(provider.Event{Kind: provider.TextDelta, Text: e.ContentBlock.Text})
			}
		}
	case "content_block_delta":
		if e.Delta == nil {
			return false, nil
		}
		switch e.Delta.Type {
		case "text_delta":
			if e.Delta.Text != "" {
				return false, s.emit(provider.Event{Kind: provider.TextDelta, Text: e.Delta.Text})
			}
		case "thinking_delta":
			if e.Delta.Thinking != "" {
				return false, s.emit(provider.Event{Kind: provider.ThinkingDelta, Text: e.Delta.Thinking})
			}
		case "input_json_delta":
			if b := s.blocks[e.Index]; b != nil {
				b.json.WriteString(e.Delta.PartialJSON)
			}
		}
	case "content_block_stop":
		b := s.blocks[e.Index]
		if b == nil {
			return false, nil
		}
		delete(s.blocks, e.Index)
		if b.id == "" || b.name == "" {
			// Neither can be answered or replayed: the stream is malformed.
			return false, provider.Errorf(belay.ClassTransient, "%s: %s: a tool_use block without an id or a name", s.p.name, what)
		}
		call := &provider.Call{ID: b.id, Name: b.name, Input: prompt.ToolInput(b.json.String()), SideEffect: true}
		return false, s.emit(provider.Event{Kind: provider.ToolCall, Call: call})
	case "message_delta":
		if e.Delta != nil && e.Delta.StopReason != nil {
			s.stopReason = *e.Delta.StopReason
		}
		if e.Usage != nil {
			s.addUsage(e.Usage)
			return false, s.emit(provider.Event{Kind: provider.Usage, Tokens: &provider.Tokens{Input: s.input, Output: s.output}})
		}
	case "message_stop":
		reason := s.stopReason
		if reason == "" {
			reason = "end_turn"
		}
		return true, s.emit(provider.Event{Kind: provider.TurnEnd, StopReason: reason})
	case "error":
		var typ, msg string
		if e.Error != nil {
			typ, msg = e.Error.Type, e.Error.Message
		}
		return false, httpapi.StreamError(s.p.name+": "+what, typ, "", msg, s.p.scrub)
	}
	return false, nil
}

// addUsage folds a usage object in; its counts are cumulative.
func (s *stream) addUsage(u *usage) {
	if u.InputTokens != nil {
		s.input = *u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens
	}
	if u.OutputTokens != nil {
		s.output = *u.OutputTokens
	}
}

var _ provider.Validator = (*Provider)(nil)

// Validate checks that a run has a model and that its options decode.
func (p *Provider) Validate(req provider.Request) error {
	if req.Model == "" && p.cfg.Model == "" {
		return &provider.FieldError{Field: "model", Err: fmt.Errorf("%s has no default model: give one with --model or set model in [providers.%s]", p.name, p.name)}
	}
	if _, err := prompt.ParseOptions(req); err != nil {
		return &provider.FieldError{Field: "options", Err: err}
	}
	return nil
}
