package openai

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/provider"
	"github.com/belayhq/belay/provider/openai/openaitest"
)

const answer = "The quick brown fox jumps over the lazy dog."

func responsesProvider(t *testing.T, srv *openaitest.Server, cfg Config) *Provider {
	t.Helper()
	cfg.BaseURL, cfg.API = srv.URL, APIResponses
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 20 * time.Millisecond
	}
	return newProvider(t, cfg)
}

// lastRef returns the last conversation ref a run reported.
func lastRef(t *testing.T, rec *recorder) belay.ConversationRef {
	t.Helper()
	refs := rec.kinds(provider.RefUpdate)
	require.NotEmpty(t, refs)
	return *refs[len(refs)-1].Ref
}

func queries(srv *openaitest.Server, method, pathPart string) []url.Values {
	var out []url.Values
	for _, r := range srv.Requests() {
		if r.Method == method && strings.Contains(r.Path, pathPart) {
			q, _ := url.ParseQuery(r.Query)
			out = append(out, q)
		}
	}
	return out
}

func TestResponsesText(t *testing.T) {
	t.Parallel()
	srv := server(t, openaitest.Options{Reply: answer, Chunk: 5})
	p := responsesProvider(t, srv, Config{})
	require.Equal(t, provider.Capabilities{Resume: true, Cancel: true, Tools: true}, p.Capabilities())
	rec, err := run(t, p, provider.Request{Prompt: "fox?", Options: json.RawMessage(`{"system":"terse","max_tokens":99}`)})
	require.NoError(t, err)
	require.Equal(t, answer, rec.text())
	require.Equal(t, "stop", rec.kinds(provider.TurnEnd)[0].StopReason)
	require.Equal(t, provider.TurnEnd, rec.all()[len(rec.all())-1].Kind, "the turn end is the last event")
	require.Len(t, rec.kinds(provider.Usage), 1)

	// Every event's cursor is reported, increasing, under one response id.
	refs := rec.kinds(provider.RefUpdate)
	require.NotEmpty(t, refs)
	for i, ev := range refs {
		require.Equal(t, RefKind, ev.Ref.Kind)
		require.Equal(t, "resp_test1", ev.Ref.ID)
		require.Equal(t, strconv.Itoa(i), ev.Ref.Cursor)
	}

	var body map[string]any
	require.NoError(t, json.Unmarshal(srv.Requests()[0].Body, &body))
	require.Equal(t, true, body["background"])
	require.Equal(t, true, body["stream"])
	require.Equal(t, true, body["store"])
	require.Equal(t, "terse", body["instructions"])
	require.EqualValues(t, 99, body["max_output_tokens"])
	require.Equal(t, []any{map[string]any{"role": "user", "content": "fox?"}}, body["input"])
}

func TestResponsesToolCalls(t *testing.T) {
	t.Parallel()
	srv := server(t, openaitest.Options{Reply: "Checking.", ToolCalls: []openaitest.ToolCall{{ID: "call_1", Name: "get_weather", Arguments: `{"city":"Paris"}`}}})
	p := responsesProvider(t, srv, Config{})
	rec, err := run(t, p, provider.Request{Prompt: "weather?"})
	require.NoError(t, err)
	calls := rec.kinds(provider.ToolCall)
	require.Len(t, calls, 1)
	require.Equal(t, provider.Call{ID: "call_1", Name: "get_weather", Input: json.RawMessage(`{"city":"Paris"}`), SideEffect: true}, *calls[0].Call)
	require.Equal(t, "tool_calls", rec.kinds(provider.TurnEnd)[0].StopReason)
}

// TestResponsesReconnect: the connection drops mid-stream; the provider
// resumes it in-process from the last applied sequence number, and every
// event is applied exactly once.
func TestResponsesReconnect(t *testing.T) {
	t.Parallel()
	srv := server(t, openaitest.Options{Reply: answer, Chunk: 5, CutAfter: 7})
	p := responsesProvider(t, srv, Config{})
	rec, err := run(t, p, provider.Request{Prompt: "x"})
	require.NoError(t, err)
	require.Equal(t, answer, rec.text())
	resumes := queries(srv, "GET", "/responses/resp_test1")
	require.Len(t, resumes, 1)
	require.Equal(t, "true", resumes[0].Get("stream"))
	require.Equal(t, "6", resumes[0].Get("starting_after"), "events 0-6 were applied before the cut")
	require.Empty(t, srv.Cancelled())
}

// detach is a cancellation cause that leaves the response running, as a
// daemon shutdown does.
type detach struct{}

func (detach) Error() string { return "daemon stopping" }
func (detach) Unwrap() error { return provider.ErrDetach }

// TestResponsesResumeAfterRestart: a run stops (its daemon stopped) after
// some events; a new Run with Resume and the last reported ref emits only
// the remaining events, asking for starting_after=cursor.
func TestResponsesResumeAfterRestart(t *testing.T) {
	t.Parallel()
	srv := server(t, openaitest.Options{Reply: answer, Chunk: 5, Delay: 5 * time.Millisecond})
	p := responsesProvider(t, srv, Config{})

	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	first := &recorder{}
	var texts atomic.Int32
	first.onText = func(string) {
		if texts.Add(1) == 3 {
			cancel(detach{})
		}
	}
	err := p.Run(ctx, provider.Request{Run: "run_1", Attempt: 1, Prompt: "x"}, first.emit)
	require.ErrorIs(t, err, context.Canceled)
	require.Empty(t, srv.Cancelled(), "a detaching cause leaves the response running")
	ref := lastRef(t, first)
	require.Equal(t, "resp_test1", ref.ID)

	second, err := run(t, p, provider.Request{Run: "run_1", Attempt: 2, Prompt: "x", Resume: true, Ref: ref})
	require.NoError(t, err)
	require.Equal(t, answer, first.text()+second.text(), "no event is lost or repeated")
	require.NotEmpty(t, first.text())
	resumes := queries(srv, "GET", "/responses/resp_test1")
	require.Len(t, resumes, 1)
	require.Equal(t, ref.Cursor, resumes[0].Get("starting_after"))
	n, _ := strconv.Atoi(ref.Cursor)
	for _, ev := range second.kinds(provider.RefUpdate) {
		c, _ := strconv.Atoi(ev.Ref.Cursor)
		require.Greater(t, c, n)
	}
}

