package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/internal/ids"
)

// RunURI is a run's resource.
func RunURI(id string) string { return "belay://runs/" + id }

// SessionURI is a session's resource.
func SessionURI(id string) string { return "belay://sessions/" + id }

// RunInfo is a run as the tools return it.
type RunInfo struct {
	Run      string            `json:"run"`
	Session  string            `json:"session"`
	URI      string            `json:"uri" jsonschema:"the run's resource: subscribe to it to be woken when the run ends"`
	Status   string            `json:"status" jsonschema:"queued, running, complete, failed, cancelled or stranded"`
	Phase    string            `json:"phase"`
	Provider string            `json:"provider"`
	Model    string            `json:"model,omitempty"`
	Attempt  int               `json:"attempt"`
	Class    string            `json:"errorClass,omitempty" jsonschema:"the error class of a failed run"`
	Error    string            `json:"error,omitempty"`
	Reason   string            `json:"reason,omitempty"`
	Tags     []string          `json:"tags,omitempty"`
	Meta     map[string]string `json:"meta,omitempty"`
	Created  string            `json:"createdAt"`
	Ended    string            `json:"endedAt,omitempty"`
	// LastProgress is the last sign of life of a running run.
	LastProgress string `json:"lastProgress,omitempty"`
}

func runInfo(r apitype.Run) RunInfo {
	out := RunInfo{
		Run: r.ID, Session: r.Session, URI: RunURI(r.ID), Status: string(r.Status), Phase: string(r.Phase),
		Provider: r.Provider, Model: r.Model, Attempt: r.Attempt, Reason: r.Reason, Tags: r.Tags, Meta: r.Meta,
		Created: stamp(r.CreatedAt), Ended: stamp(r.EndedAt),
	}
	if r.Error != nil {
		out.Class, out.Error = string(r.Error.Class), r.Error.Message
	}
	if r.Activity != nil {
		out.LastProgress = stamp(r.Activity.LastProgress)
	}
	return out
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// SendIn is the send tool's input.
type SendIn struct {
	Prompt         string            `json:"prompt" jsonschema:"the prompt; it may be long (up to 16 MiB)"`
	Provider       string            `json:"provider,omitempty" jsonschema:"the provider of a new session (openai, anthropic, command, fake, or a name from the daemon's config.toml); required without session"`
	Model          string            `json:"model,omitempty" jsonschema:"the model; default: the provider's"`
	Session        string            `json:"session,omitempty" jsonschema:"an existing session (ses_...) to continue; omit to start a new one"`
	Policy         string            `json:"policy,omitempty" jsonschema:"when the session already has a run: enqueue (default, run after it), reject (fail), interrupt (cancel it, then run), replace (drop queued runs)"`
	IdempotencyKey string            `json:"idempotencyKey,omitempty" jsonschema:"a key of your choosing: sending again with the same key returns the same run, never a second one (use it when retrying a send)"`
	Deadline       string            `json:"deadline,omitempty" jsonschema:"how long the run may take at most, e.g. 90m; default: the daemon's for the provider"`
	Tags           []string          `json:"tags,omitempty" jsonschema:"extra tags to find the run by (the server's scope tags are added)"`
	Meta           map[string]string `json:"meta,omitempty" jsonschema:"metadata kept with the run, e.g. {\"ticket\":\"ABC-1\"}"`
	Script         map[string]any    `json:"script,omitempty" jsonschema:"for the fake provider only: scripted behaviour (tests and demos)"`
}

// RunIn names a run.
type RunIn struct {
	Run string `json:"run" jsonschema:"the run id (run_...)"`
}

// StatusIn is the status tool's input.
type StatusIn struct {
	Run     string `json:"run,omitempty" jsonschema:"a run id (run_...)"`
	Session string `json:"session,omitempty" jsonschema:"a session id (ses_...): its runs"`
}

// StatusOut is the status tool's output.
type StatusOut struct {
	Run  *RunInfo  `json:"run,omitempty"`
	Runs []RunInfo `json:"runs,omitempty"`
}

// ReadIn is the read tool's input.
type ReadIn struct {
	Run      string `json:"run" jsonschema:"the run id (run_...)"`
	Cursor   string `json:"cursor,omitempty" jsonschema:"where to go on from: the cursor of the previous page; omit for the start"`
	MaxBytes int    `json:"maxBytes,omitempty" jsonschema:"the most bytes of text to return (default 16384, at most 262144)"`
}

// ReadOut is a page of a run's answer.
type ReadOut struct {
	Run    string `json:"run"`
	Status string `json:"status"`
	Text   string `json:"text" jsonschema:"this page of the answer"`
	Cursor string `json:"cursor" jsonschema:"pass it to read the next page"`
	// More is true when text beyond this page exists now.
	More bool `json:"more" jsonschema:"true: more text exists now; call read again with cursor"`
	// Final is true when the run has ended and the answer is read to its end.
	Final bool   `json:"final" jsonschema:"true: the run ended and this is the end of its answer"`
	Total int    `json:"totalBytes" jsonschema:"the answer's length so far"`
	Note  string `json:"note,omitempty"`
}

// WaitIn is the wait tool's input.
type WaitIn struct {
	Run     string  `json:"run" jsonschema:"the run id (run_...)"`
	Timeout float64 `json:"timeoutSeconds,omitempty" jsonschema:"how long to wait, in seconds (default 30, at most 50): a timeout is not a failure"`
}

// WaitOut is what wait returns.
type WaitOut struct {
	State string  `json:"state" jsonschema:"ended, or still_running when the timeout passed first (the run goes on)"`
	Run   RunInfo `json:"run"`
	// Cursor is the answer length so far: read from 0, or from an earlier
	// cursor, to get the text.
	Cursor string `json:"cursor" jsonschema:"the answer's length so far, a cursor for read"`
	Next   string `json:"next"`
}

// CancelIn is the cancel tool's input.
type CancelIn struct {
	Run    string `json:"run" jsonschema:"the run id (run_...)"`
	Reason string `json:"reason,omitempty" jsonschema:"why, journaled with the run"`
}

// DoctorIn is the doctor tool's input.
type DoctorIn struct {
	Run     string `json:"run,omitempty" jsonschema:"a run id: diagnose its session"`
	Session string `json:"session,omitempty" jsonschema:"a session id (ses_...)"`
}

// DoctorOut is the doctor's verdict.
type DoctorOut struct {
	Session     string               `json:"session"`
	State       string               `json:"state"`
	NextAction  string               `json:"nextAction" jsonschema:"none, wait, watch, read_result, ack_delivery, resend, resolve_manually, reauth, solve_challenge, retry_later, start_daemon, repair_journal, release_stale_lock, reattach or prune"`
	Reason      string               `json:"reason"`
	Command     string               `json:"command" jsonschema:"the exact command to run for nextAction, empty for none"`
	Diagnostics []apitype.Diagnostic `json:"diagnostics"`
	Unsettled   int                  `json:"unsettledDeliveries"`
}

// ListIn is the runs_list tool's input.
type ListIn struct {
	Status   string `json:"status,omitempty" jsonschema:"queued, running, complete, failed, cancelled or stranded"`
	Provider string `json:"provider,omitempty"`
	Session  string `json:"session,omitempty"`
	Tag      string `json:"tag,omitempty" jsonschema:"default: the server's first scope tag"`
	Since    string `json:"since,omitempty" jsonschema:"created at or after: a duration back (24h) or an RFC 3339 time"`
	Failed   bool   `json:"failed,omitempty" jsonschema:"only failed and stranded runs"`
	Sort     string `json:"sort,omitempty" jsonschema:"newest (default), oldest or updated"`
	Limit    int    `json:"limit,omitempty" jsonschema:"page size, default 20, at most 200"`
	Cursor   string `json:"cursor,omitempty" jsonschema:"nextCursor of the previous page"`
}

// ListOut is a page of runs.
type ListOut struct {
	Runs       []RunInfo `json:"runs"`
	NextCursor string    `json:"nextCursor,omitempty"`
}

// PostIn is the inbox_post tool's input.
type PostIn struct {
	Session  string          `json:"session" jsonschema:"the session (ses_...), required"`
	Type     string          `json:"type" jsonschema:"the item's type, e.g. review.request"`
	Key      string          `json:"key,omitempty" jsonschema:"idempotency key: a second post of the same key and type is dropped"`
	Priority int             `json:"priority,omitempty"`
	Data     json.RawMessage `json:"data,omitempty" jsonschema:"JSON payload"`
}

// PollIn is the inbox_poll tool's input.
type PollIn struct {
	Session string  `json:"session" jsonschema:"the session (ses_...), required"`
	Owner   string  `json:"owner,omitempty" jsonschema:"who takes the items (default: this server)"`
	TTL     float64 `json:"ttlSeconds,omitempty" jsonschema:"lease length in seconds (default 300): an item not acked by then is delivered again"`
	Max     int     `json:"max,omitempty" jsonschema:"at most this many items (default 10)"`
	Wait    float64 `json:"waitSeconds,omitempty" jsonschema:"wait up to this long for an item (default 0, at most 50)"`
}

// AckIn is the inbox_ack tool's input.
type AckIn struct {
	Session  string  `json:"session" jsonschema:"the session (ses_...), required"`
	Delivery string  `json:"delivery" jsonschema:"the item id (dlv_...)"`
	Epoch    uint64  `json:"epoch" jsonschema:"the epoch the poll returned with the item"`
	Kind     string  `json:"kind,omitempty" jsonschema:"done (default), error, release (deliver again now) or retry (after delaySeconds)"`
	Result   string  `json:"result,omitempty"`
	Delay    float64 `json:"delaySeconds,omitempty"`
}

// RetryIn is the retry tool's input.
type RetryIn struct {
	Run              string `json:"run" jsonschema:"the finished run (run_...) to send again"`
	AllowSideEffects bool   `json:"allowSideEffects,omitempty" jsonschema:"retry even though side-effecting tool calls of the run settled: they may run again"`
	Policy           string `json:"policy,omitempty" jsonschema:"when the session is busy: enqueue (default), reject, interrupt, replace"`
	IdempotencyKey   string `json:"idempotencyKey,omitempty" jsonschema:"default retry-RUN: retrying twice makes one new run"`
	Deadline         string `json:"deadline,omitempty" jsonschema:"how long the new run may take at most, e.g. 90m; default: as long as the original had"`
}

// RetryOut is the new run and what may repeat.
type RetryOut struct {
	RunInfo
	Retries   string   `json:"retries"`
	MayRepeat []string `json:"mayRepeat,omitempty" jsonschema:"side-effecting tools of the old run that may run again"`
}

// DeliveriesOut lists inbox items.
type DeliveriesOut struct {
	Deliveries []belay.Delivery `json:"deliveries"`
}

// rawJSON is the schema of a json.RawMessage field (an inbox item's data):
// any JSON value. Inferred, it would be an array of bytes, and the SDK
// would refuse every object a client posts and every item a poll returns.
var rawJSON = map[reflect.Type]*jsonschema.Schema{reflect.TypeFor[json.RawMessage](): {Description: "any JSON value"}}

// addTool adds a tool with its input and output schemas inferred from In
// and Out as mcp.AddTool would, but with json.RawMessage as any JSON value.
func addTool[In, Out any](srv *mcp.Server, t *mcp.Tool, h mcp.ToolHandlerFor[In, Out]) {
	t.InputSchema = schemaFor[In](t.Name)
	t.OutputSchema = schemaFor[Out](t.Name)
	mcp.AddTool(srv, t, h)
}

// addExactTool adds a tool whose results carry data a client posted (inbox
// items) with no output schema: the SDK checks a result against its schema
// through map[string]any and sends what that gives, which rounds any
// number past 2^53. Without one, the result is sent as marshaled.
func addExactTool[In, Out any](srv *mcp.Server, t *mcp.Tool, h mcp.ToolHandlerFor[In, Out]) {
	t.InputSchema = schemaFor[In](t.Name)
	mcp.AddTool(srv, t, func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, any, error) {
		res, out, err := h(ctx, req, in)
		if err != nil {
			return res, nil, err
		}
		return res, out, nil
	})
}

