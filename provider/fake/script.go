package fake

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/belayhq/belay"
)

// Script is what a fake run does. The zero Script echoes the prompt, one
// token per word, as fast as the consumer takes it. It round-trips through
// JSON; [DecodeScript] and [LoadScript] read it strictly and validate it.
type Script struct {
	// Reply is the answer text. Nil (absent in JSON) echoes the prompt; an
	// empty string is an empty reply.
	Reply *string `json:"reply,omitempty"`
	// Thinking is reasoning text streamed, one token per word, before the
	// reply.
	Thinking string `json:"thinking,omitempty"`
	// Tokens is how many text deltas the reply is cut into (0: one per
	// word). With more tokens than words the reply is cut by characters,
	// repeated (space separated) until it has enough of them.
	Tokens int `json:"tokens,omitempty"`
	// Rate is tokens per second (0: no delay between tokens).
	Rate float64 `json:"rate,omitempty"`
	// FirstToken is the delay before anything is emitted (time to first
	// token). A resumed run does not wait it again.
	FirstToken Duration `json:"firstToken,omitempty"`
	// Keepalive, if set, emits a Keepalive event whenever the provider has
	// been silent that long (during delays, stalls, tool runs and hangs).
	Keepalive Duration `json:"keepalive,omitempty"`
	// UsageEvery, if set, emits a Usage event after every UsageEvery
	// thinking or text tokens. One Usage event always precedes the final
	// TurnEnd.
	UsageEvery int `json:"usageEvery,omitempty"`
	// RefEvery is how many positions may pass between two RefUpdate events
	// when the provider resumes (0: 1, after every position).
	RefEvery int `json:"refEvery,omitempty"`
	// StopReason is the final TurnEnd's stop reason (default "end_turn").
	StopReason string `json:"stopReason,omitempty"`
	// Steps are placed in the reply stream by their At position.
	Steps []Step `json:"steps,omitempty"`
}

// StepKind is what a step does.
type StepKind string

// Step kinds.
const (
	// StepStall waits Duration without progress (keepalives continue).
	StepStall StepKind = "stall"
	// StepError fails the run with Class (and RetryAfter).
	StepError StepKind = "error"
	// StepCrash breaks the stream: the run fails with a transient error
	// wrapping io.ErrUnexpectedEOF.
	StepCrash StepKind = "crash"
	// StepHang waits until the run's context is done.
	StepHang StepKind = "hang"
	// StepTool reports a tool call, runs it and reports its result.
	StepTool StepKind = "tool"
	// StepTurnEnd emits a TurnEnd with StopReason in the middle of the run.
	StepTurnEnd StepKind = "turn_end"
)

// Outcome is how a tool call settles.
type Outcome string

// Tool call outcomes.
const (
	// OutcomeOK: the call ran and succeeded (the default).
	OutcomeOK Outcome = "ok"
	// OutcomeError: the call ran and failed.
	OutcomeError Outcome = "error"
	// OutcomeDenied: the call was refused before it ran; its result has
	// IsError and Class permission_denied.
	OutcomeDenied Outcome = "permission_denied"
	// OutcomeCrash: the call ran, then the stream broke before its result
	// was reported (a transient error). A resumed run reports the result
	// as ok without running the call again.
	OutcomeCrash Outcome = "crash"
)

// Step is one thing placed in the reply stream.
type Step struct {
	Kind StepKind `json:"kind"`
	// At places the step after At reply tokens (0: before the first;
	// End, or past the last token: after the last one, before the final
	// usage and TurnEnd). Steps at one position run in script order.
	At Position `json:"at,omitempty"`
	// Attempts limits the step to these attempts (empty: every attempt).
	Attempts AttemptSet `json:"attempts,omitempty"`
	// Duration is a stall's length, or how long a tool call runs.
	Duration Duration `json:"duration,omitempty"`
	// Class, Message and RetryAfter describe an error step (Message also
	// a crash).
	Class      belay.ErrorClass `json:"class,omitempty"`
	Message    string           `json:"message,omitempty"`
	RetryAfter Duration         `json:"retryAfter,omitempty"`
	// Tool is a tool step's tool name; CallID its call id (default
	// "call_<n>" for the script's n-th tool step, counting from 1).
	Tool       string          `json:"tool,omitempty"`
	CallID     string          `json:"callId,omitempty"`
	Input      json.RawMessage `json:"input,omitempty"`
	SideEffect bool            `json:"sideEffect,omitempty"`
	Outcome    Outcome         `json:"outcome,omitempty"`
	// Content is the tool result's content (default "ok", "tool failed"
	// or "permission denied").
	Content string `json:"content,omitempty"`
	// StopReason is a turn_end step's stop reason (default "end_turn").
	StopReason string `json:"stopReason,omitempty"`
}

