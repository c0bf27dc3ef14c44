package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/provider"
	"github.com/belayhq/belay/provider/internal/httpapi"
	"github.com/belayhq/belay/provider/internal/prompt"
	"github.com/belayhq/belay/provider/internal/sse"
)

// Responses API wire types (only the fields belay uses).

type responsesRequest struct {
	Model           string          `json:"model"`
	Input           []any           `json:"input"`
	Instructions    string          `json:"instructions,omitempty"`
	Background      bool            `json:"background"`
	Stream          bool            `json:"stream"`
	Store           bool            `json:"store"`
	Temperature     *float64        `json:"temperature,omitempty"`
	TopP            *float64        `json:"top_p,omitempty"`
	MaxOutputTokens int             `json:"max_output_tokens,omitempty"`
	Tools           json.RawMessage `json:"tools,omitempty"`
	ToolChoice      json.RawMessage `json:"tool_choice,omitempty"`
	Reasoning       *reasoning      `json:"reasoning,omitempty"`
}

type reasoning struct {
	Effort string `json:"effort,omitempty"`
}

type respEvent struct {
	Type      string    `json:"type"`
	Seq       *int64    `json:"sequence_number"`
	Response  *respObj  `json:"response"`
	Item      *respItem `json:"item"`
	ItemID    string    `json:"item_id"`
	Delta     any       `json:"delta"`
	Arguments string    `json:"arguments"`
	Code      string    `json:"code"`
	Message   string    `json:"message"`
}

type respObj struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Error  *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	IncompleteDetails *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
	Output []respItem `json:"output"`
	Usage  *struct {
		InputTokens  int `json:"input_tokens"`
		OutputTokens int `json:"output_tokens"`
	} `json:"usage"`
}

type respItem struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Content   []struct {
		Type    string `json:"type"`
		Text    string `json:"text"`
		Refusal string `json:"refusal"`
	} `json:"content"`
}

// Response statuses.
const (
	statusQueued     = "queued"
	statusInProgress = "in_progress"
	statusCompleted  = "completed"
	statusFailed     = "failed"
	statusCancelled  = "cancelled"
	statusIncomplete = "incomplete"
)

func responsesInput(msgs []prompt.Message) []any {
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	type call struct {
		Type      string `json:"type"`
		CallID    string `json:"call_id"`
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}
	type output struct {
		Type   string `json:"type"`
		CallID string `json:"call_id"`
		Output string `json:"output"`
	}
	var out []any
	for _, m := range msgs {
		switch m.Role {
		case prompt.RoleTool:
			out = append(out, output{Type: "function_call_output", CallID: m.ToolCallID, Output: m.Text})
		case prompt.RoleAssistant:
			if m.Text != "" {
				out = append(out, msg{Role: "assistant", Content: m.Text})
			}
			for _, c := range m.ToolCalls {
				out = append(out, call{Type: "function_call", CallID: c.ID, Name: c.Name, Arguments: string(prompt.ToolInput(string(c.Input)))})
			}
		default:
			out = append(out, msg{Role: m.Role, Content: m.Text})
		}
	}
	return out
}

// respState is what one Run knows of its background response; it
// survives reconnects within the Run.
type respState struct {
	id       string
	cursor   int64 // last applied sequence_number; -1: none
	sinceRef int   // events applied since the last cursor report
	refSent  bool
	// text[item] counts the bytes of answer text emitted per output item,
	// so that a poll after a broken stream emits only the rest.
	text map[string]int
	// calls are function calls being assembled, by item id.
	calls map[string]*respCall
	// reported holds the call ids already reported.
	reported map[string]bool
	done     bool
}

type respCall struct {
	callID, name string
	args         strings.Builder
}

func newRespState() *respState {
	return &respState{cursor: -1, text: map[string]int{}, calls: map[string]*respCall{}, reported: map[string]bool{}}
}

const respWhat = "responses stream"

// streamBroke is a stream that ended early or failed to open, such that
// resuming it (or polling) may succeed.
type streamBroke struct{ err error }

func (e *streamBroke) Error() string { return e.err.Error() }
func (e *streamBroke) Unwrap() error { return e.err }

// pollNow is a stream that reported an error event: the response's status
// decides what happened.
var errPollNow = errors.New("the stream reported an error")

