package fake

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/clock"
	"github.com/belayhq/belay/provider"
)

// Options configure a fake provider.
type Options struct {
	// Name is the provider's name (default "fake").
	Name string
	// Resume turns the Resume capability on: runs report a cursor in
	// RefUpdate events and accept Resume requests.
	Resume bool
	// Clock times every delay (default clock.Real).
	Clock clock.Clock
	// EffectsDir, if set, is where side-effecting tool calls record that
	// they ran (see ReadEffects).
	EffectsDir string
	// Script is the default for runs whose input, model and session
	// options carry none (nil: echo).
	Script *Script
}

// Provider is the scripted fake. It is safe for concurrent runs.
type Provider struct {
	opts Options
}

var _ provider.Provider = (*Provider)(nil)

// New returns a fake provider.
func New(opts Options) *Provider {
	if opts.Name == "" {
		opts.Name = "fake"
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real
	}
	return &Provider{opts: opts}
}

// Name returns the provider's name.
func (p *Provider) Name() string { return p.opts.Name }

// Capabilities reports Cancel and Tools, and Resume if Options.Resume.
func (p *Provider) Capabilities() provider.Capabilities {
	return provider.Capabilities{Resume: p.opts.Resume, Cancel: true, Tools: true}
}

// RefKind is the Kind of the conversation refs the fake reports.
const RefKind = "fake"

// Run plays the request's script. A script comes from, in order: the
// input's "script" field, a "script:" model string, the session options'
// "script" field, Options.Script; otherwise the run echoes the prompt.
func (p *Provider) Run(ctx context.Context, req provider.Request, emit func(provider.Event) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s, err := p.script(req)
	if err != nil {
		return &provider.Error{Class: belay.ClassInvalidRequest, Message: err.Error(), Err: err}
	}
	r := &runner{
		opts:    &p.opts,
		clk:     p.opts.Clock,
		req:     req,
		emitFn:  emit,
		attempt: max(req.Attempt, 1),
	}
	if req.Resume {
		if !p.opts.Resume {
			return provider.Errorf(belay.ClassInvalidRequest, "fake: resume requested, but provider %q was built without the Resume capability", p.opts.Name)
		}
		a, pos, err := parseCursor(req.Ref.Cursor)
		if err != nil {
			return &provider.Error{Class: belay.ClassInvalidRequest, Message: err.Error(), Err: err}
		}
		if req.Ref.ID != "" && req.Ref.ID != convID(req.Run, a) {
			return provider.Errorf(belay.ClassTargetLost, "fake: conversation %q not found (run %q, attempt %d has %q)", req.Ref.ID, req.Run, a, convID(req.Run, a))
		}
		r.attempt, r.start, r.resumed = a, pos, true
	}
	r.plan = buildPlan(s, req.Prompt, r.attempt)
	if r.start > r.plan.size {
		return provider.Errorf(belay.ClassInvalidRequest, "fake: cursor %q is past the end of the run (%d positions)", req.Ref.Cursor, r.plan.size)
	}
	r.interval = rateInterval(s.Rate)
	r.keepalive = time.Duration(s.Keepalive)
	r.refEvery = max(s.RefEvery, 1)
	r.first = time.Duration(s.FirstToken)
	return r.run(ctx)
}

// script picks and validates the request's script (nil script: echo).
func (p *Provider) script(req provider.Request) (*Script, error) {
	if s, err := fieldScript(req.Input, "input"); s != nil || err != nil {
		return s, err
	}
	if s, err := modelScript(req.Model); s != nil || err != nil {
		return s, err
	}
	if s, err := fieldScript(req.Options, "options"); s != nil || err != nil {
		return s, err
	}
	if s := p.opts.Script; s != nil {
		if err := s.Validate(); err != nil {
			return nil, withSource(err, "provider")
		}
		return s, nil
	}
	return &Script{}, nil
}

// fieldScript decodes the "script" field of a JSON object (nil if the raw
// message is not an object or has no such field).
func fieldScript(raw json.RawMessage, source string) (*Script, error) {
	// Without a backslash every JSON string is spelled as it reads, so an
	// object with no "script" in it has no such field: skip the decode (a
	// run's input is decoded here for every run).
	if !bytes.Contains(raw, []byte(`"script"`)) && bytes.IndexByte(raw, '\\') < 0 {
		return nil, nil
	}
	var obj map[string]json.RawMessage
	if len(raw) == 0 || json.Unmarshal(raw, &obj) != nil {
		return nil, nil
	}
	field, ok := obj["script"]
	if !ok || string(field) == "null" {
		return nil, nil
	}
	s, err := DecodeScript(field)
	if err != nil {
		return nil, withSource(err, source)
	}
	return s, nil
}