func schemaFor[T any](tool string) *jsonschema.Schema {
	s, err := jsonschema.For[T](&jsonschema.ForOptions{TypeSchemas: rawJSON})
	if err != nil {
		panic(fmt.Sprintf("mcpserver: the schema of %s's %v: %v", tool, reflect.TypeFor[T](), err))
	}
	return s
}

// rawArgument returns argument name of a tool call as the client sent it.
// The SDK hands a handler its arguments after a trip through
// map[string]any, which rounds numbers past 2^53: a payload is taken from
// the request instead.
func rawArgument(req *mcp.CallToolRequest, name string) (json.RawMessage, bool) {
	if req == nil || req.Params == nil {
		return nil, false
	}
	var args map[string]json.RawMessage
	if json.Unmarshal(req.Params.Arguments, &args) != nil {
		return nil, false
	}
	v, ok := args[name]
	return v, ok
}

func (s *Server) addTools() {
	ro := &mcp.ToolAnnotations{ReadOnlyHint: true}
	addTool(s.srv, &mcp.Tool{Name: "send", Title: "Send a prompt", Description: "Send a prompt to a provider as a durable run and return at once with its id and resource URI. " +
		"The run goes on whatever happens to you or this server. To be woken when it ends subscribe to the returned uri; or call wait; read the answer with read."}, s.send)
	addTool(s.srv, &mcp.Tool{Name: "status", Title: "Run status", Annotations: ro, Description: "The status of a run (or of every run of a session): status, phase, attempt, error class, last progress. It never blocks."}, s.status)
	addTool(s.srv, &mcp.Tool{Name: "read", Title: "Read an answer", Annotations: ro, Description: "Read a run's answer text, one page at a time: call again with the returned cursor while more is true. " +
		"Works while the run is still going (the answer so far) and after it ended (final is true at the end)."}, s.read)
	addTool(s.srv, &mcp.Tool{Name: "wait", Title: "Wait for a run", Annotations: ro, Description: "Wait until a run ends, at most timeoutSeconds (capped at 50). " +
		"Returns state ended, or still_running with a cursor when the timeout passed first: that is not a failure, the run goes on; call wait again or subscribe to its uri."}, s.wait)
	addTool(s.srv, &mcp.Tool{Name: "cancel", Title: "Cancel a run", Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true)}, Description: "Cancel a run: a queued one is dropped, a running one is stopped. Returns the run."}, s.cancelRun)
	addTool(s.srv, &mcp.Tool{Name: "doctor", Title: "Diagnose", Annotations: ro, Description: "Diagnose a session (or a run's session): what happened and the one next action, with the exact command. It never changes anything."}, s.doctor)
	addTool(s.srv, &mcp.Tool{Name: "runs_list", Title: "List runs", Annotations: ro, Description: "List the runs in this server's scope, newest first, filtered by status, provider, session, tag, since or failed, a page at a time (pass nextCursor back as cursor)."}, s.list)
	addTool(s.srv, &mcp.Tool{Name: "retry", Title: "Retry a run", Description: "Send a finished run's input again as a new run in the same session. " +
		"Refused (side_effects) when a side-effecting tool call of the run settled, unless allowSideEffects. Idempotent: a second retry returns the same new run."}, s.retry)
	addExactTool(s.srv, &mcp.Tool{Name: "inbox_post", Title: "Post to an inbox", Description: "Post an item to a session's inbox (a repeat of the same key and type is dropped)."}, s.post)
	addExactTool(s.srv, &mcp.Tool{Name: "inbox_poll", Title: "Poll an inbox", Description: "Lease items from a session's inbox (run.completed, run.failed, posted events). Handle each, then call inbox_ack with its id and epoch; an item not acked before its lease ends is delivered again."}, s.poll)
	addExactTool(s.srv, &mcp.Tool{Name: "inbox_ack", Title: "Ack an inbox item", Description: "Settle a leased inbox item: done, error, release or retry, naming the epoch it was leased with."}, s.ack)
}

