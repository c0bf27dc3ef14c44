package fake

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/provider"
)

func ptr[T any](v T) *T { return &v }

func TestParseModel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		model string
		want  Script
	}{
		{"", Script{}},
		{"echo", Script{}},
		{"script:", Script{}},
		{"script:reply=hi;tokens=40;rate=200;first=300ms", Script{Reply: ptr("hi"), Tokens: 40, Rate: 200, FirstToken: Duration(300 * ms)}},
		{"script:reply=", Script{Reply: ptr("")}},
		{`script:reply=a\;b \\ c=d@e#f;`, Script{Reply: ptr(`a;b \ c=d@e#f`)}},
		{"script:thinking=hmm;keepalive=15s;usage=10;ref=5;stop=max_tokens", Script{Thinking: "hmm", Keepalive: Duration(15 * time.Second), UsageEvery: 10, RefEvery: 5, StopReason: "max_tokens"}},
		{"script:stall=5s@20", Script{Steps: []Step{{Kind: StepStall, Duration: Duration(5 * time.Second), At: 20}}}},
		{"script:error=rate_limited#1", Script{Steps: []Step{{Kind: StepError, Class: belay.ClassRateLimited, Attempts: AttemptSet{{1, 1}}}}}},
		{"script:error=rate_limited:2s#1,3-4,6-@7", Script{Steps: []Step{{Kind: StepError, Class: belay.ClassRateLimited, RetryAfter: Duration(2 * time.Second), At: 7, Attempts: AttemptSet{{1, 1}, {3, 4}, {6, 0}}}}}},
		{"script:tool=write_file:side:ok", Script{Steps: []Step{{Kind: StepTool, Tool: "write_file", SideEffect: true, Outcome: OutcomeOK}}}},
		{"script:tool=rm:denied:side@end#2", Script{Steps: []Step{{Kind: StepTool, Tool: "rm", SideEffect: true, Outcome: OutcomeDenied, At: End, Attempts: AttemptSet{{2, 2}}}}}},
		{"script:tool=search:1m30s:error", Script{Steps: []Step{{Kind: StepTool, Tool: "search", Duration: Duration(90 * time.Second), Outcome: OutcomeError}}}},
		{"script:tool=w:side:crash", Script{Steps: []Step{{Kind: StepTool, Tool: "w", SideEffect: true, Outcome: OutcomeCrash}}}},
		{"script:crash@5#1;hang@end;turn=tool_use@2;turn", Script{Steps: []Step{
			{Kind: StepCrash, At: 5, Attempts: AttemptSet{{1, 1}}},
			{Kind: StepHang, At: End},
			{Kind: StepTurnEnd, StopReason: "tool_use", At: 2},
			{Kind: StepTurnEnd},
		}}},
	}
	for _, tt := range tests {
		got, err := ParseModel(tt.model)
		require.NoError(t, err, tt.model)
		require.Equal(t, &tt.want, got, tt.model)
		roundTrip(t, got)
	}
}

func TestParseModelErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ model, msg string }{
		{"gpt-5", `unknown fake model "gpt-5"`},
		{"script:bogus=1", `item 1 (bogus=1): unknown item "bogus"`},
		{"script:reply", "reply needs a value"},
		{"script:reply=a;reply=b", "reply is set twice"},
		{"script:tokens=-1", `bad count "-1"`},
		{"script:tokens=lots", `bad count "lots"`},
		{"script:rate=fast", `bad rate "fast"`},
		{"script:rate=0.0000001", "rate: must be 0 (no delay) or tokens per second"},
		{"script:rate=NaN", `bad rate "NaN"`},
		{"script:first=soon", `bad duration "soon"`},
		{"script:first=-1s", "firstToken: must be from 0"},
		{"script:keepalive=1ns", "keepalive: must be 0 (none) or at least 1ms"},
		{"script:stall=5s@x", `@position: bad count "x"`},
		{"script:stall=5s@1@2", "@position given twice"},
		{"script:stall=0s", "a stall needs a duration > 0"},
		{"script:stall", `stall: bad duration ""`},
		{"script:error=teapot", `unknown error class "teapot"`},
		{"script:error=rate_limited#0", `#attempts: bad attempt "0"`},
		{"script:error=rate_limited#3-1", "runs backwards"},
		{"script:error=rate_limited#", "empty attempt set"},
		{"script:error=rate_limited:soon", `retry-after: bad duration "soon"`},
		{"script:crash=now", "crash takes no value"},
		{"script:tool=", `tool name ""`},
		{"script:tool=a b", `tool name "a b"`},
		{"script:tool=w:sideways", `unknown tool flag "sideways"`},
		{"script:tool=w:ok:error", "tool outcome given twice"},
		{"script:tool=w:side:side", "side given twice"},
		{"script:tool=w:1s:2s", "tool duration given twice"},
		{`script:reply=a\`, "a backslash at the end escapes nothing"},
		{"script:reply=\xff", "reply: not valid UTF-8"},
	}
	for _, tt := range tests {
		_, err := ParseModel(tt.model)
		require.ErrorContains(t, err, tt.msg, tt.model)
		require.ErrorIs(t, err, belay.ErrInvalid, tt.model)
		require.ErrorContains(t, err, "fake: invalid script from model: ", tt.model)
	}
}

func TestDecodeScriptErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ json, msg string }{
		{`null`, "a script must be a JSON object"},
		{`[1]`, "a script must be a JSON object"},
		{`{"reply":"a"} {}`, "trailing data"},
		{`{"replies":"a"}`, `unknown field "replies"`},
		{`{"firstToken":300}`, `duration must be a string like "300ms"`},
		{`{"firstToken":"3 s"}`, `bad duration "3 s"`},
		{`{"steps":[{}]}`, "steps[0].kind: missing"},
		{`{"steps":[{"kind":"nap"}]}`, `steps[0].kind: unknown kind "nap"`},
		{`{"steps":[{"kind":"stall","duration":"1s","class":"auth"}]}`, "steps[0].class: not allowed in a stall step"},
		{`{"steps":[{"kind":"error"}]}`, `steps[0].class: unknown error class ""`},
		{`{"steps":[{"kind":"tool","tool":"a","outcome":"maybe"}]}`, `steps[0].outcome: unknown outcome "maybe"`},
		{`{"steps":[{"kind":"tool","tool":"a"},{"kind":"tool","tool":"b","callId":"call_1"}]}`, `steps[1].callId: call id "call_1" is also used by steps[0]`},
		{`{"steps":[{"kind":"hang","at":-1}]}`, `position must be a token count >= 0 or "end"`},
		{`{"steps":[{"kind":"hang","attempts":"x"}]}`, `bad attempt "x"`},
		{`{"steps":[{"kind":"hang","attempts":true}]}`, "attempts must be a string"},
		{`{"tokens":2000000}`, "tokens: must be from 0 to 1000000"},
	}
	for _, tt := range tests {
		_, err := DecodeScript([]byte(tt.json))
		require.ErrorContains(t, err, tt.msg, tt.json)
		require.ErrorIs(t, err, belay.ErrInvalid, tt.json)
	}
}

func TestScriptJSON(t *testing.T) {
	t.Parallel()
	s, err := DecodeScript([]byte(`{
		"reply": "hello", "tokens": 3, "rate": 2.5, "firstToken": "1.5s",
		"steps": [
			{"kind": "error", "class": "overloaded", "retryAfter": "30s", "attempts": 1},
			{"kind": "stall", "duration": "2s", "at": 1, "attempts": "2-"},
			{"kind": "tool", "tool": "t", "input": {"a": [1, 2]}, "at": "end"}
		]}`))
	require.NoError(t, err)
	require.Equal(t, &Script{
		Reply: ptr("hello"), Tokens: 3, Rate: 2.5, FirstToken: Duration(1500 * ms),
		Steps: []Step{
			{Kind: StepError, Class: belay.ClassOverloaded, RetryAfter: Duration(30 * time.Second), Attempts: AttemptSet{{1, 1}}},
			{Kind: StepStall, Duration: Duration(2 * time.Second), At: 1, Attempts: AttemptSet{{2, 0}}},
			{Kind: StepTool, Tool: "t", Input: json.RawMessage(`{"a": [1, 2]}`), At: End},
		},
	}, s)
	b, err := json.Marshal(s)
	require.NoError(t, err)
	require.JSONEq(t, `{"reply":"hello","tokens":3,"rate":2.5,"firstToken":"1.5s","steps":[
		{"kind":"error","class":"overloaded","retryAfter":"30s","attempts":"1"},
		{"kind":"stall","duration":"2s","at":1,"attempts":"2-"},
		{"kind":"tool","tool":"t","input":{"a":[1,2]},"at":"end"}]}`, string(b))
	roundTrip(t, s)
}

// roundTrip checks that s survives JSON unchanged.
func roundTrip(t testing.TB, s *Script) {
	t.Helper()
	b, err := json.Marshal(s)
	require.NoError(t, err)
	s2, err := DecodeScript(b)
	require.NoError(t, err, "%s", b)
	b2, err := json.Marshal(s2)
	require.NoError(t, err)
	require.Equal(t, string(b), string(b2))
}

func TestLoadScript(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	require.NoError(t, os.WriteFile(good, []byte(`{"reply":"from a file","steps":[{"kind":"crash","at":2}]}`), 0o600))
	s, err := LoadScript(good)
	require.NoError(t, err)
	require.Equal(t, "from a file", *s.Reply)

	// A loaded script can travel in the run input.
	input, err := json.Marshal(map[string]any{"prompt": "x", "script": s})
	require.NoError(t, err)
	evs, err := collect(t, New(Options{}), provider.Request{Input: input, Prompt: "x", Attempt: 1})
	require.Equal(t, belay.ClassTransient, provider.ClassOf(err))
	require.Equal(t, "from a ", textOf(evs))

	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"steps":[{"kind":"stall"}]}`), 0o600))
	_, err = LoadScript(bad)
	require.ErrorIs(t, err, belay.ErrInvalid)
	require.ErrorContains(t, err, "fake: invalid script from "+bad+": steps[0].duration: a stall needs a duration > 0")

	_, err = LoadScript(filepath.Join(dir, "missing.json"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestScriptSources(t *testing.T) {
	t.Parallel()
	inputScript := []byte(`{"script":{"reply":"from input"}}`)
	optionsScript := []byte(`{"script":{"reply":"from options"}}`)
	tests := []struct {
		name     string
		input    []byte
		model    string
		options  []byte
		provider *Script
		want     string
	}{
		{"input wins", inputScript, "script:reply=from model", optionsScript, &Script{Reply: ptr("from provider")}, "from input"},
		{"then the model", nil, "script:reply=from model", optionsScript, &Script{Reply: ptr("from provider")}, "from model"},
		{"then the options", []byte(`{"prompt":"p"}`), "echo", optionsScript, &Script{Reply: ptr("from provider")}, "from options"},
		{"then the provider", []byte(`"not an object"`), "", []byte(`{"script":null}`), &Script{Reply: ptr("from provider")}, "from provider"},
		{"else echo", nil, "", nil, nil, "the prompt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := New(Options{Script: tt.provider})
			evs, err := collect(t, p, provider.Request{Input: tt.input, Model: tt.model, Options: tt.options, Prompt: "the prompt", Attempt: 1})
			require.NoError(t, err)
			require.Equal(t, tt.want, textOf(evs))
		})
	}
}

func TestRunInvalidScript(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		req  provider.Request
		p    *Provider
		msg  string
	}{
		{"model", provider.Request{Model: "script:stall=x"}, New(Options{}), "fake: invalid script from model: item 1 (stall=x)"},
		{"unknown model", provider.Request{Model: "gpt-5"}, New(Options{}), `unknown fake model "gpt-5"`},
		{"input", provider.Request{Input: []byte(`{"script":{"tokens":-3}}`)}, New(Options{}), "fake: invalid script from input: tokens: must be from 0"},
		{"options", provider.Request{Options: []byte(`{"script":"fast"}`)}, New(Options{}), "fake: invalid script from options: a script must be a JSON object"},
		{"provider", provider.Request{}, New(Options{Script: &Script{Rate: -1}}), "fake: invalid script from provider: rate:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			evs, err := collect(t, tt.p, tt.req)
			require.Empty(t, evs)
			var pe *provider.Error
			require.ErrorAs(t, err, &pe)
			require.Equal(t, belay.ClassInvalidRequest, pe.Class)
			require.ErrorContains(t, err, tt.msg)
			var se *ScriptError
			require.True(t, errors.As(err, &se))
		})
	}
}

