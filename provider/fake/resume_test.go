package fake

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/provider"
)

// lastRef returns the last conversation ref reported.
func lastRef(t *testing.T, evs []provider.Event) belay.ConversationRef {
	t.Helper()
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Kind == provider.RefUpdate {
			return *evs[i].Ref
		}
	}
	t.Fatal("no RefUpdate")
	return belay.ConversationRef{}
}

func resumeReq(model string, attempt int, ref belay.ConversationRef) provider.Request {
	r := req(model, "")
	r.Attempt, r.Ref, r.Resume = attempt, ref, true
	return r
}

func countKind(evs []provider.Event, k provider.EventKind) int {
	n := 0
	for _, e := range evs {
		if e.Kind == k {
			n++
		}
	}
	return n
}

func TestRefUpdates(t *testing.T) {
	t.Parallel()
	evs, err := collect(t, New(Options{Resume: true}), req("script:reply=a b c d e;ref=2", ""))
	require.NoError(t, err)
	var got []string
	for _, e := range evs {
		switch e.Kind {
		case provider.RefUpdate:
			require.Equal(t, RefKind, e.Ref.Kind)
			require.Equal(t, "fake_run_1_1", e.Ref.ID)
			got = append(got, "@"+e.Ref.Cursor)
		default:
			got = append(got, string(e.Kind))
		}
	}
	require.Equal(t, []string{
		"@1:0", "text", "text", "@1:2", "text", "text", "@1:4", "text", "usage", "turn_end", "@1:6",
	}, got)

	// Without the capability, no refs.
	evs, err = collect(t, New(Options{}), req("script:reply=a b", ""))
	require.NoError(t, err)
	require.Zero(t, countKind(evs, provider.RefUpdate))
}

func TestResumeAfterCrash(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		model string
		// first is the text and calls before the crash; rest what the
		// resumed run emits.
		firstText, restText   string
		firstCalls, restCalls int
		restResults           int
	}{
		{
			name:       "crash after a side-effecting call",
			model:      "script:reply=a b c d;tool=write:side:ok@2;crash@3#1",
			firstText:  "a b c ",
			restText:   "d",
			firstCalls: 1,
		},
		{
			name:        "crash between call and result",
			model:       "script:reply=a b;tool=write:side:crash@1",
			firstText:   "a ",
			restText:    "b",
			firstCalls:  1,
			restResults: 1,
		},
		{
			name:       "crash at every attempt is passed on resume",
			model:      "script:reply=a b c;tool=write:side@1;crash@2",
			firstText:  "a b ",
			restText:   "c",
			firstCalls: 1,
		},
		{
			name:      "a stall before the cursor does not come back",
			model:     "script:reply=a b c;stall=1ms@1;crash@2",
			firstText: "a b ",
			restText:  "c",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			p := New(Options{Resume: true, EffectsDir: dir})
			first, err := collect(t, p, req(tt.model, ""))
			require.Equal(t, belay.ClassTransient, provider.ClassOf(err))
			require.Equal(t, tt.firstText, textOf(first))
			require.Equal(t, tt.firstCalls, countKind(first, provider.ToolCall))

			// The runtime resumes (a recovery may count a new attempt).
			rest, err := collect(t, p, resumeReq(tt.model, 2, lastRef(t, first)))
			require.NoError(t, err)
			require.Equal(t, tt.restText, textOf(rest))
			require.Zero(t, countKind(rest, provider.ToolCall), "a resumed run never repeats a tool call")
			require.Equal(t, tt.restResults, countKind(rest, provider.ToolResult))
			require.Equal(t, provider.TurnEnd, rest[len(rest)-2].Kind)
			require.Equal(t, provider.RefUpdate, rest[len(rest)-1].Kind)

			effects, err := ReadEffects(dir)
			require.NoError(t, err)
			require.Len(t, effects, tt.firstCalls, "side effects ran once")
		})
	}
}