// Duration is a time.Duration written in JSON as a Go duration string
// ("300ms", "1m30s").
type Duration time.Duration

// String formats d like time.Duration.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string like \"300ms\", not %s", clip(string(b)))
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("bad duration %q: want a Go duration like \"300ms\" or \"1m30s\"", clip(s))
	}
	*d = Duration(v)
	return nil
}

// Position is where a step goes: after that many reply tokens, or End.
type Position int

// End places a step after the last reply token.
const End Position = -1

// MarshalJSON writes End as "end" and other positions as numbers.
func (p Position) MarshalJSON() ([]byte, error) {
	if p == End {
		return []byte(`"end"`), nil
	}
	return []byte(strconv.Itoa(int(p))), nil
}

// UnmarshalJSON reads a token count or "end".
func (p *Position) UnmarshalJSON(b []byte) error {
	if string(b) == `"end"` {
		*p = End
		return nil
	}
	var n int
	if err := json.Unmarshal(b, &n); err != nil || n < 0 {
		return fmt.Errorf("position must be a token count >= 0 or \"end\", not %s", clip(string(b)))
	}
	*p = Position(n)
	return nil
}

// AttemptRange is the attempts From..To; To 0 means From and every later
// attempt.
type AttemptRange struct{ From, To int }

// AttemptSet is a set of attempts, written "1", "1,3", "2-4" or "3-"
// (3 and later). The empty set means every attempt.
type AttemptSet []AttemptRange

// ParseAttempts parses an attempt set like "1,3-4,6-".
func ParseAttempts(s string) (AttemptSet, error) {
	if s == "" {
		return nil, errors.New("empty attempt set")
	}
	var set AttemptSet
	for part := range strings.SplitSeq(s, ",") {
		from, to, isRange := strings.Cut(part, "-")
		f, err := parseAttempt(from)
		if err != nil {
			return nil, err
		}
		r := AttemptRange{From: f, To: f}
		if isRange {
			r.To = 0
			if to != "" {
				if r.To, err = parseAttempt(to); err != nil {
					return nil, err
				}
				if r.To < r.From {
					return nil, fmt.Errorf("attempt range %q runs backwards", part)
				}
			}
		}
		set = append(set, r)
	}
	return set, nil
}

func parseAttempt(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxAttempt || s != strconv.Itoa(n) {
		return 0, fmt.Errorf("bad attempt %q: want a number from 1 to %d", clip(s), maxAttempt)
	}
	return n, nil
}

// Contains reports whether attempt n is in the set.
func (a AttemptSet) Contains(n int) bool {
	if len(a) == 0 {
		return true
	}
	for _, r := range a {
		if n >= r.From && (r.To == 0 || n <= r.To) {
			return true
		}
	}
	return false
}

// String formats the set as ParseAttempts reads it.
func (a AttemptSet) String() string {
	parts := make([]string, len(a))
	for i, r := range a {
		switch {
		case r.To == 0:
			parts[i] = fmt.Sprintf("%d-", r.From)
		case r.To == r.From:
			parts[i] = strconv.Itoa(r.From)
		default:
			parts[i] = fmt.Sprintf("%d-%d", r.From, r.To)
		}
	}
	return strings.Join(parts, ",")
}

// MarshalJSON writes the set as a string.
func (a AttemptSet) MarshalJSON() ([]byte, error) { return json.Marshal(a.String()) }

// UnmarshalJSON reads a set string ("1,3-") or a single attempt number.
func (a *AttemptSet) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var n int
		if json.Unmarshal(b, &n) != nil {
			return fmt.Errorf("attempts must be a string like \"1,3-\" or a number, not %s", clip(string(b)))
		}
		s = strconv.Itoa(n)
	}
	if s == "" {
		*a = nil
		return nil
	}
	set, err := ParseAttempts(s)
	if err != nil {
		return err
	}
	*a = set
	return nil
}

// Limits a script must stay within.
const (
	maxTokens    = 1_000_000
	maxText      = 1 << 20
	maxSteps     = 10_000
	maxEvery     = 1_000_000
	maxAttempt   = 1_000_000
	maxDuration  = 1000 * time.Hour
	minKeepalive = time.Millisecond
	minRate      = 0.001
	maxRate      = 1e9
	maxFileSize  = 4 << 20
)

var toolName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// ScriptError is an invalid script. It matches belay.ErrInvalid; Run reports
// it as an invalid_request *provider.Error.
type ScriptError struct {
	// Source is where the script came from: "model", "input", "options",
	// "provider" or a file path (empty when validated directly).
	Source string
	// Field locates the problem: "item 2 (stall=x)", "steps[1].class".
	Field string
	Msg   string
	Err   error
}

