package runtime

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/provider"
	"github.com/belayhq/belay/provider/fake"
)

func TestRetryMakesOneNewRunWithTheSameInput(t *testing.T) {
	t.Parallel()
	var fail atomic.Bool
	fail.Store(true)
	var prompts []string
	p := &funcProvider{name: "flaky", run: func(ctx context.Context, req provider.Request, emit func(provider.Event) error) error {
		prompts = append(prompts, req.Prompt)
		if fail.Load() {
			return provider.Errorf(belay.ClassInvalidRequest, "bad request")
		}
		return echo(ctx, req, emit)
	}}
	b := setup(t, Options{}, p)
	orig := b.submit(SubmitRequest{Provider: "flaky", Prompt: "the question", Script: json.RawMessage(`{"x":1}`)})
	b.waitStatus(orig.ID, belay.RunFailed)
	fail.Store(false)

	ctx := context.Background()
	run, tools, err := b.rt.Retry(ctx, RetryRequest{Run: orig.ID})
	require.NoError(t, err)
	require.Empty(t, tools)
	require.NotEqual(t, orig.ID, run.ID)
	require.Equal(t, orig.Session, run.Session)
	run = b.waitStatus(run.ID, belay.RunComplete)
	in, err := b.st.RunInput(ctx, run.ID)
	require.NoError(t, err)
	require.JSONEq(t, `{"prompt":"the question","script":{"x":1}}`, string(in))

	again, _, err := b.rt.Retry(ctx, RetryRequest{Run: orig.ID})
	require.NoError(t, err)
	require.Equal(t, run.ID, again.ID, "the default key retry-RUN makes the retry idempotent")
	require.Equal(t, "retry-"+orig.ID, again.IdempotencyKey)
	require.Equal(t, []string{"the question", "the question"}, prompts)
}

func TestRetryRefusesSettledSideEffectsUnlessAllowed(t *testing.T) {
	t.Parallel()
	var effects atomic.Int32
	p := &funcProvider{name: "agent", run: func(ctx context.Context, req provider.Request, emit func(provider.Event) error) error {
		if err := emit(provider.Event{Kind: provider.ToolCall, Call: &provider.Call{ID: "c1", Name: "send_email", SideEffect: true}}); err != nil {
			return err
		}
		effects.Add(1)
		if err := emit(provider.Event{Kind: provider.ToolResult, Result: &provider.Result{CallID: "c1"}}); err != nil {
			return err
		}
		return provider.Errorf(belay.ClassInvalidRequest, "then it failed")
	}}
	b := setup(t, Options{}, p)
	orig := b.submit(SubmitRequest{Provider: "agent", Prompt: "p"})
	b.waitStatus(orig.ID, belay.RunFailed)

	ctx := context.Background()
	_, tools, err := b.rt.Retry(ctx, RetryRequest{Run: orig.ID})
	var se *belay.SideEffectsError
	require.ErrorAs(t, err, &se)
	require.ErrorIs(t, err, belay.ErrSideEffects)
	require.Equal(t, []string{"send_email"}, se.Tools)
	require.Equal(t, []string{"send_email"}, tools)
	require.Equal(t, int32(1), effects.Load(), "a refused retry runs nothing")

	run, tools, err := b.rt.Retry(ctx, RetryRequest{Run: orig.ID, AllowSideEffects: true})
	require.NoError(t, err)
	require.Equal(t, []string{"send_email"}, tools, "what may repeat is listed")
	b.waitStatus(run.ID, belay.RunFailed)
	require.Equal(t, int32(2), effects.Load())
}

func TestRetryRefusesAnUnfinishedRun(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{}, &funcProvider{name: "hang", run: hang})
	run := b.submit(SubmitRequest{Provider: "hang"})
	_, _, err := b.rt.Retry(context.Background(), RetryRequest{Run: run.ID})
	require.ErrorIs(t, err, belay.ErrActive)
	_, _, err = b.rt.Retry(context.Background(), RetryRequest{Run: "run_01jfz0000000000000000000aa"})
	require.ErrorIs(t, err, belay.ErrNotFound)
}

func TestIdempotencyKeyReuseWithAnotherInputConflicts(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{}, &funcProvider{name: "echo", run: echo})
	a := b.submit(SubmitRequest{Provider: "echo", Prompt: "x", IdempotencyKey: "k"})
	ctx := context.Background()
	cases := map[string]SubmitRequest{
		"prompt":  {Provider: "echo", Prompt: "y", IdempotencyKey: "k"},
		"options": {Provider: "echo", Prompt: "x", Options: json.RawMessage(`{"temperature":1}`), IdempotencyKey: "k"},
		"model":   {Provider: "echo", Model: "m2", Prompt: "x", IdempotencyKey: "k"},
		"script":  {Session: a.Session, Prompt: "x", Script: json.RawMessage(`{}`), IdempotencyKey: "k"},
	}
	for what, req := range cases {
		_, err := b.rt.Submit(ctx, req)
		var ce *IdempotencyConflictError
		require.ErrorAs(t, err, &ce, what)
		require.ErrorIs(t, err, belay.ErrExists)
		require.Equal(t, what, ce.What)
		require.Equal(t, a.ID, ce.Run)
	}
	same, err := b.rt.Submit(ctx, SubmitRequest{Session: a.Session, Prompt: "x", IdempotencyKey: "k"})
	require.NoError(t, err)
	require.Equal(t, a.ID, same.ID)
}