// TestResumeFromEveryCursor resumes a clean run from every cursor it
// reported: the resumed run emits exactly the progress events after it.
func TestResumeFromEveryCursor(t *testing.T) {
	t.Parallel()
	model := "script:thinking=hmm ok;reply=one two three four;usage=2;tool=a@1;tool=b:side:error@2;turn=tool_use@2;tool=c:denied@end"
	p := New(Options{Resume: true, EffectsDir: t.TempDir()})
	full, err := collect(t, p, req(model, "the prompt"))
	require.NoError(t, err)
	progress := func(evs []provider.Event) []provider.Event {
		var out []provider.Event
		for _, e := range evs {
			if e.Kind.Progress() && e.Kind != provider.RefUpdate {
				out = append(out, e)
			}
		}
		return out
	}
	want := progress(full)
	refs := 0
	for i, e := range full {
		if e.Kind != provider.RefUpdate {
			continue
		}
		refs++
		before := progress(full[:i])
		r := resumeReq(model, 1, *e.Ref)
		r.Prompt = "the prompt"
		rest, err := collect(t, p, r)
		require.NoError(t, err, "cursor %s", e.Ref.Cursor)
		require.Equal(t, want, append(before, progress(rest)...), "cursor %s", e.Ref.Cursor)
	}
	require.Equal(t, len(want)+1, refs, "a ref after every position and one at the start")
}

func TestResumeRefused(t *testing.T) {
	t.Parallel()
	ref := belay.ConversationRef{Kind: RefKind, ID: "fake_run_1_1", Cursor: "1:1"}
	tests := []struct {
		name   string
		resume bool
		ref    belay.ConversationRef
		class  belay.ErrorClass
		msg    string
	}{
		{"capability off", false, ref, belay.ClassInvalidRequest, "without the Resume capability"},
		{"no cursor", true, belay.ConversationRef{}, belay.ClassInvalidRequest, "bad resume cursor"},
		{"bad cursor", true, belay.ConversationRef{Cursor: "x:1"}, belay.ClassInvalidRequest, "bad resume cursor"},
		{"negative cursor", true, belay.ConversationRef{Cursor: "1:-1"}, belay.ClassInvalidRequest, "bad resume cursor"},
		{"past the end", true, belay.ConversationRef{Cursor: "1:99"}, belay.ClassInvalidRequest, "past the end"},
		{"other conversation", true, belay.ConversationRef{ID: "fake_run_2_1", Cursor: "1:1"}, belay.ClassTargetLost, "not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			evs, err := collect(t, New(Options{Resume: tt.resume}), resumeReq("script:reply=a b", 1, tt.ref))
			require.Empty(t, evs)
			require.Equal(t, tt.class, provider.ClassOf(err))
			require.ErrorContains(t, err, tt.msg)
		})
	}
}

func TestResumeAtEnd(t *testing.T) {
	t.Parallel()
	p := New(Options{Resume: true})
	full, err := collect(t, p, req("script:reply=a b", ""))
	require.NoError(t, err)
	end := lastRef(t, full)
	require.Equal(t, fmt.Sprintf("1:%d", 3), end.Cursor)
	rest, err := collect(t, p, resumeReq("script:reply=a b", 3, end))
	require.NoError(t, err)
	require.Empty(t, rest)
}

func TestResumeSkipsFirstTokenDelay(t *testing.T) {
	t.Parallel()
	model := "script:reply=a b c;first=1h;rate=1;crash@1"
	h := start(t, Options{Resume: true}, req(model, ""))
	require.Error(t, h.finish(time.Minute))
	var evs []provider.Event
	for _, e := range h.snapshot() {
		evs = append(evs, e.Event)
	}
	h2 := startOn(t, h.p, h.clk, resumeReq(model, 1, lastRef(t, evs)))
	require.NoError(t, h2.finish(500*ms))
	got := only(h2.snapshot(), provider.TextDelta)
	require.Equal(t, "b c", text(got))
	// "b" at once, "c" a second later: no first-token delay again.
	require.Equal(t, []time.Duration{got[0].at, got[0].at + time.Second}, times(got))
}