func (e *ScriptError) Error() string {
	var b strings.Builder
	b.WriteString("fake: invalid script")
	if e.Source != "" {
		fmt.Fprintf(&b, " from %s", e.Source)
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns the underlying error, if any.
func (e *ScriptError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, belay.ErrInvalid) hold.
func (e *ScriptError) Is(target error) bool { return target == belay.ErrInvalid }

// DecodeScript reads a JSON script strictly (unknown fields are errors)
// and validates it.
func DecodeScript(data []byte) (*Script, error) {
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return nil, &ScriptError{Msg: "a script must be a JSON object"}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var s Script
	if err := dec.Decode(&s); err != nil {
		return nil, &ScriptError{Msg: err.Error(), Err: err}
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, &ScriptError{Msg: "trailing data after the script object"}
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

// LoadScript reads and validates a JSON script file.
func LoadScript(path string) (*Script, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("fake: load script: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("fake: load script: %w", err)
	}
	if len(data) > maxFileSize {
		return nil, &ScriptError{Source: path, Msg: fmt.Sprintf("file is larger than %d bytes", maxFileSize)}
	}
	s, err := DecodeScript(data)
	if err != nil {
		return nil, withSource(err, path)
	}
	return s, nil
}

func withSource(err error, source string) error {
	var se *ScriptError
	if errors.As(err, &se) && se.Source == "" {
		c := *se
		c.Source = source
		return &c
	}
	return err
}

// Validate checks that the script is complete and within limits.
func (s *Script) Validate() error {
	if field, msg := s.validate(); msg != "" {
		return &ScriptError{Field: field, Msg: msg}
	}
	return nil
}

func (s *Script) validate() (field, msg string) {
	if s.Reply != nil {
		if m := checkText(*s.Reply, maxText); m != "" {
			return "reply", m
		}
	}
	if m := checkText(s.Thinking, maxText); m != "" {
		return "thinking", m
	}
	if m := checkText(s.StopReason, 256); m != "" {
		return "stopReason", m
	}
	switch {
	case s.Tokens < 0 || s.Tokens > maxTokens:
		return "tokens", fmt.Sprintf("must be from 0 to %d", maxTokens)
	case math.IsNaN(s.Rate) || s.Rate < 0 || s.Rate > maxRate || s.Rate > 0 && s.Rate < minRate:
		return "rate", fmt.Sprintf("must be 0 (no delay) or tokens per second from %g to %g", minRate, maxRate)
	case s.UsageEvery < 0 || s.UsageEvery > maxEvery:
		return "usageEvery", fmt.Sprintf("must be from 0 to %d", maxEvery)
	case s.RefEvery < 0 || s.RefEvery > maxEvery:
		return "refEvery", fmt.Sprintf("must be from 0 to %d", maxEvery)
	case len(s.Steps) > maxSteps:
		return "steps", fmt.Sprintf("at most %d steps", maxSteps)
	}
	if m := checkDuration(s.FirstToken); m != "" {
		return "firstToken", m
	}
	if m := checkDuration(s.Keepalive); m != "" {
		return "keepalive", m
	}
	if s.Keepalive > 0 && time.Duration(s.Keepalive) < minKeepalive {
		return "keepalive", fmt.Sprintf("must be 0 (none) or at least %s", minKeepalive)
	}
	ids := callIDs(s.Steps)
	seen := map[string]int{}
	for i := range s.Steps {
		st := &s.Steps[i]
		if f, m := st.validate(); m != "" {
			return fmt.Sprintf("steps[%d]%s", i, f), m
		}
		if st.Kind == StepTool {
			if j, dup := seen[ids[i]]; dup {
				return fmt.Sprintf("steps[%d].callId", i), fmt.Sprintf("call id %q is also used by steps[%d]", ids[i], j)
			}
			seen[ids[i]] = i
		}
	}
	return "", ""
}

func (st *Step) validate() (field, msg string) {
	if st.At < End {
		return ".at", "must be a token count >= 0 or \"end\""
	}
	for _, r := range st.Attempts {
		if r.From < 1 || r.From > maxAttempt || r.To != 0 && (r.To < r.From || r.To > maxAttempt) {
			return ".attempts", fmt.Sprintf("bad attempt range %d-%d", r.From, r.To)
		}
	}
	// Fields that are set, and the kinds they belong to.
	fields := []struct {
		name  string
		set   bool
		kinds []StepKind
	}{
		{"duration", st.Duration != 0, []StepKind{StepStall, StepTool}},
		{"class", st.Class != "", []StepKind{StepError}},
		{"message", st.Message != "", []StepKind{StepError, StepCrash}},
		{"retryAfter", st.RetryAfter != 0, []StepKind{StepError}},
		{"tool", st.Tool != "", []StepKind{StepTool}},
		{"callId", st.CallID != "", []StepKind{StepTool}},
		{"input", st.Input != nil, []StepKind{StepTool}},
		{"sideEffect", st.SideEffect, []StepKind{StepTool}},
		{"outcome", st.Outcome != "", []StepKind{StepTool}},
		{"content", st.Content != "", []StepKind{StepTool}},
		{"stopReason", st.StopReason != "", []StepKind{StepTurnEnd}},
	}
	switch st.Kind {
	case StepStall, StepError, StepCrash, StepHang, StepTool, StepTurnEnd:
	case "":
		return ".kind", "missing (want stall, error, crash, hang, tool or turn_end)"
	default:
		return ".kind", fmt.Sprintf("unknown kind %q (want stall, error, crash, hang, tool or turn_end)", clip(string(st.Kind)))
	}
	for _, f := range fields {
		if f.set && !hasKind(f.kinds, st.Kind) {
			return "." + f.name, fmt.Sprintf("not allowed in a %s step", st.Kind)
		}
	}
	if m := checkDuration(st.Duration); m != "" {
		return ".duration", m
	}
	if m := checkDuration(st.RetryAfter); m != "" {
		return ".retryAfter", m
	}
	for _, t := range []struct{ name, s string }{{"message", st.Message}, {"content", st.Content}, {"stopReason", st.StopReason}} {
		if m := checkText(t.s, maxText); m != "" {
			return "." + t.name, m
		}
	}
	switch st.Kind {
	case StepStall:
		if st.Duration <= 0 {
			return ".duration", "a stall needs a duration > 0"
		}
	case StepError:
		if !knownClass(st.Class) {
			return ".class", fmt.Sprintf("unknown error class %q (want one of %s)", clip(string(st.Class)), classList())
		}
	case StepTool:
		if !toolName.MatchString(st.Tool) {
			return ".tool", fmt.Sprintf("tool name %q must be 1-64 of A-Z a-z 0-9 _ . -", clip(st.Tool))
		}
		if st.CallID != "" && !toolName.MatchString(st.CallID) {
			return ".callId", fmt.Sprintf("call id %q must be 1-64 of A-Z a-z 0-9 _ . -", clip(st.CallID))
		}
		if st.Input != nil && !json.Valid(st.Input) {
			return ".input", "not valid JSON"
		}
		switch st.Outcome {
		case "", OutcomeOK, OutcomeError, OutcomeDenied, OutcomeCrash:
		default:
			return ".outcome", fmt.Sprintf("unknown outcome %q (want ok, error, permission_denied or crash)", clip(string(st.Outcome)))
		}
	}
	return "", ""
}

// callIDs returns each step's call id ("" for steps that are not tools).
func callIDs(steps []Step) []string {
	ids := make([]string, len(steps))
	n := 0
	for i, st := range steps {
		if st.Kind != StepTool {
			continue
		}
		n++
		ids[i] = st.CallID
		if ids[i] == "" {
			ids[i] = fmt.Sprintf("call_%d", n)
		}
	}
	return ids
}

func hasKind(kinds []StepKind, k StepKind) bool {
	for _, x := range kinds {
		if x == k {
			return true
		}
	}
	return false
}

var classes = []belay.ErrorClass{
	belay.ClassAuth, belay.ClassChallenge, belay.ClassRateLimited, belay.ClassOverloaded,
	belay.ClassTransient, belay.ClassInvalidRequest, belay.ClassContextOverflow,
	belay.ClassPermissionDenied, belay.ClassTargetLost, belay.ClassUIDrift,
	belay.ClassCancelled, belay.ClassTimeout, belay.ClassInternal, belay.ClassQuota,
}

func knownClass(c belay.ErrorClass) bool {
	for _, k := range classes {
		if c == k {
			return true
		}
	}
	return false
}

func classList() string {
	s := make([]string, len(classes))
	for i, c := range classes {
		s[i] = string(c)
	}
	return strings.Join(s, ", ")
}

func checkDuration(d Duration) string {
	if d < 0 || time.Duration(d) > maxDuration {
		return fmt.Sprintf("must be from 0 to %s", maxDuration)
	}
	return ""
}

func checkText(s string, max int) string {
	switch {
	case len(s) > max:
		return fmt.Sprintf("longer than %d bytes", max)
	case !utf8.ValidString(s):
		return "not valid UTF-8"
	}
	return ""
}

// clip shortens s for an error message.
func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