func rateInterval(rate float64) time.Duration {
	if rate <= 0 {
		return 0
	}
	return time.Duration(float64(time.Second) / rate)
}

// convID is the conversation id the fake reports for a run's attempt.
func convID(run string, attempt int) string {
	return fmt.Sprintf("fake_%s_%d", run, attempt)
}

// cursor formats a resume cursor: the attempt whose plan it indexes and
// the number of positions emitted.
func cursor(attempt, pos int) string { return fmt.Sprintf("%d:%d", attempt, pos) }

func parseCursor(c string) (attempt, pos int, err error) {
	a, p, ok := strings.Cut(c, ":")
	attempt, errA := strconv.Atoi(a)
	pos, errP := strconv.Atoi(p)
	if !ok || errA != nil || errP != nil || attempt < 1 || pos < 0 {
		return 0, 0, fmt.Errorf("fake: bad resume cursor %q: want ATTEMPT:POSITION as reported in a RefUpdate", clip(c))
	}
	return attempt, pos, nil
}

// runner plays one plan on one connection.
type runner struct {
	opts   *Options
	clk    clock.Clock
	req    provider.Request
	plan   *plan
	emitFn func(provider.Event) error

	attempt int // the attempt whose plan plays
	resumed bool
	start   int // first position to emit

	interval  time.Duration
	keepalive time.Duration
	first     time.Duration
	refEvery  int

	pos      int       // positions emitted (the cursor)
	refPos   int       // cursor last reported
	due      time.Time // when the next op is scheduled
	lastEmit time.Time // for keepalives
	tokens   int       // tokens emitted on this connection
}

func (r *runner) run(ctx context.Context) error {
	now := r.clk.Now()
	r.due, r.lastEmit = now, now
	r.pos, r.refPos = r.start, r.start
	if !r.resumed {
		if err := r.emitRef(ctx); err != nil {
			return err
		}
		if err := r.wait(ctx, r.first); err != nil {
			return err
		}
	}
	for i := range r.plan.ops {
		o := &r.plan.ops[i]
		if err := ctx.Err(); err != nil {
			return err
		}
		if o.kind.positional() && o.pos < r.start || !o.kind.positional() && r.resumed && o.pos <= r.start {
			continue
		}
		if err := r.do(ctx, o); err != nil {
			return err
		}
	}
	return r.flushRef(ctx)
}

func (r *runner) do(ctx context.Context, o *op) error {
	switch o.kind {
	case opThinking, opText:
		if r.tokens > 0 {
			if err := r.wait(ctx, r.interval); err != nil {
				return err
			}
		}
		r.tokens++
		kind := provider.TextDelta
		if o.kind == opThinking {
			kind = provider.ThinkingDelta
		}
		return r.positional(ctx, provider.Event{Kind: kind, Text: o.text}, false)
	case opCall:
		c := *o.call
		return r.positional(ctx, provider.Event{Kind: provider.ToolCall, Call: &c}, true)
	case opRunTool:
		if o.call.SideEffect && r.opts.EffectsDir != "" {
			e := Effect{Session: r.req.Session, Run: r.req.Run, Call: o.call.ID, Tool: o.call.Name, Attempt: max(r.req.Attempt, 1), At: r.clk.Now().UTC()}
			if err := recordEffect(r.opts.EffectsDir, e); err != nil {
				return &provider.Error{Class: belay.ClassInternal, Message: "fake: record side effect: " + err.Error(), Err: err}
			}
		}
		return r.wait(ctx, time.Duration(o.step.Duration))
	case opResult:
		res := *o.res
		return r.positional(ctx, provider.Event{Kind: provider.ToolResult, Result: &res}, true)
	case opTurnEnd:
		return r.positional(ctx, provider.Event{Kind: provider.TurnEnd, StopReason: o.text}, false)
	case opUsage:
		return r.emit(provider.Event{Kind: provider.Usage, Tokens: &provider.Tokens{Input: r.plan.input, Output: o.output}})
	case opStall:
		if err := r.flushRef(ctx); err != nil {
			return err
		}
		return r.wait(ctx, time.Duration(o.step.Duration))
	case opError:
		if err := r.flushRef(ctx); err != nil {
			return err
		}
		msg := o.step.Message
		if msg == "" {
			msg = fmt.Sprintf("fake: scripted %s error at attempt %d", o.step.Class, r.attempt)
		}
		return &provider.Error{Class: o.step.Class, Message: msg, RetryAfter: time.Duration(o.step.RetryAfter)}
	case opCrash:
		if err := r.flushRef(ctx); err != nil {
			return err
		}
		msg := o.step.Message
		if msg == "" {
			msg = "fake: stream broke mid-response"
		}
		return &provider.Error{Class: belay.ClassTransient, Message: msg, Err: io.ErrUnexpectedEOF}
	case opHang:
		if err := r.flushRef(ctx); err != nil {
			return err
		}
		return r.hang(ctx)
	}
	return nil
}