func (p *Provider) runResponses(ctx context.Context, req provider.Request, emit func(provider.Event) error) (err error) {
	st := newRespState()
	defer func() {
		if ctx.Err() != nil && st.id != "" && !st.done {
			p.cancelRemote(ctx, st.id)
		}
	}()
	if req.Resume {
		if req.Ref.Kind != RefKind || req.Ref.ID == "" {
			return provider.Errorf(belay.ClassTargetLost, "%s: cannot resume: the run's ref is not an OpenAI background response (kind %q)", p.name, req.Ref.Kind)
		}
		st.id = req.Ref.ID
		st.refSent = true
		if req.Ref.Cursor != "" {
			n, err := strconv.ParseInt(req.Ref.Cursor, 10, 64)
			if err != nil || n < 0 {
				return provider.Errorf(belay.ClassInvalidRequest, "%s: cannot resume: cursor %q is not a sequence number", p.name, req.Ref.Cursor)
			}
			st.cursor = n
		}
		return p.reattach(ctx, st, emit)
	}
	in, err := p.input(ctx, req, true)
	if err != nil {
		return err
	}
	body := responsesRequest{
		Model:           in.model,
		Input:           responsesInput(in.msgs),
		Instructions:    in.opts.System,
		Background:      true,
		Stream:          true,
		Store:           true,
		Temperature:     in.opts.Temperature,
		TopP:            in.opts.TopP,
		MaxOutputTokens: in.opts.MaxTokens,
		Tools:           in.opts.Tools,
		ToolChoice:      in.opts.ToolChoice,
	}
	if in.opts.ReasoningEffort != "" {
		body.Reasoning = &reasoning{Effort: in.opts.ReasoningEffort}
	}
	resp, err := p.do(ctx, "create response", "POST", "/responses", body)
	if err != nil {
		return err
	}
	err = p.stream(ctx, st, resp, emit)
	var broke *streamBroke
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case st.id == "":
		// Nothing to resume: the response was never named.
		if errors.As(err, &broke) {
			return broke.err
		}
		return err
	case errors.Is(err, errPollNow):
		return p.poll(ctx, st, emit)
	case errors.As(err, &broke):
		return p.reattach(ctx, st, emit)
	}
	return err
}

// reattach resumes the stream from the cursor, a few times, then polls.
func (p *Provider) reattach(ctx context.Context, st *respState, emit func(provider.Event) error) error {
	for i := 0; i < p.cfg.StreamRetries; i++ {
		if i > 0 {
			if err := sleep(ctx, time.Duration(250<<i)*time.Millisecond); err != nil {
				return err
			}
		}
		q := url.Values{"stream": {"true"}}
		if st.cursor >= 0 {
			q.Set("starting_after", strconv.FormatInt(st.cursor, 10))
		}
		resp, err := p.do(ctx, "resume response stream", "GET", "/responses/"+url.PathEscape(st.id)+"?"+q.Encode(), nil)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			class := provider.ClassOf(err)
			if class == belay.ClassAuth {
				return err
			}
			if class.Retryable() {
				continue
			}
			// The server will not stream it (gone, too old, or not created
			// with stream=true): polling decides.
			break
		}
		err = p.stream(ctx, st, resp, emit)
		var broke *streamBroke
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, errPollNow):
			return p.poll(ctx, st, emit)
		case errors.As(err, &broke):
			continue
		}
		return err // the response failed, or emit refused an event
	}
	return p.poll(ctx, st, emit)
}

// maxPollFailures bounds consecutive failed polls.
const maxPollFailures = 5

// poll reads the response until it is terminal, then emits what the
// stream did not.
func (p *Provider) poll(ctx context.Context, st *respState, emit func(provider.Event) error) error {
	failures := 0
	for {
		r, err := p.getResponse(ctx, st.id)
		if err != nil {
			var pe *provider.Error
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.As(err, &pe) && !pe.Class.Retryable() {
				return err
			}
			if failures++; failures >= maxPollFailures {
				return err
			}
			if err := sleep(ctx, max(p.cfg.PollInterval, provider.RetryAfterOf(err))); err != nil {
				return err
			}
			continue
		}
		failures = 0
		switch r.Status {
		case statusQueued, statusInProgress, "":
			if err := emit(provider.Event{Kind: provider.Keepalive}); err != nil {
				return err
			}
			if err := sleep(ctx, p.cfg.PollInterval); err != nil {
				return err
			}
			continue
		}
		return p.finishFromResponse(st, r, emit)
	}
}

