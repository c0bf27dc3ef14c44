package fake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/provider"
)

const ms = time.Millisecond

func TestEchoDefault(t *testing.T) {
	t.Parallel()
	for _, model := range []string{"", "echo"} {
		p := New(Options{})
		require.Equal(t, "fake", p.Name())
		require.Equal(t, provider.Capabilities{Cancel: true, Tools: true}, p.Capabilities())
		evs, err := collect(t, p, req(model, "hello brave new world"))
		require.NoError(t, err)
		require.Equal(t, []provider.Event{
			{Kind: provider.TextDelta, Text: "hello "},
			{Kind: provider.TextDelta, Text: "brave "},
			{Kind: provider.TextDelta, Text: "new "},
			{Kind: provider.TextDelta, Text: "world"},
			{Kind: provider.Usage, Tokens: &provider.Tokens{Input: 4, Output: 4}},
			{Kind: provider.TurnEnd, StopReason: "end_turn"},
		}, evs, "model %q", model)
	}
	p := New(Options{Name: "chaos", Resume: true})
	require.Equal(t, "chaos", p.Name())
	require.True(t, p.Capabilities().Resume)
}

func TestEmptyPromptEcho(t *testing.T) {
	t.Parallel()
	evs, err := collect(t, New(Options{}), req("echo", ""))
	require.NoError(t, err)
	require.Equal(t, []provider.Event{
		{Kind: provider.Usage, Tokens: &provider.Tokens{}},
		{Kind: provider.TurnEnd, StopReason: "end_turn"},
	}, evs)
}

// TestTiming drives the fake clock and checks when each event arrives.
func TestTiming(t *testing.T) {
	t.Parallel()
	s := time.Second
	tests := []struct {
		name      string
		model     string
		prompt    string
		step      time.Duration
		text      string
		textAt    []time.Duration
		keepalive []time.Duration
		callAt    []time.Duration
		resultAt  []time.Duration
		endAt     time.Duration
	}{
		{
			name:   "rate and first token",
			model:  "script:reply=a b c d e;rate=10;first=300ms",
			step:   50 * ms,
			text:   "a b c d e",
			textAt: []time.Duration{300 * ms, 400 * ms, 500 * ms, 600 * ms, 700 * ms},
			endAt:  700 * ms,
		},
		{
			name:   "first token only",
			model:  "script:first=2s",
			prompt: "x y",
			step:   100 * ms,
			text:   "x y",
			textAt: []time.Duration{2 * s, 2 * s},
			endAt:  2 * s,
		},
		{
			name:   "tokens cut by characters",
			model:  "script:reply=hi;tokens=4;rate=2",
			step:   250 * ms,
			text:   "hi hi",
			textAt: []time.Duration{0, 500 * ms, s, 1500 * ms},
			endAt:  1500 * ms,
		},
		{
			name:   "stall after token 2",
			model:  "script:reply=a b c d;rate=1;stall=5s@2",
			step:   500 * ms,
			text:   "a b c d",
			textAt: []time.Duration{0, s, 7 * s, 8 * s},
			endAt:  8 * s,
		},
		{
			name:      "keepalive during a stall",
			model:     "script:reply=a b;stall=10s@1;keepalive=3s",
			step:      500 * ms,
			text:      "a b",
			textAt:    []time.Duration{0, 10 * s},
			keepalive: []time.Duration{3 * s, 6 * s, 9 * s},
			endAt:     10 * s,
		},
		{
			name:      "keepalive before the first token",
			model:     "script:reply=a;first=5s;keepalive=2s",
			step:      500 * ms,
			text:      "a",
			textAt:    []time.Duration{5 * s},
			keepalive: []time.Duration{2 * s, 4 * s},
			endAt:     5 * s,
		},
		{
			name:     "tool runs for its duration",
			model:    "script:reply=a b;rate=1;tool=search:2s@1",
			step:     500 * ms,
			text:     "a b",
			textAt:   []time.Duration{0, 3 * s},
			callAt:   []time.Duration{0},
			resultAt: []time.Duration{2 * s},
			endAt:    3 * s,
		},
		{
			name:  "thirty second slow stream",
			model: "script:reply=slow;tokens=300;rate=10",
			step:  50 * ms,
			text:  strings.TrimSuffix(strings.Repeat("slow ", 61), " "),
			endAt: 29900 * ms,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := start(t, Options{}, req(tt.model, tt.prompt))
			require.NoError(t, h.finish(tt.step))
			evs := h.snapshot()
			require.Equal(t, tt.text, text(evs))
			if tt.textAt != nil {
				require.Equal(t, tt.textAt, times(only(evs, provider.TextDelta)))
			}
			require.Equal(t, tt.keepalive, times(only(evs, provider.Keepalive)))
			require.Equal(t, tt.callAt, times(only(evs, provider.ToolCall)))
			require.Equal(t, tt.resultAt, times(only(evs, provider.ToolResult)))
			last := evs[len(evs)-1]
			require.Equal(t, provider.TurnEnd, last.Kind)
			require.Equal(t, tt.endAt, last.at)
		})
	}
}