// positional emits ev, which takes one position, then reports the cursor
// when due (always after tool calls and results).
func (r *runner) positional(ctx context.Context, ev provider.Event, forceRef bool) error {
	if err := r.emit(ev); err != nil {
		return err
	}
	r.pos++
	if forceRef || r.pos-r.refPos >= r.refEvery {
		return r.flushRef(ctx)
	}
	return nil
}

// flushRef reports the cursor if it moved since it was last reported.
func (r *runner) flushRef(ctx context.Context) error {
	if r.pos == r.refPos {
		return nil
	}
	return r.emitRef(ctx)
}

func (r *runner) emitRef(ctx context.Context) error {
	if !r.opts.Resume {
		return nil
	}
	r.refPos = r.pos
	return r.emit(provider.Event{Kind: provider.RefUpdate, Ref: &belay.ConversationRef{
		Kind:   RefKind,
		ID:     convID(r.req.Run, r.attempt),
		Cursor: cursor(r.attempt, r.pos),
	}})
}

func (r *runner) emit(ev provider.Event) error {
	if err := r.emitFn(ev); err != nil {
		return err
	}
	r.lastEmit = r.clk.Now()
	return nil
}

// wait moves the schedule d on and waits for it, emitting keepalives.
// Scheduling on absolute times keeps a stream's pace however late each
// wake-up is.
func (r *runner) wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	r.due = r.due.Add(d)
	for {
		if r.keepalive > 0 {
			if at := r.lastEmit.Add(r.keepalive); at.Before(r.due) {
				if err := sleep(ctx, r.clk, at.Sub(r.clk.Now())); err != nil {
					return err
				}
				if err := r.emit(provider.Event{Kind: provider.Keepalive}); err != nil {
					return err
				}
				continue
			}
		}
		return sleep(ctx, r.clk, r.due.Sub(r.clk.Now()))
	}
}

// hang waits until ctx is done, emitting keepalives.
func (r *runner) hang(ctx context.Context) error {
	for r.keepalive > 0 {
		if err := sleep(ctx, r.clk, r.lastEmit.Add(r.keepalive).Sub(r.clk.Now())); err != nil {
			return err
		}
		if err := r.emit(provider.Event{Kind: provider.Keepalive}); err != nil {
			return err
		}
	}
	<-ctx.Done()
	return ctx.Err()
}

// sleep waits d on clk, or until ctx is done.
func sleep(ctx context.Context, clk clock.Clock, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	fired := make(chan struct{})
	t := clk.AfterFunc(d, func() { close(fired) })
	select {
	case <-fired:
		return nil
	case <-ctx.Done():
		t.Stop()
		return ctx.Err()
	}
}

var _ provider.Validator = (*Provider)(nil)

// Validate checks the script a run would play (from its input, model or
// options) without playing it.
func (p *Provider) Validate(req provider.Request) error {
	if s, err := fieldScript(req.Input, "input"); s != nil || err != nil {
		return fieldErr("script", err)
	}
	if s, err := modelScript(req.Model); s != nil || err != nil {
		return fieldErr("model", err)
	}
	if s, err := fieldScript(req.Options, "options"); s != nil || err != nil {
		return fieldErr("options", err)
	}
	return nil
}

func fieldErr(field string, err error) error {
	if err == nil {
		return nil
	}
	return &provider.FieldError{Field: field, Err: err}
}
