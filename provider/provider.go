// Package provider defines the interface between belay's runtime and the
// things that execute runs: LLM APIs, local agent CLIs, browsers, and the
// scripted fake used by tests, demos and chaos runs.
//
// A Provider turns a Request into an ordered stream of Events: text and
// thinking deltas, tool call intents and settlements, conversation-ref
// updates, usage, and finally done. Every failure is an *Error carrying one
// of belay's error classes, so the runtime can decide to retry, resume,
// strand or fail without looking at provider-specific errors.
package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/belayhq/belay"
)

// Capabilities says what a provider can do beyond running a request.
type Capabilities struct {
	// Resume: it can reattach to a run in flight after a restart, from the
	// conversation ref and cursor it reported (a background response id and
	// sequence number, a detached process, a conversation URL).
	Resume bool `json:"resume"`
	// Cancel: cancelling the context stops the work on the provider's side,
	// not only the local stream.
	Cancel bool `json:"cancel"`
	// Tools: it reports tool calls.
	Tools bool `json:"tools"`
}

// Request is one run for a provider to execute.
type Request struct {
	Session string
	Run     string
	Model   string
	// Prompt is the user's input text for this turn.
	Prompt string
	// Input is the run's whole input as submitted (prompt and options).
	Input json.RawMessage
	// Options are the session's provider options.
	Options json.RawMessage
	// Attempt counts from 1; recovery and retries increment it.
	Attempt int
	// Ref is the conversation ref last reported for the session or run.
	Ref belay.ConversationRef
	// Resume asks the provider to reattach to the run in flight at Ref
	// (and its Cursor) instead of starting it again. Only providers with
	// the Resume capability get it.
	Resume bool
	// TextOffset, with Resume, is how many bytes of answer text the
	// journal held for the run when Ref was last reported. A resumed
	// provider goes on from Ref: it emits again the text it emitted after
	// that ref (one that resumes from a cursor replays from it; one that
	// re-reads the whole answer emits what follows TextOffset). The
	// journal may hold some of that text already (journaled before a
	// crash, ahead of the next ref): the runtime drops those bytes.
	TextOffset int
	// ThinkingOffset is TextOffset for thinking text: a resumed provider
	// emits again the thinking it emitted after Ref, and the runtime drops
	// what the journal holds of it.
	ThinkingOffset int
	// SessionRef is the session's conversation ref when the run started
	// (the conversation a follow-up continues).
	SessionRef belay.ConversationRef
}

// EventKind is the kind of a provider event.
type EventKind string

// Event kinds.
const (
	// TextDelta carries answer text.
	TextDelta EventKind = "text"
	// ThinkingDelta carries reasoning text.
	ThinkingDelta EventKind = "thinking"
	// ToolCall is a tool call's intent, reported before it runs.
	ToolCall EventKind = "tool_call"
	// ToolResult is a tool call's settlement.
	ToolResult EventKind = "tool_result"
	// RefUpdate reports a new conversation ref or cursor.
	RefUpdate EventKind = "ref"
	// Usage reports token counts. It is not progress.
	Usage EventKind = "usage"
	// Keepalive says the provider is still there. It is not progress.
	Keepalive EventKind = "keepalive"
	// TurnEnd says the model finished a turn (more may follow, e.g. after
	// tool results).
	TurnEnd EventKind = "turn_end"
	// FinalAnswer carries the run's whole answer as the provider took it
	// once the turn was complete (a chat site's copy button gives the
	// answer's markdown where the streamed deltas were its rendered
	// text). It is the run's answer from then on, in place of the
	// TextDelta text; deltas still show the answer live. Source (and
	// Note) say where it was taken. Emitting the same answer again (a
	// resumed run) journals nothing new.
	FinalAnswer EventKind = "final_answer"
)

// Progress reports whether events of this kind show the run advancing:
// only they reset the watchdog's inactivity tiers (G8).
func (k EventKind) Progress() bool {
	switch k {
	case TextDelta, ThinkingDelta, ToolCall, ToolResult, RefUpdate, TurnEnd, FinalAnswer:
		return true
	}
	return false
}

// Event is one thing a provider reports about a run.
type Event struct {
	Kind EventKind `json:"kind"`
	// Text for TextDelta, ThinkingDelta and FinalAnswer.
	Text string `json:"text,omitempty"`
	// Source and Note for FinalAnswer: where the answer was taken
	// ("copy", "dom"), and why not from the first choice.
	Source string `json:"source,omitempty"`
	Note   string `json:"note,omitempty"`
	// Call for ToolCall.
	Call *Call `json:"call,omitempty"`
	// Result for ToolResult.
	Result *Result `json:"result,omitempty"`
	// Ref for RefUpdate: the new conversation ref (fields set are updated).
	Ref *belay.ConversationRef `json:"ref,omitempty"`
	// Tokens for Usage.
	Tokens *Tokens `json:"tokens,omitempty"`
	// StopReason for TurnEnd.
	StopReason string `json:"stopReason,omitempty"`
}

// Call, Result and Tokens are the payloads of the run.tool_call,
// run.tool_result and run.usage events (package belay).
type (
	Call   = belay.ToolCall
	Result = belay.ToolResult
	Tokens = belay.Tokens
)