func times(evs []rec) []time.Duration {
	var out []time.Duration
	for _, e := range evs {
		out = append(out, e.at)
	}
	return out
}

func TestNothingBeforeFirstToken(t *testing.T) {
	t.Parallel()
	h := start(t, Options{}, req("script:first=2s", "hi"))
	h.advance(1999*ms, ms*100)
	require.Empty(t, h.snapshot())
	h.advance(ms, ms)
	require.NoError(t, h.wait())
	require.Equal(t, 2*time.Second, h.snapshot()[0].at)
}

func TestErrorAtAttempt(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		model      string
		attempt    int
		class      belay.ErrorClass
		retryAfter time.Duration
		text       string
	}{
		{"rate limited at attempt 1", "script:error=rate_limited:2s#1;error=overloaded#2", 1, belay.ClassRateLimited, 2 * time.Second, ""},
		{"overloaded at attempt 2", "script:error=rate_limited:2s#1;error=overloaded#2", 2, belay.ClassOverloaded, 0, ""},
		{"success at attempt 3", "script:error=rate_limited:2s#1;error=overloaded#2", 3, "", 0, "one two three"},
		{"attempt 0 counts as 1", "script:error=rate_limited:2s#1", 0, belay.ClassRateLimited, 2 * time.Second, ""},
		{"open range", "script:error=transient#2-", 5, belay.ClassTransient, 0, ""},
		{"mid-stream", "script:error=context_overflow@2", 1, belay.ClassContextOverflow, 0, "one two "},
		{"at the end", "script:error=internal@end", 1, belay.ClassInternal, 0, "one two three"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := req(tt.model, "one two three")
			r.Attempt = tt.attempt
			evs, err := collect(t, New(Options{}), r)
			require.Equal(t, tt.text, textOf(evs))
			if tt.class == "" {
				require.NoError(t, err)
				return
			}
			var pe *provider.Error
			require.ErrorAs(t, err, &pe)
			require.Equal(t, tt.class, pe.Class)
			require.Equal(t, tt.retryAfter, provider.RetryAfterOf(err))
			for _, e := range evs {
				require.NotEqual(t, provider.TurnEnd, e.Kind)
			}
		})
	}
}