func ptr[T any](v T) *T { return &v }

func (s *Server) send(ctx context.Context, _ *mcp.CallToolRequest, in SendIn) (*mcp.CallToolResult, RunInfo, error) {
	if in.Prompt == "" {
		return nil, RunInfo{}, invalid("prompt is required")
	}
	req := apitype.CreateRunRequest{Prompt: in.Prompt, Provider: in.Provider, Model: in.Model, Policy: belay.Policy(in.Policy), Meta: in.Meta}
	if !req.Policy.Valid() {
		return nil, RunInfo{}, invalid("policy %q is not enqueue, reject, interrupt or replace", in.Policy)
	}
	d, err := parseDeadline(in.Deadline)
	if err != nil {
		return nil, RunInfo{}, err
	}
	req.Deadline = d
	if len(in.IdempotencyKey) > 200 {
		return nil, RunInfo{}, invalid("idempotencyKey is at most 200 bytes")
	}
	if in.Script != nil {
		b, err := json.Marshal(in.Script)
		if err != nil {
			return nil, RunInfo{}, invalid("script: %v", err)
		}
		req.Script = b
	}
	req.Tags = s.runTags(in.Tags)
	if err := belay.CheckTags(req.Tags, req.Meta); err != nil {
		return nil, RunInfo{}, invalid("%v", err)
	}
	switch {
	case in.Session != "":
		if err := s.allowSession(ctx, in.Session); err != nil {
			return nil, RunInfo{}, err
		}
		req.Session = in.Session
	case in.Provider == "":
		return nil, RunInfo{}, invalid("give provider for a new session, or session to continue one")
	case !s.scope.All && len(s.scope.Tags) == 0:
		return nil, RunInfo{}, s.outOfScope("a new session", "<id>")
	}
	run, err := s.c.CreateRun(ctx, req, in.IdempotencyKey)
	if err != nil {
		return nil, RunInfo{}, toolError(err)
	}
	s.log.Info("run sent", "run", run.ID, "session", run.Session, "provider", run.Provider)
	return nil, runInfo(run), nil
}