// Provider executes runs.
type Provider interface {
	// Name is the provider's name ("fake", "openai", ...).
	Name() string
	// Capabilities says what the provider can do.
	Capabilities() Capabilities
	// Run executes req, calling emit for each event in order, and returns
	// nil when the run completed, an error (an *Error, or one that wraps
	// it) when it failed, or ctx's error when it was cancelled. If emit
	// returns an error, Run stops and returns it.
	Run(ctx context.Context, req Request, emit func(Event) error) error
}

// ErrDetach, as the cause of a Run context's cancellation (or wrapped in an
// error emit returns), asks the provider to stop following the run but to
// leave its work running on the other side (a background response, a
// detached agent process), because a later Run with Resume will reattach:
// the daemon is stopping, the lease moved, or a stall is being recovered by
// resuming. Any other cancellation cause also cancels the work.
var ErrDetach = errors.New("provider: detach: the work goes on")

// Detached reports whether ctx was cancelled to detach (see ErrDetach).
func Detached(ctx context.Context) bool { return errors.Is(context.Cause(ctx), ErrDetach) }

// ErrDeadline is wrapped by the cause of a Run context's cancellation
// when the run's absolute deadline passed: belay stops waiting, but
// nobody asked the provider's side to stop (unlike a cancel), so a
// provider may leave work there that a later run can read.
var ErrDeadline = errors.New("provider: the run's deadline passed")

// PastDeadline reports whether ctx was cancelled because the run's
// deadline passed (see ErrDeadline).
func PastDeadline(ctx context.Context) bool { return errors.Is(context.Cause(ctx), ErrDeadline) }

// Error is a provider failure in one of belay's error classes.
type Error struct {
	Class   belay.ErrorClass
	Message string
	// RetryAfter is the server's requested delay, if it gave one.
	RetryAfter time.Duration
	// Status is the HTTP status of the server's answer, if there was one.
	Status int
	// Err is the underlying error, if any. It must not hold secrets.
	Err error
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("%s: %s", e.Class, e.Message)
	if e.RetryAfter > 0 {
		msg += fmt.Sprintf(" (retry after %s)", e.RetryAfter)
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error of class c.
func Errorf(c belay.ErrorClass, format string, args ...any) *Error {
	return &Error{Class: c, Message: fmt.Sprintf(format, args...)}
}

// ClassOf returns the class of err: the *Error's class, cancelled for a
// context cancellation, timeout for a deadline, internal otherwise.
func ClassOf(err error) belay.ErrorClass {
	var pe *Error
	switch {
	case err == nil:
		return ""
	case errors.As(err, &pe):
		return pe.Class
	case errors.Is(err, context.Canceled):
		return belay.ClassCancelled
	case errors.Is(err, context.DeadlineExceeded):
		return belay.ClassTimeout
	}
	return belay.ClassInternal
}

// RetryAfterOf returns the retry delay an error asked for, or 0.
func RetryAfterOf(err error) time.Duration {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.RetryAfter
	}
	return 0
}

// Registry looks providers up by name.
type Registry map[string]Provider

// Get returns the named provider, or an *UnknownError.
func (r Registry) Get(name string) (Provider, error) {
	p, ok := r[name]
	if !ok {
		return nil, &UnknownError{Name: name, Known: r.Names()}
	}
	return p, nil
}

// Names returns the registered names, sorted.
func (r Registry) Names() []string {
	out := make([]string, 0, len(r))
	for n := range r {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// UnknownError is a provider name that is not registered. It is a
// belay.ErrInvalid.
type UnknownError struct {
	Name  string
	Known []string
}

func (e *UnknownError) Error() string {
	return fmt.Sprintf("unknown provider %q (configured: %s)", e.Name, strings.Join(e.Known, ", "))
}

// Is makes errors.Is(err, belay.ErrInvalid) hold.
func (e *UnknownError) Is(target error) bool { return target == belay.ErrInvalid }

// Validator is a Provider that can check a request before its run is
// created, so that a model, script or option it would refuse is refused
// at the door (a usage error, HTTP 400) instead of failing the run later.
// The request holds no conversation history and no Run id.
type Validator interface {
	Validate(req Request) error
}

// SiteReader is a Provider that reads the browser options of a request
// (SiteOption): the browser provider. The runtime refuses those options
// for any other provider, which would ignore them (belay send --provider
// fake --site chatgpt sent nothing to chatgpt).
type SiteReader interface {
	ReadsSiteOptions()
}

// siteOptions are the option keys only a SiteReader reads: belay send
// --site, --site-url and --attach.
var siteOptions = []string{"site", "site_url", "attachments"}

// SiteOption returns the first browser option (a SiteReader's) that the
// options object sets, and "" if none (or options is not an object).
func SiteOption(options json.RawMessage) string {
	var m map[string]json.RawMessage
	if json.Unmarshal(options, &m) != nil {
		return ""
	}
	for _, k := range siteOptions {
		switch v := strings.TrimSpace(string(m[k])); v {
		case "", "null", `""`, "[]":
		default:
			return k
		}
	}
	return ""
}

// RunOptions returns the options of a run's input (its "options" object),
// nil if it has none.
func RunOptions(input json.RawMessage) json.RawMessage {
	var run struct {
		Options json.RawMessage `json:"options"`
	}
	_ = json.Unmarshal(input, &run) // an input that is not an object has none
	return run.Options
}

// FieldError is a request field a Validator refused: "model", "script"
// or "options".
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }
