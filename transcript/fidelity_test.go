package transcript

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay/journal"
)

// TestClaudeParallelCallsPairAcrossTheTree: Claude Code hangs each result
// of a turn's calls on the line of its own call, so only the last result
// is on the path from the leaf. The checker pairs them by id across the
// tree: the session is clean, every call has its real result, and nothing
// is inserted.
func TestClaudeParallelCallsPairAcrossTheTree(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("testdata/claude_toolcalls_clean.jsonl")
	require.NoError(t, err)
	d, err := Parse(data, FormatClaude)
	require.NoError(t, err)
	require.Empty(t, d.Dropped)
	require.Empty(t, d.Relinked)
	require.Empty(t, d.Repair().Changes)
	results := map[string]string{}
	for _, m := range d.Messages() {
		if b, ok := m.Result(); ok {
			require.False(t, b.Synthetic)
			results[b.CallID] = textOf(b.Content)
		}
	}
	require.Equal(t, map[string]string{
		"toolu_01Aa": "     1→package parse", "toolu_01Bb": "     1→package parse_test",
		"toolu_01Cc": "FAIL TestSplit (race)", "toolu_01Dd": "The file was updated.",
	}, results)
	out, err := d.Bytes()
	require.NoError(t, err)
	require.Equal(t, string(data), string(out))
}

// TestTreeDamageRelinks: a parent that is not in the file is reported with
// its line and what a reader loses, and relinked to the nearest surviving
// ancestor, so the whole conversation is reachable from the leaf again; a
// line written twice is dropped.
func TestTreeDamageRelinks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		format    Format
		line      int
		parent    string
		wantMsgs  int
		duplicate int
	}{
		{"pi_treedamage.jsonl", FormatPi, 8, "e0000005", 6, 6},
		{"claude_treedamage.jsonl", FormatClaude, 11, "7d2e9f41-0000-4000-8000-000000000009", 12, 10},
	} {
		path := copyFixture(t, tc.name, 0o600)
		rep, err := RepairFile(path, FileOptions{NoBackup: true})
		require.NoError(t, err)
		require.Equal(t, StatusRepaired, rep.Status)
		kinds := map[string]Change{}
		for _, c := range rep.Changes {
			kinds[c.Kind] = c
		}
		require.Equal(t, tc.line, kinds[ChangeRelink].Line, tc.name)
		require.Contains(t, kinds[ChangeRelink].Reason, "loses the")
		require.Contains(t, kinds[ChangeRelink].Reason, tc.parent)
		require.Equal(t, tc.duplicate, kinds[ChangeDropDuplicate].Line, tc.name)
		out, err := os.ReadFile(path)
		require.NoError(t, err)
		d, err := Parse(out, tc.format)
		require.NoError(t, err)
		require.Empty(t, d.Relinked)
		require.Empty(t, d.Dropped)
		require.Len(t, d.Messages(), tc.wantMsgs, tc.name)
		require.Empty(t, d.Repair().Changes)
	}
}

// TestTornLineRelinksThroughItsParent: the parent named in the first bytes
// of a torn line is the nearest surviving ancestor of its children.
func TestTornLineRelinksThroughItsParent(t *testing.T) {
	t.Parallel()
	in := `{"type":"session","version":3,"id":"s"}
{"type":"message","id":"a","parentId":null,"message":{"role":"user","content":"one"}}
{"type":"message","id":"b","parentId":"a","message":{"role":"assistant","content":[{"type":"text","text":"two"}],"stopReason":"stop"}}
{"type":"message","id":"x","parentId":null,"message":{"role":"user","content":"side branch"}}
{"type":"message","id":"c","parentId":"b","message":{"role":"user","cont
{"type":"message","id":"d","parentId":"c","message":{"role":"assistant","content":[{"type":"text","text":"four"}],"stopReason":"stop"}}
`
	d, err := Parse([]byte(in), FormatPi)
	require.NoError(t, err)
	require.Len(t, d.Relinked, 1)
	require.Contains(t, d.Relinked[0].Reason, `relinked to "b"`)
	require.Contains(t, d.Relinked[0].Reason, "dropped line 5")
	var texts []string
	for _, m := range d.Messages() {
		texts = append(texts, m.Text())
	}
	require.Equal(t, []string{"one", "two", "four"}, texts)
}

// TestTornEditBranchRelinksToItsParent: in Claude Code a torn line keeps
// its "parentUuid" (its first key) and loses its "uuid" (near its end).
// When that line started a branch (the user edited an earlier message),
// its child is relinked to the torn line's parent, where the branch
// starts, not to the line before it in the file, the abandoned branch's
// last entry. A torn line with an entry that can be the ancestor between
// it and the child changes nothing.
func TestTornEditBranchRelinksToItsParent(t *testing.T) {
	t.Parallel()
	line := func(parent, uuid, typ, text string) string {
		l := strings.Replace(ccU1, `"content":"fix the parser"`, `"content":"`+text+`"`, 1)
		if typ == "assistant" {
			l = strings.Replace(ccA2, `"text":"Let me look."`, `"text":"`+text+`"`, 1)
		}
		p := `null`
		if parent != "" {
			p = `"` + parent + `"`
		}
		l = strings.Replace(l, `"parentUuid":null`, `"parentUuid":`+p, 1)
		l = strings.Replace(l, `"parentUuid":"u1"`, `"parentUuid":`+p, 1)
		l = strings.Replace(l, `"uuid":"u1"`, `"uuid":"`+uuid+`"`, 1)
		return strings.Replace(l, `"uuid":"a2"`, `"uuid":"`+uuid+`"`, 1)
	}
	u1, a2 := line("", "u1", "user", "fix the parser"), line("u1", "a2", "assistant", "Let me look.")
	u3, a4 := line("a2", "u3", "user", "use regexps"), line("u3", "a4", "assistant", "Done with regexps.")
	edit := line("a2", "u5", "user", "no regexps, please") // the edited message, which branches at a2
	for _, tc := range []struct {
		name   string
		in     string
		target string
		texts  []string
		why    string
	}{{
		name:   "the torn line started the branch",
		in:     jsonl(u1, a2, u3, a4, torn(edit, `"content":"no rege`), line("u5", "a6", "assistant", "Done by hand."), line("a6", "u7", "user", "thanks")),
		target: "a2",
		texts:  []string{"fix the parser", "Let me look.", "Done by hand.", "thanks"},
		why:    "most likely it was the dropped line 5 before it, whose own id was torn away; it takes that line's parent",
	}, {
		name:   "the torn line started the branch, and its child was written onto it",
		in:     jsonl(u1, a2, u3, a4, torn(edit, `"content":"no rege`)+line("u5", "a6", "assistant", "Done by hand."), line("a6", "u7", "user", "thanks")),
		target: "a2",
		texts:  []string{"fix the parser", "Let me look.", "Done by hand.", "thanks"},
		why:    "most likely it was the entry torn at the start of line 5, this entry written onto it, whose own id was torn away; it takes that entry's parent",
	}, {
		name:   "an entry that can be the ancestor comes after the torn line",
		in:     jsonl(u1, a2, torn(edit, `"content":"no rege`), u3, line("zz", "a4", "assistant", "Done with regexps.")),
		target: "u3",
		texts:  []string{"fix the parser", "Let me look.", "use regexps", "Done with regexps."},
		why:    "is not in the file (a lost or torn line)",
	}} {
		d, err := Parse([]byte(tc.in), FormatClaude)
		require.NoError(t, err)
		require.Len(t, d.Relinked, 1, tc.name)
		require.Contains(t, d.Relinked[0].Reason, `relinked to "`+tc.target+`"`, tc.name)
		require.Contains(t, d.Relinked[0].Reason, tc.why, tc.name)
		var texts []string
		for _, m := range d.Messages() {
			texts = append(texts, m.Text())
		}
		require.Equal(t, tc.texts, texts, tc.name)
		require.True(t, sameRepair(t, []byte(tc.in), FormatClaude), tc.name)
	}
}

// TestCleanDocumentsUntouched: a file that needs no change is not written,
// whatever its layout.
func TestCleanDocumentsUntouched(t *testing.T) {
	t.Parallel()
	in := "{\"model\": \"m\",\n \"messages\": [\n  {\"role\":\"user\",\"content\":\"hi\"},   {\"role\": \"assistant\", \"content\": [{\"type\": \"thinking\", \"thinking\": \"t\", \"signature\": \"s\"}, {\"type\":\"text\",\"text\":\"hello\"}]} ,\n\n{\"role\":\"user\",\"content\":\"bye\"}\n ]\n}\n"
	path := filepath.Join(t.TempDir(), "req.json")
	require.NoError(t, os.WriteFile(path, []byte(in), 0o600))
	rep, err := RepairFile(path, FileOptions{Format: FormatAnthropic})
	require.NoError(t, err)
	require.Equal(t, StatusClean, rep.Status)
	require.Empty(t, rep.Changes)
	entries, _ := os.ReadDir(filepath.Dir(path))
	require.Len(t, entries, 1)
	// A repaired array keeps the separators between untouched neighbours.
	broken := strings.Replace(in, `{"role":"user","content":"bye"}`, `{"role":"user","content":[{"type":"tool_result","tool_use_id":"zz","content":"x"}]}, {"role":"user","content":"bye"}`, 1)
	d, err := Parse([]byte(broken), FormatAnthropic)
	require.NoError(t, err)
	require.NotEmpty(t, d.Repair().Changes)
	out, err := d.Bytes()
	require.NoError(t, err)
	require.Contains(t, string(out), `{"role":"user","content":"hi"},   {"role": "assistant"`)
}