func (s *Server) retry(ctx context.Context, _ *mcp.CallToolRequest, in RetryIn) (*mcp.CallToolResult, RetryOut, error) {
	if _, err := s.allowedRun(ctx, in.Run); err != nil {
		return nil, RetryOut{}, err
	}
	req := apitype.RetryRequest{AllowSideEffects: in.AllowSideEffects, Policy: belay.Policy(in.Policy)}
	if !req.Policy.Valid() {
		return nil, RetryOut{}, invalid("policy %q is not enqueue, reject, interrupt or replace", in.Policy)
	}
	d, err := parseDeadline(in.Deadline)
	if err != nil {
		return nil, RetryOut{}, err
	}
	req.Deadline = d
	res, err := s.c.RetryRun(ctx, in.Run, req, in.IdempotencyKey)
	if err != nil {
		return nil, RetryOut{}, toolError(err)
	}
	return nil, RetryOut{RunInfo: runInfo(res.Run), Retries: in.Run, MayRepeat: res.MayRepeat}, nil
}

func (s *Server) status(ctx context.Context, _ *mcp.CallToolRequest, in StatusIn) (*mcp.CallToolResult, StatusOut, error) {
	switch {
	case in.Run != "" && in.Session != "", in.Run == "" && in.Session == "":
		return nil, StatusOut{}, invalid("give run or session")
	case in.Run != "":
		run, err := s.allowedRun(ctx, in.Run)
		if err != nil {
			return nil, StatusOut{}, err
		}
		ri := runInfo(run)
		return nil, StatusOut{Run: &ri}, nil
	}
	if err := s.allowSession(ctx, in.Session); err != nil {
		return nil, StatusOut{}, err
	}
	runs, err := s.c.Runs(ctx, in.Session)
	if err != nil {
		return nil, StatusOut{}, toolError(err)
	}
	out := StatusOut{Runs: []RunInfo{}}
	for _, r := range runs {
		out.Runs = append(out.Runs, runInfo(r))
	}
	return nil, out, nil
}