func TestSplitTokens(t *testing.T) {
	t.Parallel()
	tests := []struct {
		text string
		n    int
		want []string
	}{
		{"", 0, nil},
		{"  ", 0, []string{"  "}},
		{" a  b\nc ", 0, []string{" a  ", "b\n", "c "}},
		{"a b c d", 2, []string{"a b ", "c d"}},
		{"a b c", 2, []string{"a ", "b c"}},
		{"a b c", 3, []string{"a ", "b ", "c"}},
		{"hi", 4, []string{"h", "i", " ", "hi"}},
		{"", 2, []string{"lo", "rem"}},
		{"héllo", 5, []string{"h", "é", "l", "l", "o"}},
	}
	for _, tt := range tests {
		got := splitTokens(tt.text, tt.n)
		require.Equal(t, tt.want, got, "%q/%d", tt.text, tt.n)
		if tt.n > 0 {
			require.Len(t, got, tt.n)
		}
		if tt.n <= len(splitWords(tt.text)) {
			require.Equal(t, tt.text, strings.Join(got, ""))
		}
	}
}

func TestAttemptSet(t *testing.T) {
	t.Parallel()
	set, err := ParseAttempts("1,3-4,6-")
	require.NoError(t, err)
	require.Equal(t, "1,3-4,6-", set.String())
	for n, want := range map[int]bool{1: true, 2: false, 3: true, 4: true, 5: false, 6: true, 100: true} {
		require.Equal(t, want, set.Contains(n), n)
	}
	require.True(t, AttemptSet(nil).Contains(7))
	for _, bad := range []string{"", "0", "01", "+1", "1-0", "a", "1,", "-2"} {
		_, err := ParseAttempts(bad)
		require.Error(t, err, bad)
	}
}