func (p *Provider) getResponse(ctx context.Context, id string) (*respObj, error) {
	const what = "poll response"
	resp, err := p.send(ctx, what, "GET", "/responses/"+url.PathEscape(id), nil)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusNotFound {
		_ = resp.Body.Close()
		return nil, &provider.Error{Class: belay.ClassTargetLost, Message: p.scrub.String(fmt.Sprintf(
			"%s: response %s is gone (HTTP 404); background responses are kept only minutes after they end", p.name, id))}
	}
	if resp.StatusCode/100 != 2 {
		return nil, httpapi.FromResponse(resp, p.name+": "+what, p.scrub, p.now())
	}
	defer resp.Body.Close()
	var r respObj
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&r); err != nil {
		return nil, httpapi.NetworkError(ctx, p.name+": "+what, err, p.scrub)
	}
	return &r, nil
}

// finishFromResponse ends the run from a terminal response object: it
// emits the answer text and tool calls the stream did not deliver, usage
// and the turn end, or returns the failure.
func (p *Provider) finishFromResponse(st *respState, r *respObj, emit func(provider.Event) error) error {
	if err := p.terminal(r); err != nil {
		st.done = true
		return err
	}
	for _, item := range r.Output {
		switch item.Type {
		case "message":
			var text strings.Builder
			for _, c := range item.Content {
				text.WriteString(c.Text)
				text.WriteString(c.Refusal)
			}
			if rest := text.String(); len(rest) > st.text[item.ID] {
				if err := emit(provider.Event{Kind: provider.TextDelta, Text: rest[st.text[item.ID]:]}); err != nil {
					return err
				}
				st.text[item.ID] = len(rest)
			}
		case "function_call":
			if err := p.reportCall(st, item.CallID, item.Name, item.Arguments, emit); err != nil {
				return err
			}
		}
	}
	return p.endTurn(st, r, emit)
}

// terminal returns the error of a failed or cancelled response, nil
// otherwise.
func (p *Provider) terminal(r *respObj) error {
	switch r.Status {
	case statusFailed:
		code, msg := "", "the response failed"
		if r.Error != nil {
			code, msg = r.Error.Code, r.Error.Message
		}
		return httpapi.StreamError(p.name+": response "+r.ID+" failed", "", code, msg, p.scrub)
	case statusCancelled:
		return provider.Errorf(belay.ClassCancelled, "%s: response %s was cancelled on the server", p.name, r.ID)
	}
	return nil
}

func (p *Provider) endTurn(st *respState, r *respObj, emit func(provider.Event) error) error {
	st.done = true
	if r.Usage != nil {
		if err := emit(provider.Event{Kind: provider.Usage, Tokens: &provider.Tokens{Input: r.Usage.InputTokens, Output: r.Usage.OutputTokens}}); err != nil {
			return err
		}
	}
	reason := "stop"
	switch {
	case r.Status == statusIncomplete:
		reason = "incomplete"
		if r.IncompleteDetails != nil && r.IncompleteDetails.Reason != "" {
			reason = r.IncompleteDetails.Reason
		}
	case len(st.reported) > 0:
		reason = "tool_calls"
	}
	return emit(provider.Event{Kind: provider.TurnEnd, StopReason: reason})
}

func (p *Provider) reportCall(st *respState, callID, name, args string, emit func(provider.Event) error) error {
	if callID == "" || name == "" {
		// Neither can be answered or replayed: the response is malformed.
		return provider.Errorf(belay.ClassTransient, "%s: %s: a function call without a call_id or a name", p.name, respWhat)
	}
	if st.reported[callID] {
		return nil
	}
	st.reported[callID] = true
	return emit(provider.Event{Kind: provider.ToolCall, Call: &provider.Call{ID: callID, Name: name, Input: prompt.ToolInput(args), SideEffect: true}})
}

// stream applies one SSE body's events. It returns nil after a terminal
// event, a *streamBroke when the body ended or failed early, errPollNow
// after an error event, or the failure the stream reported.
func (p *Provider) stream(ctx context.Context, st *respState, resp *http.Response, emit func(provider.Event) error) error {
	defer resp.Body.Close()
	dec := sse.NewDecoder(resp.Body)
	for {
		ev, err := dec.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			if errors.Is(err, sse.ErrLineTooLong) {
				return &streamBroke{p.malformed(respWhat, "", err)}
			}
			return &streamBroke{httpapi.NetworkError(ctx, p.name+": "+respWhat+" ended before a terminal event", err, p.scrub)}
		}
		if ev.Comment {
			if err := emit(provider.Event{Kind: provider.Keepalive}); err != nil {
				return err
			}
			continue
		}
		data := strings.TrimSpace(ev.Data)
		if data == "" || data == "[DONE]" {
			continue // [DONE] is optional and never before a terminal event
		}
		var e respEvent
		if err := json.Unmarshal([]byte(data), &e); err != nil {
			return &streamBroke{p.malformed(respWhat, data, err)}
		}
		if e.Seq != nil && *e.Seq <= st.cursor {
			continue // applied before the reconnect
		}
		if terminalEvent(e.Type) {
			// The cursor goes first, so the turn end is the last event.
			if e.Response != nil && st.id == "" {
				st.id = e.Response.ID
			}
			p.advance(st, &e)
			if err := p.reportCursor(st, emit); err != nil {
				return err
			}
			return p.apply(st, &e, emit)
		}
		if err := p.apply(st, &e, emit); err != nil {
			return err
		}
		p.advance(st, &e)
		if err := p.reportCursor(st, emit); err != nil {
			return err
		}
	}
}