func (s *Server) read(ctx context.Context, _ *mcp.CallToolRequest, in ReadIn) (*mcp.CallToolResult, ReadOut, error) {
	run, err := s.allowedRun(ctx, in.Run)
	if err != nil {
		return nil, ReadOut{}, err
	}
	off := 0
	if in.Cursor != "" {
		if off, err = strconv.Atoi(in.Cursor); err != nil || off < 0 {
			return nil, ReadOut{}, invalid("cursor %q is not one read returned", in.Cursor)
		}
	}
	limit := in.MaxBytes
	switch {
	case limit == 0:
		limit = DefaultReadBytes
	case limit < 0 || limit > MaxReadBytes:
		return nil, ReadOut{}, invalid("maxBytes is 1-%d", MaxReadBytes)
	}
	text, total, err := s.answerPage(ctx, run.Run, off, limit)
	if err != nil {
		return nil, ReadOut{}, toolError(err)
	}
	next := off + len(text)
	if off > total {
		next = total
	}
	out := ReadOut{Run: run.ID, Status: string(run.Status), Text: text, Cursor: strconv.Itoa(next), More: next < total, Total: total}
	out.Final = run.Status.Terminal() && !out.More
	if !run.Status.Terminal() && !out.More {
		out.Note = "the run is still " + string(run.Phase) + ": this is the answer so far; read again from cursor later"
	}
	if off > total {
		out.Note = fmt.Sprintf("cursor %d is past the answer's end (%d bytes): a new attempt may have started the answer again; read from 0", off, total)
	}
	return nil, out, nil
}

