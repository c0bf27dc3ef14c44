package transcript

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// pasted is a long document pasted into a first user message: plain text
// past the 256 KiB Detect looks at, quoting both APIs' JSON.
var pasted = strings.Repeat(`Notes on the wire formats. OpenAI: {"role":"tool","tool_call_id":"c1"}; Anthropic: {"type":"tool_use","id":"toolu_1"}, {"type":"tool_result","tool_use_id":"toolu_1"}.`+"\n", 3000)

func quote(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// TestDetectByStructure: OpenAI and Anthropic messages are told apart by
// their structure (roles, keys, content block types), wherever it shows in
// the file, not by the strings their text holds; a first line longer than
// the head read is read whole.
func TestDetectByStructure(t *testing.T) {
	t.Parallel()
	user := `{"role":"user","content":` + quote(pasted) + `}`
	anLines := []string{
		`{"role":"assistant","content":[{"type":"text","text":"Checking."},{"type":"tool_use","id":"toolu_01A","name":"ls","input":{"path":"."}}]}`,
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_01A","content":"a.go"}]}`,
		`{"role":"assistant","content":"One file."}`,
	}
	oaLines := []string{
		`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"ls","arguments":"{\"path\":\".\"}"}}]}`,
		`{"role":"tool","tool_call_id":"call_1","content":"a.go"}`,
		`{"role":"assistant","content":"One file."}`,
	}
	anTurn, oaTurn := strings.Join(anLines, ","), strings.Join(oaLines, ",")
	plain := `{"role":"assistant","content":"Read it."}`
	ccBig := strings.Replace(ccU1, `"content":"fix the parser"`, `"content":`+quote(pasted), 1)
	for _, tc := range []struct {
		name string
		in   string
		want Format
	}{
		{"anthropic array, pasted text first", "[" + user + "," + anTurn + "]", FormatAnthropic},
		{"anthropic request, pasted text first", `{"model":"claude-opus-4-6","max_tokens":1024,"messages":[` + user + "," + anTurn + `]}`, FormatAnthropic},
		{"anthropic jsonl, first line past the head", jsonl(append([]string{user}, anLines...)...), FormatAnthropic},
		{"openai array, pasted text first", "[" + user + "," + oaTurn + "]", FormatOpenAI},
		{"openai jsonl, pasted text first", jsonl(append([]string{user}, oaLines...)...), FormatOpenAI},
		{"openai array quoting anthropic json", `[{"role":"user","content":"What is {\"type\":\"tool_use\"} or \"tool_result\" or \"thinking\"?"},` + oaTurn + "]", FormatOpenAI},
		{"openai, plain text only", "[" + user + "," + plain + "]", FormatOpenAI},
		{"claude, first line past the head", jsonl(ccBig, ccA2), FormatClaude},
		{"anthropic, mcp tool blocks only", `[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"mcp_tool_use","id":"mcptoolu_1","name":"q","server_name":"s","input":{}},{"type":"mcp_tool_result","tool_use_id":"mcptoolu_1","content":[{"type":"text","text":"r"}]}]}]`, FormatAnthropic},
		{"anthropic, web fetch result", `[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"server_tool_use","id":"srvtoolu_1","name":"web_fetch","input":{"url":"https://x.example"}},{"type":"web_fetch_tool_result","tool_use_id":"srvtoolu_1","content":{"type":"web_fetch_result","url":"https://x.example"}}]}]`, FormatAnthropic},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "t.json")
			require.NoError(t, os.WriteFile(path, []byte(tc.in), 0o600))
			rep, err := RepairFile(path, FileOptions{DryRun: true})
			require.NoError(t, err)
			require.Equal(t, tc.want, rep.Format)
			require.Equal(t, StatusClean, rep.Status, "%v", rep.Changes)
			d, err := Parse([]byte(tc.in), "")
			require.NoError(t, err)
			require.Equal(t, tc.want, d.Format)
		})
	}
}

// TestDetectMarks: what tells OpenAI from Anthropic in one message, and
// what does not.
func TestDetectMarks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		line string
		want Format
		sure bool
	}{
		{`{"role":"user","content":"hi"}`, FormatOpenAI, false},
		{`{"role":"user","content":[{"type":"text","text":"{\"type\":\"tool_use\"}"}]}`, FormatOpenAI, false},
		{`{"role":"system","content":"be terse"}`, FormatOpenAI, true},
		{`{"role":"developer","content":"be terse"}`, FormatOpenAI, true},
		{`{"role":"assistant","content":null,"refusal":"no"}`, FormatOpenAI, true},
		{`{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:,"}}]}`, FormatOpenAI, true},
		{`{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":""}}]}`, FormatAnthropic, true},
		{`{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s"}]}`, FormatAnthropic, true},
		{`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"r"}]}`, FormatAnthropic, true},
	} {
		f, sure, err := detect([]byte(tc.line + "\n"))
		require.NoError(t, err)
		require.Equal(t, tc.want, f, tc.line)
		require.Equal(t, tc.sure, sure, tc.line)
	}
	// A request's top-level system is Anthropic's.
	f, err := Detect([]byte(`{"system":"be terse","messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(t, err)
	require.Equal(t, FormatAnthropic, f)
}
