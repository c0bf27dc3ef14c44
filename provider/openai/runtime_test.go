package openai

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/clock"
	"github.com/belayhq/belay/provider"
	"github.com/belayhq/belay/provider/openai/openaitest"
	"github.com/belayhq/belay/runtime"
	"github.com/belayhq/belay/store/fsstore"
)

// rtBundle is a real runtime on a real clock and an fsstore in a temp dir,
// running one openai provider.
type rtBundle struct {
	t  *testing.T
	st *fsstore.Store
	rt *runtime.Runtime
}

func startRuntime(t *testing.T, p *Provider, opts runtime.Options) *rtBundle {
	t.Helper()
	st, err := fsstore.Open(context.Background(), t.TempDir(), fsstore.Options{Purpose: "test"})
	require.NoError(t, err)
	opts.Store = st
	opts.Providers = provider.Registry{p.Name(): p}
	opts.Clock = clock.Real
	opts.PruneEvery = -1
	rt, err := runtime.New(opts)
	require.NoError(t, err)
	require.NoError(t, rt.Start(context.Background()))
	b := &rtBundle{t: t, st: st, rt: rt}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		require.NoError(t, rt.Stop(ctx))
		require.NoError(t, st.Close())
	})
	return b
}

// runToEnd submits a prompt and waits for the run to end.
func (b *rtBundle) runToEnd(prompt string) (belay.Run, []belay.Event) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	run, err := b.rt.Submit(ctx, runtime.SubmitRequest{Provider: "openai", Prompt: prompt})
	require.NoError(b.t, err)
	run, err = b.rt.Wait(ctx, run.ID)
	require.NoError(b.t, err)
	evs, err := b.st.Events(ctx, run.Session, 0, 0)
	require.NoError(b.t, err)
	return run, evs
}

func ofType(evs []belay.Event, typ string) []belay.Event {
	var out []belay.Event
	for _, e := range evs {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

// TestRuntimeRateLimitThenSuccess: a 429 with Retry-After: 1 is retried
// by the runtime no sooner than a second later, then succeeds.
func TestRuntimeRateLimitThenSuccess(t *testing.T) {
	t.Parallel()
	srv := server(t, openaitest.Options{Reply: "after the limit", Failures: []openaitest.Failure{{Status: 429, RetryAfter: "1", Type: "requests", Code: "rate_limit_exceeded"}}})
	p := newProvider(t, Config{BaseURL: srv.URL})
	b := startRuntime(t, p, runtime.Options{Retry: runtime.RetryPolicy{MaxRetries: 3, Base: 10 * time.Millisecond, Max: 20 * time.Millisecond}})
	start := time.Now()
	run, evs := b.runToEnd("hi")
	require.Equal(t, belay.RunComplete, run.Status, run.Reason)
	require.GreaterOrEqual(t, time.Since(start), time.Second, "Retry-After is honoured over the short backoff")
	errs := ofType(evs, belay.EventRunError)
	require.Len(t, errs, 1)
	var data struct {
		Class      belay.ErrorClass `json:"class"`
		RetryAfter float64          `json:"retryAfterSeconds"`
	}
	require.NoError(t, json.Unmarshal(errs[0].Data, &data))
	require.Equal(t, belay.ClassRateLimited, data.Class)
	require.InDelta(t, 1.0, data.RetryAfter, 0.01)
	require.Len(t, srv.Requests(), 2)
}

// TestRuntimeServerErrorStorm: 500s until the retries run out: the run
// fails with class transient.
func TestRuntimeServerErrorStorm(t *testing.T) {
	t.Parallel()
	storm := make([]openaitest.Failure, 10)
	for i := range storm {
		storm[i] = openaitest.Failure{Status: 500, Type: "server_error", Message: "The server had an error while processing your request."}
	}
	srv := server(t, openaitest.Options{Failures: storm})
	p := newProvider(t, Config{BaseURL: srv.URL})
	b := startRuntime(t, p, runtime.Options{Retry: runtime.RetryPolicy{MaxRetries: 3, Base: 10 * time.Millisecond, Max: 20 * time.Millisecond}})
	run, evs := b.runToEnd("hi")
	require.Equal(t, belay.RunFailed, run.Status)
	require.NotNil(t, run.Error)
	require.Equal(t, belay.ClassTransient, run.Error.Class)
	require.Contains(t, run.Reason, "3 retries exhausted")
	require.Len(t, ofType(evs, belay.EventRunError), 4)
	require.Len(t, srv.Requests(), 4)
}

// TestRuntimeWatchdogStall: the server stalls mid-stream far longer than
// the streaming tier; the runtime's watchdog fires, and since no side
// effect could repeat the run is resent and completes.
func TestRuntimeWatchdogStall(t *testing.T) {
	t.Parallel()
	srv := server(t, openaitest.Options{Reply: "a stalled then recovered answer", StallAfter: 3, Stall: time.Minute})
	p := newProvider(t, Config{BaseURL: srv.URL})
	b := startRuntime(t, p, runtime.Options{
		Tiers: runtime.Tiers{AwaitingFirst: 10 * time.Second, Streaming: 500 * time.Millisecond, AfterTurnEnd: 10 * time.Second},
	})
	run, evs := b.runToEnd("hi")
	require.Equal(t, belay.RunComplete, run.Status, run.Reason)
	require.Equal(t, 2, run.Attempt)
	wd := ofType(evs, belay.EventRunWatchdog)
	require.Len(t, wd, 1)
	require.Contains(t, string(wd[0].Data), `"streaming"`)
	rec := ofType(evs, belay.EventRunRecovery)
	require.Len(t, rec, 1)
	require.Contains(t, string(rec[0].Data), `"resend"`)
	require.Len(t, srv.Requests(), 2)
}

// TestRuntimeResponsesResume: the background stream breaks and every
// in-process reconnect and poll fails too, so the provider fails transient
// with its ref reported; the runtime's retry resumes the response from the
// cursor (starting_after) and the answer completes, exactly once, without
// a second create.
func TestRuntimeResponsesResume(t *testing.T) {
	t.Parallel()
	srv := server(t, openaitest.Options{Reply: answer, Chunk: 5, CutAfter: 7, GetFailures: DefaultStreamRetries + maxPollFailures})
	p := responsesProvider(t, srv, Config{})
	b := startRuntime(t, p, runtime.Options{Retry: runtime.RetryPolicy{MaxRetries: 3, Base: 10 * time.Millisecond, Max: 20 * time.Millisecond}})
	run, evs := b.runToEnd("hi")
	require.Equal(t, belay.RunComplete, run.Status, run.Reason)
	require.Equal(t, RefKind, run.Ref.Kind)
	require.Equal(t, "resp_test1", run.Ref.ID)
	var text string
	for _, e := range ofType(evs, belay.EventRunText) {
		var d struct{ Text string }
		require.NoError(t, json.Unmarshal(e.Data, &d))
		text += d.Text
	}
	require.Equal(t, answer, text)
	creates := 0
	for _, r := range srv.Requests() {
		if r.Method == "POST" && r.Path == "/v1/responses" {
			creates++
		}
	}
	require.Equal(t, 1, creates)
	recs := ofType(evs, belay.EventRunRecovery)
	require.Len(t, recs, 1)
	require.Contains(t, string(recs[0].Data), `"resume"`)
	resumes := queries(srv, "GET", "/responses/resp_test1")
	require.Equal(t, "6", resumes[len(resumes)-1].Get("starting_after"))
}