func (s *Server) wait(ctx context.Context, _ *mcp.CallToolRequest, in WaitIn) (*mcp.CallToolResult, WaitOut, error) {
	if _, err := s.allowedRun(ctx, in.Run); err != nil {
		return nil, WaitOut{}, err
	}
	d := DefaultWait
	if in.Timeout < 0 {
		return nil, WaitOut{}, invalid("timeoutSeconds must not be negative")
	}
	if in.Timeout > 0 {
		d = waitFor(in.Timeout)
	}
	run, err := s.c.WaitRun(ctx, in.Run, d)
	if err != nil {
		return nil, WaitOut{}, toolError(err)
	}
	_, total, err := s.answerPage(ctx, run.Run, 0, 0)
	if err != nil {
		return nil, WaitOut{}, toolError(err)
	}
	out := WaitOut{State: "ended", Run: runInfo(run), Cursor: strconv.Itoa(total), Next: "call read with cursor 0 for the answer"}
	if !run.Status.Terminal() {
		out.State = "still_running"
		out.Next = "the run goes on: call wait again, or subscribe to " + RunURI(run.ID) + " to be woken; read from cursor 0 gets the answer so far"
	}
	return nil, out, nil
}

func (s *Server) cancelRun(ctx context.Context, _ *mcp.CallToolRequest, in CancelIn) (*mcp.CallToolResult, RunInfo, error) {
	if _, err := s.allowedRun(ctx, in.Run); err != nil {
		return nil, RunInfo{}, err
	}
	run, err := s.c.CancelRun(ctx, in.Run, in.Reason)
	if err != nil {
		return nil, RunInfo{}, toolError(err)
	}
	return nil, runInfo(run), nil
}