// TestResponsesPollFallback: the stream cannot be resumed, so the provider
// polls until the response is done, then emits the rest of the answer.
func TestResponsesPollFallback(t *testing.T) {
	t.Parallel()
	srv := server(t, openaitest.Options{Reply: answer, Chunk: 5, CutAfter: 7, NoResumeStream: true, PollsInProgress: 2})
	p := responsesProvider(t, srv, Config{})
	rec, err := run(t, p, provider.Request{Prompt: "x"})
	require.NoError(t, err)
	require.Equal(t, answer, rec.text(), "the poll emits exactly the missing text")
	polls := 0
	for _, r := range srv.Requests() {
		if r.Method == "GET" && r.Query == "" {
			polls++
		}
	}
	require.Equal(t, 3, polls, "two in_progress polls, then the final one")
	require.NotEmpty(t, rec.kinds(provider.Keepalive), "polls are keepalives, not progress")
	require.Equal(t, "stop", rec.kinds(provider.TurnEnd)[0].StopReason)
}

// TestResponsesMalformedChunk: a malformed event breaks the stream;
// resuming replays it, so the provider ends up polling for the answer.
func TestResponsesMalformedChunk(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := sseServer(t, func(w writer, r *request) {
		calls.Add(1)
		switch {
		case r.Method == "GET" && r.URL.Query().Get("stream") == "true":
			writeSSE(w, "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":2,\"item_id\":\"m\",\"delta\":\"lo\"}\n\n")
			writeSSE(w, "data: {not json\n\n")
		case r.Method == "GET":
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"id":"resp_m","status":"completed","output":[{"type":"message","id":"m","content":[{"type":"output_text","text":"Hello"}]}]}`))
		default:
			writeSSE(w, `data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_m","status":"queued"}}`+"\n\n")
			writeSSE(w, `data: {"type":"response.output_text.delta","sequence_number":1,"item_id":"m","delta":"Hel"}`+"\n\n")
			writeSSE(w, "data: {\"type\": broken\n\n")
		}
	})
	p := newProvider(t, Config{BaseURL: srv.URL + "/v1", API: APIResponses, PollInterval: 10 * time.Millisecond})
	rec, err := run(t, p, provider.Request{Prompt: "x"})
	require.NoError(t, err)
	require.Equal(t, "Hello", rec.text())
}

func TestResponsesCancel(t *testing.T) {
	t.Parallel()
	srv := server(t, openaitest.Options{Reply: strings.Repeat("word ", 200), Delay: 10 * time.Millisecond})
	p := responsesProvider(t, srv, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := &recorder{}
	var once atomic.Bool
	rec.onText = func(string) {
		if once.CompareAndSwap(false, true) {
			cancel()
		}
	}
	err := p.Run(ctx, provider.Request{Run: "run_1", Attempt: 1, Prompt: "x"}, rec.emit)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, []string{"resp_test1"}, srv.Cancelled())
}

func TestResponsesFailures(t *testing.T) {
	t.Parallel()
	failed := func(code string) func(w writer, r *request) {
		return func(w writer, r *request) {
			writeSSE(w, `data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_f","status":"queued"}}`+"\n\n")
			writeSSE(w, `data: {"type":"response.failed","sequence_number":1,"response":{"id":"resp_f","status":"failed","error":{"code":"`+code+`","message":"it broke"}}}`+"\n\n")
		}
	}
	for code, class := range map[string]belay.ErrorClass{
		"server_error":        belay.ClassTransient,
		"rate_limit_exceeded": belay.ClassRateLimited,
		"invalid_prompt":      belay.ClassInvalidRequest,
	} {
		srv := sseServer(t, failed(code))
		p := newProvider(t, Config{BaseURL: srv.URL + "/v1", API: APIResponses})
		rec, err := run(t, p, provider.Request{Prompt: "x"})
		require.Equal(t, class, provider.ClassOf(err), "%s: %v", code, err)
		require.Equal(t, "1", lastRef(t, rec).Cursor, "the cursor is reported before the failure")
	}

	// Resuming a response that is gone: target_lost.
	srv := server(t, openaitest.Options{})
	p := responsesProvider(t, srv, Config{})
	_, err := run(t, p, provider.Request{Prompt: "x", Resume: true, Ref: belay.ConversationRef{Kind: RefKind, ID: "resp_gone", Cursor: "4"}})
	require.Equal(t, belay.ClassTargetLost, provider.ClassOf(err), "%v", err)
	var pe *provider.Error
	require.True(t, errors.As(err, &pe))

	// A ref of another kind cannot be resumed.
	_, err = run(t, p, provider.Request{Prompt: "x", Resume: true, Ref: belay.ConversationRef{Kind: "fake", ID: "x"}})
	require.Equal(t, belay.ClassTargetLost, provider.ClassOf(err))
	_, err = run(t, p, provider.Request{Prompt: "x", Resume: true, Ref: belay.ConversationRef{Kind: RefKind, ID: "resp_x", Cursor: "abc"}})
	require.Equal(t, belay.ClassInvalidRequest, provider.ClassOf(err))
}