func TestToolCalls(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := New(Options{EffectsDir: dir})
	model := "script:reply=done;tool=write_file:side:ok;tool=read_file;tool=rm:side:denied;tool=deploy:side:error"
	evs, err := collect(t, p, req(model, ""))
	require.NoError(t, err)

	var calls []provider.Call
	var results []provider.Result
	pending := map[string]bool{}
	for _, e := range evs {
		switch e.Kind {
		case provider.ToolCall:
			calls = append(calls, *e.Call)
			pending[e.Call.ID] = true
		case provider.ToolResult:
			require.True(t, pending[e.Result.CallID], "result %s before its call", e.Result.CallID)
			delete(pending, e.Result.CallID)
			results = append(results, *e.Result)
		}
	}
	require.Equal(t, []provider.Call{
		{ID: "call_1", Name: "write_file", SideEffect: true},
		{ID: "call_2", Name: "read_file"},
		{ID: "call_3", Name: "rm", SideEffect: true},
		{ID: "call_4", Name: "deploy", SideEffect: true},
	}, calls)
	require.Equal(t, []provider.Result{
		{CallID: "call_1", Content: "ok"},
		{CallID: "call_2", Content: "ok"},
		{CallID: "call_3", Content: "permission denied", IsError: true, Class: belay.ClassPermissionDenied},
		{CallID: "call_4", Content: "tool failed", IsError: true},
	}, results)
	require.True(t, results[2].NotExecuted())
	require.False(t, results[3].NotExecuted())
	require.Equal(t, "done", textOf(evs))

	// Only side-effecting calls that ran are recorded: not read_file (no
	// side effect), not rm (denied).
	effects, err := ReadEffects(dir)
	require.NoError(t, err)
	require.Equal(t, []string{"call_1", "call_4"}, effectCalls(effects))
	for _, e := range effects {
		require.Equal(t, "ses_1", e.Session)
		require.Equal(t, "run_1", e.Run)
		require.Equal(t, 1, e.Attempt)
	}
	require.Equal(t, "write_file", effects[0].Tool)

	// A fresh attempt runs them again, and the effects file shows it.
	r := req(model, "")
	r.Attempt = 2
	_, err = collect(t, p, r)
	require.NoError(t, err)
	effects, err = ReadEffects(dir)
	require.NoError(t, err)
	require.Equal(t, []string{"call_1", "call_4", "call_1", "call_4"}, effectCalls(effects))
	require.Equal(t, 2, effects[2].Attempt)
}

func TestToolCallFromJSONScript(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	input := `{"prompt":"x","script":{"reply":"","steps":[
		{"kind":"tool","tool":"send_email","callId":"toolu_1","input":{"to":"a@b.c"},"sideEffect":true,"content":"sent"},
		{"kind":"turn_end","stopReason":"tool_use"}]}}`
	evs, err := collect(t, New(Options{EffectsDir: dir}), provider.Request{Run: "run_9", Input: []byte(input), Attempt: 1})
	require.NoError(t, err)
	require.Equal(t, []provider.Event{
		{Kind: provider.ToolCall, Call: &provider.Call{ID: "toolu_1", Name: "send_email", Input: []byte(`{"to":"a@b.c"}`), SideEffect: true}},
		{Kind: provider.ToolResult, Result: &provider.Result{CallID: "toolu_1", Content: "sent"}},
		{Kind: provider.Usage, Tokens: &provider.Tokens{}},
		{Kind: provider.TurnEnd, StopReason: "tool_use"},
	}, evs)
	effects, err := ReadEffects(dir)
	require.NoError(t, err)
	require.Equal(t, []string{"toolu_1"}, effectCalls(effects))
}

func TestReadEffectsEmpty(t *testing.T) {
	t.Parallel()
	effects, err := ReadEffects(t.TempDir())
	require.NoError(t, err)
	require.Empty(t, effects)
}

func effectCalls(effects []Effect) []string {
	var out []string
	for _, e := range effects {
		out = append(out, e.Call)
	}
	return out
}

func TestHangUntilCancel(t *testing.T) {
	t.Parallel()
	t.Run("no keepalive", func(t *testing.T) {
		t.Parallel()
		h := start(t, Options{}, req("script:reply=a b;hang@1", ""))
		h.waitEvents(1)
		require.False(t, h.finished())
		h.cancel()
		require.ErrorIs(t, h.wait(), context.Canceled)
		require.Equal(t, "a ", text(h.snapshot()))
	})
	t.Run("keepalives while hanging", func(t *testing.T) {
		t.Parallel()
		h := start(t, Options{}, req("script:reply=a b;hang@1;keepalive=1s", ""))
		h.advance(3*time.Second, 500*ms)
		require.Equal(t, []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}, times(only(h.snapshot(), provider.Keepalive)))
		require.False(t, h.finished())
		h.cancel()
		require.ErrorIs(t, h.wait(), context.Canceled)
		require.Zero(t, h.clk.Pending(), "the keepalive timer is stopped")
	})
	t.Run("cancel during a delay", func(t *testing.T) {
		t.Parallel()
		h := start(t, Options{}, req("script:first=1h", "hi"))
		h.settle()
		h.cancel()
		require.ErrorIs(t, h.wait(), context.Canceled)
		require.Zero(t, h.clk.Pending(), "the delay's timer is stopped")
		require.Empty(t, h.snapshot())
	})
	t.Run("deadline", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 10*ms)
		defer cancel()
		err := New(Options{}).Run(ctx, req("script:hang", ""), func(provider.Event) error { return nil })
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Equal(t, belay.ClassTimeout, provider.ClassOf(err))
	})
	t.Run("already cancelled", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err := New(Options{}).Run(ctx, req("echo", "hi"), func(provider.Event) error {
			t.Error("emitted after cancel")
			return nil
		})
		require.ErrorIs(t, err, context.Canceled)
	})
}