func terminalEvent(typ string) bool {
	switch typ {
	case "response.completed", "response.incomplete", "response.failed", "response.cancelled", "response.done":
		return true
	}
	return false
}

func (p *Provider) advance(st *respState, e *respEvent) {
	if e.Seq != nil {
		st.cursor = *e.Seq
		st.sinceRef++
	}
}

// reportCursor emits the response id and cursor as a ref update every
// CursorEvery events (and at once for the first).
func (p *Provider) reportCursor(st *respState, emit func(provider.Event) error) error {
	if st.id == "" || st.cursor < 0 || st.sinceRef == 0 {
		return nil
	}
	if st.refSent && st.sinceRef < p.cfg.CursorEvery {
		return nil
	}
	st.refSent, st.sinceRef = true, 0
	return emit(provider.Event{Kind: provider.RefUpdate, Ref: &belay.ConversationRef{Kind: RefKind, ID: st.id, Cursor: strconv.FormatInt(st.cursor, 10)}})
}

// apply handles one stream event.
func (p *Provider) apply(st *respState, e *respEvent, emit func(provider.Event) error) error {
	if e.Response != nil && e.Response.ID != "" && st.id == "" {
		st.id = e.Response.ID
	}
	delta, _ := e.Delta.(string)
	switch e.Type {
	case "response.output_text.delta", "response.refusal.delta":
		if delta == "" {
			return nil
		}
		st.text[e.ItemID] += len(delta)
		return emit(provider.Event{Kind: provider.TextDelta, Text: delta})
	case "response.reasoning_summary_text.delta", "response.reasoning_text.delta":
		if delta == "" {
			return nil
		}
		return emit(provider.Event{Kind: provider.ThinkingDelta, Text: delta})
	case "response.output_item.added":
		if e.Item != nil && e.Item.Type == "function_call" {
			c := &respCall{callID: e.Item.CallID, name: e.Item.Name}
			c.args.WriteString(e.Item.Arguments)
			st.calls[e.Item.ID] = c
		}
	case "response.function_call_arguments.delta":
		if c := st.calls[e.ItemID]; c != nil {
			c.args.WriteString(delta)
		}
	case "response.function_call_arguments.done":
		if c := st.calls[e.ItemID]; c != nil {
			c.args.Reset()
			c.args.WriteString(e.Arguments)
		}
	case "response.output_item.done":
		if e.Item == nil || e.Item.Type != "function_call" {
			return nil
		}
		args := e.Item.Arguments
		if c := st.calls[e.Item.ID]; c != nil && args == "" {
			args = c.args.String()
		}
		return p.reportCall(st, e.Item.CallID, e.Item.Name, args, emit)
	case "response.completed", "response.incomplete", "response.failed", "response.cancelled", "response.done":
		st.done = true
		if e.Response == nil {
			return provider.Errorf(belay.ClassTransient, "%s: %s: %s without a response", p.name, respWhat, e.Type)
		}
		if e.Type == "response.done" && e.Response.Status == "" {
			e.Response.Status = statusCompleted
		}
		if err := p.terminal(e.Response); err != nil {
			st.done = true
			return err
		}
		return p.endTurn(st, e.Response, emit)
	case "error":
		return errPollNow
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// cancelRemote cancels a background response, best effort, within
// CancelTimeout, unless ctx was cancelled to detach (provider.ErrDetach:
// the daemon is stopping, the lease moved, or recovery will resume it).
func (p *Provider) cancelRemote(ctx context.Context, id string) {
	if provider.Detached(ctx) {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.CancelTimeout)
	defer cancel()
	resp, err := p.do(cctx, "cancel response", "POST", "/responses/"+url.PathEscape(id)+"/cancel", nil)
	if err == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		_ = resp.Body.Close()
	}
}