func (s *Server) doctor(ctx context.Context, _ *mcp.CallToolRequest, in DoctorIn) (*mcp.CallToolResult, DoctorOut, error) {
	sid := in.Session
	switch {
	case in.Run != "" && in.Session != "", in.Run == "" && in.Session == "":
		return nil, DoctorOut{}, invalid("give run or session")
	case in.Run != "":
		run, err := s.allowedRun(ctx, in.Run)
		if err != nil {
			return nil, DoctorOut{}, err
		}
		sid = run.Session
	default:
		if err := s.allowSession(ctx, sid); err != nil {
			return nil, DoctorOut{}, err
		}
	}
	rep, err := s.c.Doctor(ctx, sid)
	if err != nil {
		return nil, DoctorOut{}, toolError(err)
	}
	return nil, DoctorOut{Session: rep.Session, State: rep.State, NextAction: string(rep.NextAction), Reason: rep.Reason,
		Command: rep.Command, Diagnostics: rep.Diagnostics, Unsettled: rep.Deliveries.Unsettled}, nil
}

func (s *Server) list(ctx context.Context, _ *mcp.CallToolRequest, in ListIn) (*mcp.CallToolResult, ListOut, error) {
	q := apitype.RunQuery{Sort: in.Sort, Cursor: in.Cursor, Limit: in.Limit}
	q.Status, q.Provider, q.Session, q.Tag, q.Failed = belay.RunStatus(in.Status), in.Provider, in.Session, in.Tag, in.Failed
	switch {
	case q.Limit == 0:
		q.Limit = 20
	case q.Limit < 0 || q.Limit > 200:
		return nil, ListOut{}, invalid("limit is 1-200")
	}
	if in.Since != "" {
		if d, err := time.ParseDuration(in.Since); err == nil && d >= 0 {
			q.Since = time.Now().Add(-d)
		} else if t, err := time.Parse(time.RFC3339Nano, in.Since); err == nil {
			q.Since = t
		} else {
			return nil, ListOut{}, invalid("since %q: want a duration such as 24h or an RFC 3339 time", in.Since)
		}
	}
	if q.Session != "" && ids.Check(ids.Session, q.Session) != nil {
		return nil, ListOut{}, invalid("session %q is not a session id (ses_...)", q.Session)
	}
	if err := s.scopeFilter(&q.RunFilter); err != nil {
		return nil, ListOut{}, err
	}
	page, err := s.c.ListRuns(ctx, q)
	if err != nil {
		return nil, ListOut{}, toolError(err)
	}
	out := ListOut{Runs: []RunInfo{}, NextCursor: page.NextCursor}
	for _, r := range page.Runs {
		out.Runs = append(out.Runs, runInfo(r))
	}
	return nil, out, nil
}

func (s *Server) post(ctx context.Context, req *mcp.CallToolRequest, in PostIn) (*mcp.CallToolResult, belay.Delivery, error) {
	if raw, ok := rawArgument(req, "data"); ok {
		in.Data = raw
	}
	if in.Type == "" {
		return nil, belay.Delivery{}, invalid("type is required")
	}
	if err := s.allowSession(ctx, in.Session); err != nil {
		return nil, belay.Delivery{}, err
	}
	d, err := s.c.Post(ctx, in.Session, apitype.PostRequest{Type: in.Type, Key: in.Key, Priority: in.Priority, Data: in.Data})
	if err != nil {
		return nil, belay.Delivery{}, toolError(err)
	}
	return nil, d, nil
}