func TestSubmitValidatesAtTheDoor(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{}, fake.New(fake.Options{Name: "fake"}))
	ctx := context.Background()
	cases := map[string]SubmitRequest{
		"model":  {Provider: "fake", Model: "gpt-nope"},
		"script": {Provider: "fake", Script: json.RawMessage(`{"steps":[{"kind":"stall"}]}`)},
		// A browser option (belay send --provider fake --site chatgpt) for
		// a provider that would ignore it.
		"options": {Provider: "fake", Options: json.RawMessage(`{"site":"chatgpt","site_url":""}`)},
	}
	for field, req := range cases {
		_, err := b.rt.Submit(ctx, req)
		require.ErrorIs(t, err, belay.ErrInvalid, field)
		var fe *provider.FieldError
		require.ErrorAs(t, err, &fe, field)
		require.Equal(t, field, fe.Field)
	}
	sessions, err := b.st.Sessions(ctx, belay.SessionFilter{})
	require.NoError(t, err)
	require.Empty(t, sessions, "a refused request leaves nothing behind")
	var ue *provider.UnknownError
	_, err = b.rt.Submit(ctx, SubmitRequest{Provider: "nope"})
	require.ErrorAs(t, err, &ue)
	require.Equal(t, []string{"fake"}, ue.Known)
}

// siteProvider stands in for the browser provider: it reads the browser
// options.
type siteProvider struct{ funcProvider }

func (*siteProvider) ReadsSiteOptions() {}

// TestSiteOptionsOnlyWhereRead: browser options are refused where they
// would be ignored (a session to create for another provider, a run's
// own options), and nowhere else: a session that already holds them (made
// before the check) still takes runs, and a browser session takes a run
// of another provider that sets none.
func TestSiteOptionsOnlyWhereRead(t *testing.T) {
	t.Parallel()
	br := &siteProvider{funcProvider{name: "br", run: echo}}
	b := setup(t, Options{}, &funcProvider{name: "fake", run: echo}, br)
	ctx := context.Background()
	site := json.RawMessage(`{"site":"chatgpt"}`)

	require.ErrorIs(t, b.rt.CheckSession("fake", site), belay.ErrInvalid)
	require.NoError(t, b.rt.CheckSession("br", site))
	require.NoError(t, b.rt.CheckSession("fake", json.RawMessage(`{"cwd":"/w"}`)))
	var ue *provider.UnknownError
	require.ErrorAs(t, b.rt.CheckSession("nope", nil), &ue)

	old, err := b.st.CreateSession(ctx, belay.SessionInput{Provider: "fake", Options: site})
	require.NoError(t, err)
	_, err = b.rt.Submit(ctx, SubmitRequest{Session: old.ID, Prompt: "hi"})
	require.NoError(t, err, "a session holding them takes runs")
	_, err = b.rt.Submit(ctx, SubmitRequest{Session: old.ID, Prompt: "hi", Options: json.RawMessage(`{"site":null}`)})
	require.NoError(t, err)

	brs, err := b.st.CreateSession(ctx, belay.SessionInput{Provider: "br", Options: site})
	require.NoError(t, err)
	_, err = b.rt.Submit(ctx, SubmitRequest{Session: brs.ID, Provider: "fake", Prompt: "hi"})
	require.NoError(t, err, "a browser session's run on another provider that sets none")
	_, err = b.rt.Submit(ctx, SubmitRequest{Session: brs.ID, Provider: "fake", Prompt: "hi", Options: site})
	require.ErrorIs(t, err, belay.ErrInvalid, "a run's own site option for a provider that ignores it")
	_, err = b.rt.Submit(ctx, SubmitRequest{Session: brs.ID, Prompt: "hi", Options: site})
	require.NoError(t, err)
}

func TestFailureKeepsTheProviderErrorAndDoctorHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	p := &funcProvider{name: "busy", run: func(ctx context.Context, req provider.Request, emit func(provider.Event) error) error {
		return &provider.Error{Class: belay.ClassRateLimited, Message: "busy: HTTP 429: slow down", Status: 429, RetryAfter: 7 * time.Minute}
	}}
	b := setup(t, Options{Retry: RetryPolicy{MaxRetries: 1, Base: time.Second, Max: time.Second}}, p)
	run := b.submit(SubmitRequest{Provider: "busy"})
	require.Equal(t, 7*time.Minute, b.sleeping(), "the retry honours Retry-After")
	b.clk.Advance(7 * time.Minute)
	run = b.waitStatus(run.ID, belay.RunFailed)
	require.Equal(t, &belay.RunError{Class: belay.ClassRateLimited, Message: "busy: HTTP 429: slow down", Status: 429, RetryAfterSeconds: 420}, run.Error)

	rep, err := b.rt.Doctor(context.Background(), run.Session)
	require.NoError(t, err)
	require.Equal(t, "retry_later", string(rep.NextAction))
	require.Contains(t, rep.Reason, "7m", "the wait is the provider's Retry-After, not the default backoff")
	require.Equal(t, run.EndedAt.Add(7*time.Minute).UTC(), rep.RetryAt)
	require.Equal(t, "belay runs retry "+run.ID, rep.Command)
}