func TestCrashMidStream(t *testing.T) {
	t.Parallel()
	evs, err := collect(t, New(Options{}), req("script:reply=a b c d e f;crash@3", ""))
	require.Equal(t, belay.ClassTransient, provider.ClassOf(err))
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	require.Equal(t, "a b c ", textOf(evs))
	for _, e := range evs {
		require.NotEqual(t, provider.TurnEnd, e.Kind)
		require.NotEqual(t, provider.Usage, e.Kind)
	}
	// Only at attempt 1.
	r := req("script:reply=a b c d e f;crash@3#1", "")
	r.Attempt = 2
	evs, err = collect(t, New(Options{}), r)
	require.NoError(t, err)
	require.Equal(t, "a b c d e f", textOf(evs))
}

func TestEmitError(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	n := 0
	err := New(Options{}).Run(context.Background(), req("echo", "a b c d"), func(provider.Event) error {
		n++
		if n == 2 {
			return boom
		}
		return nil
	})
	require.ErrorIs(t, err, boom)
	require.Equal(t, 2, n)
}

func TestKeepaliveAndUsageAreNotProgress(t *testing.T) {
	t.Parallel()
	h := start(t, Options{}, req("script:reply=a b c d e;usage=2;rate=1;keepalive=400ms", "p q"))
	require.NoError(t, h.finish(100*ms))
	evs := h.snapshot()
	var usage []provider.Tokens
	for _, e := range evs {
		switch e.Kind {
		case provider.Keepalive, provider.Usage:
			require.False(t, e.Kind.Progress(), "%s", e.Kind)
		default:
			require.True(t, e.Kind.Progress(), "%s", e.Kind)
		}
		if e.Kind == provider.Usage {
			usage = append(usage, *e.Tokens)
		}
	}
	require.Equal(t, []provider.Tokens{{Input: 2, Output: 2}, {Input: 2, Output: 4}, {Input: 2, Output: 5}}, usage)
	// One second between tokens, a keepalive 400ms and 800ms after each.
	require.Len(t, only(evs, provider.Keepalive), 8)
}

func TestThinking(t *testing.T) {
	t.Parallel()
	evs, err := collect(t, New(Options{}), req("script:thinking=let me see;reply=ok", "q"))
	require.NoError(t, err)
	require.Equal(t, []provider.Event{
		{Kind: provider.ThinkingDelta, Text: "let "},
		{Kind: provider.ThinkingDelta, Text: "me "},
		{Kind: provider.ThinkingDelta, Text: "see"},
		{Kind: provider.TextDelta, Text: "ok"},
		{Kind: provider.Usage, Tokens: &provider.Tokens{Input: 1, Output: 4}},
		{Kind: provider.TurnEnd, StopReason: "end_turn"},
	}, evs)
}

func TestRunRealClock(t *testing.T) {
	t.Parallel()
	// The default clock is the real one; a fast script finishes at once.
	evs, err := collect(t, New(Options{}), req("script:reply=a b c;rate=1000;first=1ms;stall=1ms@1", ""))
	require.NoError(t, err)
	require.Equal(t, "a b c", textOf(evs))
}

func TestConcurrentRuns(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := New(Options{EffectsDir: dir, Resume: true})
	const n = 8
	errs := make(chan error, n)
	for i := range n {
		go func() {
			r := req("script:reply=a b;tool=w:side@1", "")
			r.Run = fmt.Sprintf("run_%d", i)
			_, err := collect(t, p, r)
			errs <- err
		}()
	}
	for range n {
		require.NoError(t, <-errs)
	}
	effects, err := ReadEffects(dir)
	require.NoError(t, err)
	require.Len(t, effects, n)
}