func (s *Server) poll(ctx context.Context, _ *mcp.CallToolRequest, in PollIn) (*mcp.CallToolResult, DeliveriesOut, error) {
	if err := s.allowSession(ctx, in.Session); err != nil {
		return nil, DeliveriesOut{}, err
	}
	if in.TTL < 0 || in.Wait < 0 || in.Max < 0 {
		return nil, DeliveriesOut{}, invalid("ttlSeconds, waitSeconds and max must not be negative")
	}
	req := apitype.LeaseRequest{Session: in.Session, Owner: in.Owner, Max: in.Max, TTL: apitype.Duration(5 * time.Minute)}
	if req.Owner == "" {
		req.Owner = s.sub
	}
	if req.Max == 0 {
		req.Max = 10
	}
	if in.TTL > 0 {
		ttl, err := seconds(in.TTL, "ttlSeconds")
		if err != nil {
			return nil, DeliveriesOut{}, err
		}
		req.TTL = apitype.Duration(ttl)
	}
	req.Wait = apitype.Duration(waitFor(in.Wait))
	ds, err := s.c.Lease(ctx, req)
	if err != nil {
		return nil, DeliveriesOut{}, toolError(err)
	}
	if ds == nil {
		ds = []belay.Delivery{}
	}
	return nil, DeliveriesOut{Deliveries: ds}, nil
}

func (s *Server) ack(ctx context.Context, _ *mcp.CallToolRequest, in AckIn) (*mcp.CallToolResult, belay.Delivery, error) {
	if err := ids.Check(ids.Delivery, in.Delivery); err != nil {
		return nil, belay.Delivery{}, invalid("delivery: %v", err)
	}
	if err := s.allowSession(ctx, in.Session); err != nil {
		return nil, belay.Delivery{}, err
	}
	ds, err := s.c.Inbox(ctx, in.Session, "")
	if err != nil {
		return nil, belay.Delivery{}, toolError(err)
	}
	found := false
	for _, d := range ds {
		found = found || d.ID == in.Delivery
	}
	if !found {
		return nil, belay.Delivery{}, invalid("delivery %s is not in session %s", in.Delivery, in.Session)
	}
	kind := belay.SettleKind(in.Kind)
	if kind == "" {
		kind = belay.SettleDone
	}
	if in.Delay < 0 {
		return nil, belay.Delivery{}, invalid("delaySeconds must not be negative")
	}
	delay, err := seconds(in.Delay, "delaySeconds")
	if err != nil {
		return nil, belay.Delivery{}, err
	}
	d, err := s.c.Settle(ctx, in.Delivery, apitype.SettleRequest{Kind: kind, Epoch: in.Epoch, Result: in.Result, Delay: apitype.Duration(delay)})
	if err != nil {
		return nil, belay.Delivery{}, toolError(err)
	}
	return nil, d, nil
}

// parseDeadline reads a tool's deadline, a positive duration; empty is
// none (the daemon's default).
func parseDeadline(s string) (apitype.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, invalid("deadline %q: want a positive duration such as 90m", s)
	}
	return apitype.Duration(d), nil
}

// seconds converts a tool argument given in seconds (not negative). One
// past what a time.Duration holds (about 292 years) is refused, not
// wrapped round to a negative duration.
func seconds(v float64, name string) (time.Duration, error) {
	ns := v * float64(time.Second)
	// float64(math.MaxInt64) is 2^63: every product below it converts.
	if v < 0 || math.IsNaN(v) || ns >= float64(math.MaxInt64) {
		return 0, invalid("%s must be a number of seconds from 0 to %d (about 292 years)", name, math.MaxInt64/int64(time.Second))
	}
	return time.Duration(ns), nil
}

// waitFor is how long to wait for v seconds (not negative): at most
// MaxWait, however large v is.
func waitFor(v float64) time.Duration {
	if v >= MaxWait.Seconds() {
		return MaxWait
	}
	return time.Duration(v * float64(time.Second))
}