// TestDocExamples keeps docs/providers.md's examples working.
func TestDocExamples(t *testing.T) {
	t.Parallel()
	for _, model := range []string{
		"script:tokens=300;rate=10",
		"script:tokens=300;rate=10;first=2s;stall=15s@150;keepalive=5s",
		"script:error=rate_limited:2s#1",
		"script:reply=I wrote the file and now I will;tool=write_file:side:ok@2;crash@4#1",
		"script:reply=one two three four;hang@3;keepalive=10s",
		"script:reply=hi;tokens=40;rate=200;first=300ms;stall=5s@20;error=rate_limited:2s#1;tool=write_file:side:ok",
	} {
		_, err := ParseModel(model)
		require.NoError(t, err, model)
	}
	fromJSON, err := DecodeScript([]byte(`{
  "reply": "I wrote the file and now I will",
  "steps": [
    {"kind": "tool", "tool": "write_file", "sideEffect": true,
     "input": {"path": "notes.md"}, "at": 2},
    {"kind": "crash", "at": 4, "attempts": "1"}
  ]
}`))
	require.NoError(t, err)
	dir := t.TempDir()
	evs, err := collect(t, New(Options{EffectsDir: dir, Script: fromJSON}), req("", "ignored"))
	require.Equal(t, belay.ClassTransient, provider.ClassOf(err))
	require.Equal(t, "I wrote the file ", textOf(evs))
	effects, err := ReadEffects(dir)
	require.NoError(t, err)
	require.Len(t, effects, 1)
}