// TestTruncatedBodyIsNamed: a request body cut short is refused as
// truncated at its last byte, not as an unknown format.
func TestTruncatedBodyIsNamed(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"t","na`,
		`[{"role":"user","content":"hi"},{"role":"assistant","content":"hel`,
	} {
		path := filepath.Join(t.TempDir(), "body.json")
		require.NoError(t, os.WriteFile(path, []byte(in), 0o600))
		rep, err := RepairFile(path, FileOptions{})
		require.ErrorIs(t, err, ErrRefused)
		require.Contains(t, rep.Reason, "truncated at byte "+itoa(len(in)), in)
		// Behind a byte-order mark, the byte is counted in the file.
		bom := "\xef\xbb\xbf" + in
		require.NoError(t, os.WriteFile(path, []byte(bom), 0o600))
		rep, err = RepairFile(path, FileOptions{})
		require.ErrorIs(t, err, ErrRefused)
		require.Contains(t, rep.Reason, "truncated at byte "+itoa(len(bom))+" ", in)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestDroppedCallMergesAssistants: removing a malformed call (and the
// result that answered it) must not leave two assistant messages in a row
// in a format whose turns alternate.
func TestDroppedCallMergesAssistants(t *testing.T) {
	t.Parallel()
	in := `[{"role":"user","content":"go"},{"role":"assistant","content":[{"type":"text","text":"A"},{"type":"tool_use","id":"x","name":"n"}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"x","content":"r"}]},{"role":"assistant","content":[{"type":"text","text":"B"}]}]`
	d, err := Parse([]byte(in), FormatAnthropic)
	require.NoError(t, err)
	rep := d.Repair()
	var kinds []string
	for _, c := range rep.Changes {
		kinds = append(kinds, c.Kind)
	}
	require.Contains(t, kinds, ChangeMergeMessage)
	out, err := d.Bytes()
	require.NoError(t, err)
	var msgs []struct {
		Role string `json:"role"`
	}
	require.NoError(t, json.Unmarshal(out, &msgs), string(out))
	for i := 1; i < len(msgs); i++ {
		require.False(t, msgs[i].Role == "assistant" && msgs[i-1].Role == "assistant", string(out))
	}
	d2, err := Parse(out, FormatAnthropic)
	require.NoError(t, err)
	require.Empty(t, d2.Repair().Changes)
	require.Equal(t, "AB|", assistantText(d2.Messages()))
}

// TestExportFidelity: ids that providers reuse across turns are made
// unique; thinking without a signature is left out of Anthropic and Claude
// Code exports (with a note) and a signed one keeps its signature; Claude
// Code lines carry sessionId, cwd, version and isSidechain.
func TestExportFidelity(t *testing.T) {
	t.Parallel()
	ts := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ev := func(typ, run, data string) journal.Event {
		return journal.Event{TS: ts, Type: typ, Run: run, Data: json.RawMessage(data)}
	}
	evs := []journal.Event{
		ev("session.created", "", `{"id":"ses_1","provider":"p","options":{"cwd":"/home/dev/proj"}}`),
		ev("run.created", "r1", `{"input":{"prompt":"one"}}`),
		ev("run.thinking", "r1", `{"text":"hmm"}`),
		ev("run.tool_call", "r1", `{"id":"exec_0","name":"sh","input":{"c":"ls"}}`),
		ev("run.tool_result", "r1", `{"callId":"exec_0","content":"a"}`),
		ev("run.text", "r1", `{"text":"done"}`),
		ev("run.created", "r2", `{"input":{"prompt":"two"}}`),
		ev("run.tool_call", "r2", `{"id":"exec_0","name":"sh","input":{"c":"pwd"}}`),
		ev("run.tool_result", "r2", `{"callId":"exec_0","content":"/"}`),
		ev("run.text", "r2", `{"text":"done again"}`),
	}
	for _, f := range []Format{FormatAnthropic, FormatClaude, FormatOpenAI, FormatPi} {
		var buf bytes.Buffer
		rep, err := ExportReport(&buf, evs, f)
		require.NoError(t, err, f)
		d, err := Parse(buf.Bytes(), f)
		require.NoError(t, err, f)
		require.Empty(t, d.Repair().Changes, f)
		ids := map[string]int{}
		for _, m := range d.Messages() {
			for _, b := range m.ToolCalls() {
				ids[b.ID]++
			}
			if b, ok := m.Result(); ok {
				ids[b.CallID] += 10
			}
		}
		require.Equal(t, map[string]int{"exec_0": 11, "exec_0_2": 11}, ids, "%s:\n%s", f, buf.String())
		kinds := map[string]int{}
		for _, c := range rep.Changes {
			kinds[c.Kind]++
		}
		require.Equal(t, 1, kinds[ChangeRenameToolID], f)
		if f == FormatAnthropic || f == FormatClaude {
			require.Equal(t, 1, kinds[ChangeDropThinking], f)
			require.NotContains(t, buf.String(), `"thinking"`, f)
		}
		if f == FormatPi {
			// As pi writes them: every assistant message has usage with
			// its total and cost (pi reads usage.cost.total unguarded), a
			// stop reason of pi's ("toolUse" for a turn that calls
			// tools), and a tool result names its call's tool.
			results, assistants := 0, 0
			for _, line := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))[1:] {
				var e struct {
					Message struct {
						Role       string `json:"role"`
						ToolName   string `json:"toolName"`
						StopReason string `json:"stopReason"`
						Content    []struct {
							Type string `json:"type"`
						} `json:"content"`
						Usage *struct {
							TotalTokens *int `json:"totalTokens"`
							Cost        *struct {
								Total *float64 `json:"total"`
							} `json:"cost"`
						} `json:"usage"`
					} `json:"message"`
				}
				require.NoError(t, json.Unmarshal(line, &e))
				switch m := e.Message; m.Role {
				case "toolResult":
					results++
					require.Equal(t, "sh", m.ToolName, string(line))
				case "assistant":
					assistants++
					require.NotNil(t, m.Usage, string(line))
					require.NotNil(t, m.Usage.TotalTokens, string(line))
					require.NotNil(t, m.Usage.Cost, string(line))
					require.NotNil(t, m.Usage.Cost.Total, string(line))
					calls := slices.ContainsFunc(m.Content, func(c struct {
						Type string `json:"type"`
					}) bool {
						return c.Type == "toolCall"
					})
					want := "stop"
					if calls {
						want = "toolUse"
					}
					require.Equal(t, want, m.StopReason, string(line))
				}
			}
			require.Equal(t, 2, results)
			require.GreaterOrEqual(t, assistants, 4)
		}
		if f == FormatClaude {
			for _, line := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
				var env struct {
					SessionID   string `json:"sessionId"`
					Cwd         string `json:"cwd"`
					Version     string `json:"version"`
					IsSidechain *bool  `json:"isSidechain"`
				}
				require.NoError(t, json.Unmarshal(line, &env))
				require.Len(t, env.SessionID, 36, string(line))
				require.Equal(t, "/home/dev/proj", env.Cwd)
				require.NotEmpty(t, env.Version)
				require.NotNil(t, env.IsSidechain)
				require.False(t, *env.IsSidechain)
			}
		}
	}
	// A signed thinking block keeps its signature.
	msgs := []Message{{Role: RoleUser, Blocks: text("q")}, {Role: RoleAssistant, Blocks: []Block{{Type: BlockThinking, Text: "t", Signature: "EqQB"}, {Type: BlockText, Text: "a"}}}}
	var buf bytes.Buffer
	require.NoError(t, Encode(&buf, FormatAnthropic, msgs))
	require.Contains(t, buf.String(), `"signature":"EqQB"`)
}

// TestNoValidLineRefused: a file none of whose lines is a valid entry of
// the format named is refused, not emptied, in every mode.
func TestNoValidLineRefused(t *testing.T) {
	t.Parallel()
	data := []byte(`{"role":"user","content":"hi"}` + "\n" + `{"role":"assistant","content":"hello"}` + "\n\n")
	for _, f := range []Format{FormatClaude, FormatOpenAI, FormatAnthropic} {
		for _, lines := range []bool{false, true} {
			path := filepath.Join(t.TempDir(), "x.jsonl")
			if f == FormatClaude {
				require.NoError(t, os.WriteFile(path, data, 0o600))
			} else {
				require.NoError(t, os.WriteFile(path, []byte(`{"type":"user","message":{}}`+"\n"+`{"nope":1}`+"\n"), 0o600))
			}
			before, _ := os.ReadFile(path)
			rep, err := RepairFile(path, FileOptions{Format: f, LinesOnly: lines})
			require.ErrorIs(t, err, ErrRefused, "%s %v", f, lines)
			require.Contains(t, rep.Reason, "no line of the file is a valid")
			after, _ := os.ReadFile(path)
			require.Equal(t, before, after)
		}
	}
}
