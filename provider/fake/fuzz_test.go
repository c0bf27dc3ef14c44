package fake

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// checkScript checks what every accepted script must satisfy: it
// round-trips through JSON and unrolls into a plan whatever the attempt.
func checkScript(t *testing.T, s *Script) {
	require.NoError(t, s.Validate())
	roundTrip(t, s)
	if s.Tokens > 10_000 || s.Reply != nil && len(*s.Reply) > 10_000 || len(s.Thinking) > 10_000 {
		return // valid, but slow to unroll on every fuzz input
	}
	for attempt := 1; attempt <= 3; attempt++ {
		p := buildPlan(s, "a fuzzed prompt", attempt)
		require.NotEmpty(t, p.ops)
		require.True(t, p.ops[len(p.ops)-1].kind == opTurnEnd, "a plan ends with a turn end")
		positions := 0
		for _, o := range p.ops {
			if o.kind.positional() {
				positions++
			}
		}
		require.Equal(t, positions, p.size)
	}
}

func FuzzParseModel(f *testing.F) {
	for _, seed := range []string{
		"", "echo", "script:", "gpt",
		"script:reply=hi;tokens=40;rate=200;first=300ms;stall=5s@20;error=rate_limited:2s#1;tool=write_file:side:ok",
		`script:reply=a\;b;thinking=x y;keepalive=1s;usage=2;ref=3;stop=max_tokens`,
		"script:tool=rm:denied:side@end#2-;crash@5#1,3;hang@end;turn=tool_use@2;turn",
		"script:tool=w:side:crash:1s@1#1-2",
		"script:rate=0x1p-2;tokens=0", "script:stall=5s@1@2", "script:reply=\\",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, model string) {
		s, err := ParseModel(model)
		if err != nil {
			require.Nil(t, s)
			return
		}
		checkScript(t, s)
	})
}

func FuzzDecodeScript(f *testing.F) {
	for _, seed := range []string{
		`{}`, `null`, `[]`, `{"reply":""}`,
		`{"reply":"hello","tokens":3,"rate":2.5,"firstToken":"1.5s","keepalive":"1s","usageEvery":1,"refEvery":2,"stopReason":"x"}`,
		`{"steps":[{"kind":"error","class":"overloaded","retryAfter":"30s","attempts":1},{"kind":"stall","duration":"2s","at":1,"attempts":"2-"}]}`,
		`{"steps":[{"kind":"tool","tool":"t","callId":"c","input":{"a":[1,2]},"at":"end","sideEffect":true,"outcome":"crash","content":"x","duration":"1s"}]}`,
		`{"steps":[{"kind":"turn_end","stopReason":"tool_use"},{"kind":"hang"},{"kind":"crash","message":"m"}]}`,
		`{"thinking":"a b","steps":[{"kind":"tool","tool":"a"},{"kind":"tool","tool":"b","callId":"call_1"}]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := DecodeScript(data)
		if err != nil {
			require.Nil(t, s)
			return
		}
		checkScript(t, s)
	})
}

// FuzzFieldScript: skipping the decode of an input with no "script" in it
// finds what the decode finds, for any JSON.
func FuzzFieldScript(f *testing.F) {
	f.Add(`{"prompt":"ok"}`)
	f.Add(`{"\u0073cript":{"text":"hi"}}`)
	f.Add(`{"script":{"text":"hi"}}`)
	f.Add(`{"prompt":"say \"script\""}`)
	f.Add(`[{"script":1}]`)
	f.Fuzz(func(t *testing.T, raw string) {
		got, gotErr := fieldScript(json.RawMessage(raw), "input")
		var obj map[string]json.RawMessage
		var want *Script
		var wantErr error
		if len(raw) > 0 && json.Unmarshal([]byte(raw), &obj) == nil {
			if field, ok := obj["script"]; ok && string(field) != "null" {
				want, wantErr = DecodeScript(field)
				if wantErr != nil {
					want = nil
				}
			}
		}
		if (gotErr != nil) != (wantErr != nil) || (got == nil) != (want == nil) {
			t.Fatalf("fieldScript(%q) = %v, %v; the decode gives %v, %v", raw, got, gotErr, want, wantErr)
		}
	})
}
