package transcript

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Lines in the producers' shapes, for the glued-line tests.
const (
	piHead = `{"type":"session","version":3,"id":"6f1c2a40-1b7b-4fb1-b512-c9738b1fe617","timestamp":"2026-03-01T10:00:00.000Z","cwd":"/w/app"}`
	piU1   = `{"type":"message","id":"a1b2c3d4","parentId":null,"timestamp":"2026-03-01T10:00:01.000Z","message":{"role":"user","content":"fix the parser","timestamp":1763681630000}}`
	piA2   = `{"type":"message","id":"b2c3d4e5","parentId":"a1b2c3d4","timestamp":"2026-03-01T10:00:02.000Z","message":{"role":"assistant","content":[{"type":"text","text":"On it."}],"api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5","usage":{"input":3,"output":4,"cacheRead":0,"cacheWrite":0,"totalTokens":7,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}},"stopReason":"stop","timestamp":1763681630100}}`
	// piU3 is the entry torn by the crash; piU4 the one the agent wrote
	// after it started again (its leaf was piA2: the torn line does not
	// parse), and piA5 its answer.
	piU3 = `{"type":"message","id":"c3d4e5f6","parentId":"b2c3d4e5","timestamp":"2026-03-01T10:00:03.000Z","message":{"role":"user","content":"and the tests","timestamp":1763681630200}}`
	piU4 = `{"type":"message","id":"d4e5f6a7","parentId":"b2c3d4e5","timestamp":"2026-03-01T10:05:00.000Z","message":{"role":"user","content":"run the tests: {\"type\":\"message\",\"id\":\"zz\"} must parse","timestamp":1763681930000}}`
	piA5 = `{"type":"message","id":"e5f6a7b8","parentId":"d4e5f6a7","timestamp":"2026-03-01T10:05:01.000Z","message":{"role":"assistant","content":[{"type":"text","text":"They pass. {\"a\":\"}\"}"}],"api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5","usage":{"input":3,"output":4,"cacheRead":0,"cacheWrite":0,"totalTokens":7,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}},"stopReason":"stop","timestamp":1763681930100}}`

	ccU1 = `{"parentUuid":null,"isSidechain":false,"userType":"external","cwd":"/w/app","sessionId":"4d56e2a0-0000-4000-8000-000000000000","version":"2.1.39","gitBranch":"main","type":"user","message":{"role":"user","content":"fix the parser"},"uuid":"u1","timestamp":"2026-02-12T16:02:26.000Z"}`
	ccA2 = `{"parentUuid":"u1","isSidechain":false,"userType":"external","cwd":"/w/app","sessionId":"4d56e2a0-0000-4000-8000-000000000000","version":"2.1.39","gitBranch":"main","message":{"id":"msg_X","type":"message","role":"assistant","model":"claude-opus-4-6","content":[{"type":"text","text":"Let me look."}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5}},"requestId":"req_1","type":"assistant","uuid":"a2","timestamp":"2026-02-12T16:02:27.000Z"}`
	ccU3 = `{"parentUuid":"a2","isSidechain":false,"userType":"external","cwd":"/w/app","sessionId":"4d56e2a0-0000-4000-8000-000000000000","version":"2.1.39","gitBranch":"main","type":"user","message":{"role":"user","content":"and the tests"},"uuid":"u3","timestamp":"2026-02-12T16:02:28.000Z"}`
	ccU4 = `{"parentUuid":"a2","isSidechain":false,"userType":"external","cwd":"/w/app","sessionId":"4d56e2a0-0000-4000-8000-000000000000","version":"2.1.39","gitBranch":"main","type":"user","message":{"role":"user","content":"run them: {\"parentUuid\":null}"},"uuid":"u4","timestamp":"2026-02-12T16:09:00.000Z"}`
	ccA5 = `{"parentUuid":"u4","isSidechain":false,"userType":"external","cwd":"/w/app","sessionId":"4d56e2a0-0000-4000-8000-000000000000","version":"2.1.39","gitBranch":"main","message":{"id":"msg_Y","type":"message","role":"assistant","model":"claude-opus-4-6","content":[{"type":"text","text":"They pass."}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5}},"requestId":"req_2","type":"assistant","uuid":"a5","timestamp":"2026-02-12T16:09:01.000Z"}`
)

func jsonl(lines ...string) string { return strings.Join(lines, "\n") + "\n" }

// torn cuts an entry at a byte where the cut leaves no complete JSON value
// behind (in the middle of a key).
func torn(line, at string) string {
	i := strings.Index(line, at)
	if i < 0 {
		panic("torn: " + at + " not in the line")
	}
	return line[:i+len(at)]
}

// TestGluedEntryKept: a line torn by a crash with the next entry written
// onto it keeps that entry, as a line of its own, and drops the torn
// fragment only; the entry's children stay linked to it. In memory,
// streaming and line by line (--lines-only).
func TestGluedEntryKept(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		format   Format
		in, want string
		texts    []string // the conversation after repair
		changes  []string // kind@line
		relinked string   // the relink reason holds this
		// linesOnly is what --lines-only writes, when not want: it
		// changes no parent link.
		linesOnly string
	}{{
		name:   "pi: the agent appended after restarting",
		format: FormatPi,
		in:     jsonl(piHead, piU1, piA2, torn(piU3, `"role":"user","cont`)+piU4, piA5),
		want:   jsonl(piHead, piU1, piA2, piU4, piA5),
		texts:  []string{"fix the parser", "On it.", `run the tests: {"type":"message","id":"zz"} must parse`, `They pass. {"a":"}"}`},
		changes: []string{
			"drop_fragment@4",
		},
	}, {
		name:   "pi: the glued entry's parent is the torn one",
		format: FormatPi,
		in: jsonl(piHead, piU1, piA2, torn(piU3, `"timest`)+
			strings.Replace(piU4, `"parentId":"b2c3d4e5"`, `"parentId":"c3d4e5f6"`, 1), piA5),
		want:      jsonl(piHead, piU1, piA2, piU4, piA5),
		texts:     []string{"fix the parser", "On it.", `run the tests: {"type":"message","id":"zz"} must parse`, `They pass. {"a":"}"}`},
		changes:   []string{"drop_fragment@4", "relink@4"},
		relinked:  `parent "c3d4e5f6" is gone with the torn fragment dropped from line 4`,
		linesOnly: jsonl(piHead, piU1, piA2, strings.Replace(piU4, `"parentId":"b2c3d4e5"`, `"parentId":"c3d4e5f6"`, 1), piA5),
	}, {
		name:    "claude: a user line glued onto a torn one",
		format:  FormatClaude,
		in:      jsonl(ccU1, ccA2, torn(ccU3, `"and the te`)+ccU4, ccA5),
		want:    jsonl(ccU1, ccA2, ccU4, ccA5),
		texts:   []string{"fix the parser", "Let me look.", `run them: {"parentUuid":null}`, "They pass."},
		changes: []string{"drop_fragment@3"},
	}, {
		name:    "claude: a line cut right before its line end, the next written onto it",
		format:  FormatClaude,
		in:      jsonl(ccU1, ccA2+ccU4, ccA5),
		want:    jsonl(ccU1, ccA2, ccU4, ccA5),
		texts:   []string{"fix the parser", "Let me look.", `run them: {"parentUuid":null}`, "They pass."},
		changes: []string{"split_line@2"},
	}, {
		name:    "openai jsonl",
		format:  FormatOpenAI,
		in:      jsonl(`{"role":"user","content":"hi"}`, `{"role":"assistant","content":"hel`+`{"role":"user","content":"{\"role\":\"x\"} again"}`, `{"role":"assistant","content":"ok"}`),
		want:    jsonl(`{"role":"user","content":"hi"}`, `{"role":"user","content":"{\"role\":\"x\"} again"}`, `{"role":"assistant","content":"ok"}`),
		texts:   []string{"hi", `{"role":"x"} again`, "ok"},
		changes: []string{"drop_fragment@2"},
	}} {
		if tc.format == FormatPi || tc.format == FormatClaude {
			// The streaming repair keeps a glued entry as the in-memory
			// one does; a line of two whole entries it leaves to it.
			split := tc.changes[0] == "split_line@2"
			require.Equal(t, !split, sameRepair(t, []byte(tc.in), tc.format), tc.name)
		}
		for _, mode := range []string{"default", "memory", "lines-only"} {
			t.Run(tc.name+"/"+mode, func(t *testing.T) {
				t.Parallel()
				path := filepath.Join(t.TempDir(), "s.jsonl")
				require.NoError(t, os.WriteFile(path, []byte(tc.in), 0o600))
				var got []string
				var relink string
				switch mode {
				case "memory":
					d, err := Parse([]byte(tc.in), tc.format)
					require.NoError(t, err)
					for _, c := range append(append(d.Dropped, d.Relinked...), d.Repair().Changes...) {
						got = append(got, c.Kind+"@"+itoa(c.Line))
						if c.Kind == ChangeRelink {
							relink = c.Reason
						}
					}
					out, err := d.Bytes()
					require.NoError(t, err)
					require.NoError(t, os.WriteFile(path, out, 0o600))
				default:
					rep, err := RepairFile(path, FileOptions{Format: tc.format, NoBackup: true, LinesOnly: mode == "lines-only"})
					require.NoError(t, err)
					require.Equal(t, StatusRepaired, rep.Status)
					for _, c := range rep.Changes {
						got = append(got, c.Kind+"@"+itoa(c.Line))
						if c.Kind == ChangeRelink {
							relink = c.Reason
						}
						if c.Kind == ChangeDropFragment {
							require.Contains(t, c.Reason, "is kept as a line of its own")
						}
					}
				}
				out, err := os.ReadFile(path)
				require.NoError(t, err)
				want := tc.changes
				if mode == "lines-only" {
					want = want[:1] // file level: the parent links are not changed
					if tc.linesOnly != "" {
						require.Equal(t, want, got)
						require.Equal(t, tc.linesOnly, string(out))
						return
					}
				}
				require.Equal(t, want, got)
				require.Equal(t, tc.want, string(out))
				if tc.relinked != "" {
					require.Contains(t, relink, tc.relinked)
				}
				d, err := Parse(out, tc.format)
				require.NoError(t, err)
				require.Empty(t, d.Dropped)
				require.Empty(t, d.Relinked)
				var texts []string
				for _, m := range d.Messages() {
					texts = append(texts, m.Text())
				}
				require.Equal(t, tc.texts, texts)
			})
		}
	}
}

// TestTornLineNotGlued: a torn line that ends where an object nested in
// its entry ends (a content block, Claude Code's message object, a
// subagent's progress message, all with a "type") has nothing glued on:
// it is dropped whole, and nothing of it is kept as an entry. And a line
// that is valid is never split, whatever its strings hold.
func TestTornLineNotGlued(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		format Format
		line   string
	}{
		{"pi content block", FormatPi, torn(piA2, `"text":"On it."}`)},
		{"pi message object", FormatPi, torn(piU1, `"timestamp":1763681630000}`)},
		{"claude message object", FormatClaude, torn(ccA2, `"output_tokens":5}}`)},
		{"claude subagent progress message", FormatClaude, `{"parentUuid":"a2","isSidechain":false,"sessionId":"4d56","type":"progress","data":{"type":"agent_progress","message":{"type":"assistant","uuid":"x9","timestamp":"2026-02-12T16:02:28.000Z","message":{"role":"assistant","content":[{"type":"text","text":"hi"}]}}`},
		{"claude tool result", FormatClaude, `{"parentUuid":"a2","isSidechain":false,"sessionId":"4d56","type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"ok"}]},"toolUseResult":{"type":"text","file":{"filePath":"/w/a.go"}}`},
		{"openai tool call", FormatOpenAI, `{"role":"assistant","tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}`},
		// Nested objects with the keys of an entry (helper-49's review):
		// the line up to them is the start of one JSON value.
		{"pi custom entry's data", FormatPi, `{"type":"custom","id":"f1e2d3c4","parentId":"e5f6a7b8","timestamp":"2026-03-01T10:06:00.000Z","customType":"issues","data":{"items":[{"type":"comment","id":"c1","parentId":null,"timestamp":"2026-03-01T10:06:00.000Z","body":"a"}`},
		{"openai message metadata", FormatOpenAI, `{"role":"assistant","content":"x","metadata":{"handoff":{"role":"reviewer","content":"y"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := codecFor(tc.format)
			require.NoError(t, err)
			require.NotEmpty(t, c.checkLine([]byte(tc.line)), "the line is torn")
			frag, spans := splitGlued([]byte(tc.line), func(b []byte) bool { return c.checkLine(b) == "" }, gluedEntry(tc.format, c))
			require.Zero(t, frag)
			require.Empty(t, spans)
		})
	}
	// Healthy lines with entries in their strings are clean and untouched.
	for _, tc := range []struct {
		format Format
		in     string
	}{
		{FormatPi, jsonl(piHead, piU1, piA2, piU4, piA5)},
		{FormatClaude, jsonl(ccU1, ccA2, ccU4, ccA5)},
	} {
		for _, lines := range []bool{false, true} {
			path := filepath.Join(t.TempDir(), "s.jsonl")
			require.NoError(t, os.WriteFile(path, []byte(tc.in), 0o600))
			rep, err := RepairFile(path, FileOptions{LinesOnly: lines})
			require.NoError(t, err)
			require.Equal(t, StatusClean, rep.Status, "%s: %v", tc.format, rep.Changes)
		}
	}
}

// TestSplitGlued holds the search for glued entries to what each shape
// gives.
func TestSplitGlued(t *testing.T) {
	t.Parallel()
	c := openaiCodec{}
	whole := func(b []byte) bool { return c.checkLine(b) == "" }
	entry := gluedEntry(FormatOpenAI, c)
	for _, tc := range []struct {
		line  string
		frag  int
		spans [][2]int
	}{
		{`{"role":"user","content":"a`, 0, nil},
		{`{"role":"user","content":"a{"role":"user","content":"b"}`, 27, [][2]int{{27, 56}}},
		{`{"role":"user","content":"a"}{"role":"user","content":"b"}`, 0, [][2]int{{0, 29}, {29, 58}}},
		{`{"role":"user","con{"role":"user","content":"b"}{"role":"user","content":"c"}`, 19, [][2]int{{19, 48}, {48, 77}}},
		{`{"role":"user","content":"a"}  {"role":"user","content":"b"}  `, 0, [][2]int{{0, 31}, {31, 62}}},
		// Braces and escaped quotes in the glued entry's strings.
		{`xx{"role":"user","content":"} {\"role\":\"x\"} \\"}`, 2, [][2]int{{2, 51}}},
		// Not an entry at the end: a nested object, an array, a bare value.
		{`{"role":"user","content":[{"type":"text","text":"a"}`, 0, nil},
		{`{"role":"user","content":[1]`, 0, nil},
		{`{"role":"user","content":"a"}x`, 0, nil},
		// Something before it that is only blank: the line's only object.
		{`  {"role":"user","content":"a"`, 0, nil},
	} {
		frag, spans := splitGlued([]byte(tc.line), whole, entry)
		require.Equal(t, tc.frag, frag, tc.line)
		require.Equal(t, tc.spans, spans, tc.line)
	}
}

// TestGluedLastLineOfACRLFFile: two whole entries on a CRLF file's last
// line, which has no line end, are split with the file's CRLF, by the
// line-level repair (--lines-only) as by the in-memory one.
func TestGluedLastLineOfACRLFFile(t *testing.T) {
	t.Parallel()
	in := ccU1 + "\r\n" + ccA2 + ccU4
	want := ccU1 + "\r\n" + ccA2 + "\r\n" + ccU4
	for _, mode := range []string{"memory", "lines-only"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "s.jsonl")
			require.NoError(t, os.WriteFile(path, []byte(in), 0o600))
			if mode == "memory" {
				d, err := Parse([]byte(in), FormatClaude)
				require.NoError(t, err)
				out, err := d.Bytes()
				require.NoError(t, err)
				require.Equal(t, want, string(out))
				return
			}
			rep, err := RepairFile(path, FileOptions{Format: FormatClaude, NoBackup: true, LinesOnly: true})
			require.NoError(t, err)
			require.Equal(t, StatusRepaired, rep.Status)
			require.Len(t, rep.Changes, 1)
			require.Equal(t, ChangeSplitLine, rep.Changes[0].Kind)
			out, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Equal(t, want, string(out))
		})
	}
	// An LF file's last line is split with LF.
	path := filepath.Join(t.TempDir(), "s.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(ccU1+"\n"+ccA2+ccU4), 0o600))
	_, err := RepairFile(path, FileOptions{Format: FormatClaude, NoBackup: true, LinesOnly: true})
	require.NoError(t, err)
	out, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, ccU1+"\n"+ccA2+"\n"+ccU4, string(out))
}

// TestLineOneTerm: the first line's terminator, wherever the line end
// falls in the reads.
func TestLineOneTerm(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 64<<10-1)
	for in, want := range map[string]string{
		"a\r\nb\n":        "\r\n",
		"a\nb\r\n":        "\n",
		"a":               "\n",
		"":                "\n",
		long + "\r\n":     "\r\n", // the CR ends the first read, the LF starts the next
		long + "x\r\nb\n": "\r\n",
		long + "\n":       "\n",
		"\r\n" + long:     "\r\n",
	} {
		got, err := lineOneTerm(strings.NewReader(in))()
		require.NoError(t, err)
		require.Equal(t, want, got, "%.20q", in)
	}
}

// TestZerosBeforeAGluedEntry: a run of zero bytes before a whole entry (a
// crash left a write's space unwritten, and the agent appended after it)
// is reported as zeros, not as an entry cut short; the entry is kept.
func TestZerosBeforeAGluedEntry(t *testing.T) {
	t.Parallel()
	in := jsonl(ccU1, ccA2, strings.Repeat("\x00", 100)+ccU4, ccA5)
	want := jsonl(ccU1, ccA2, ccU4, ccA5)
	for _, mode := range []string{"default", "memory", "lines-only"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "s.jsonl")
			require.NoError(t, os.WriteFile(path, []byte(in), 0o600))
			var changes []Change
			if mode == "memory" {
				d, err := Parse([]byte(in), FormatClaude)
				require.NoError(t, err)
				changes = d.Dropped
				out, err := d.Bytes()
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(path, out, 0o600))
			} else {
				rep, err := RepairFile(path, FileOptions{Format: FormatClaude, NoBackup: true, LinesOnly: mode == "lines-only"})
				require.NoError(t, err)
				changes = rep.Changes
			}
			require.Len(t, changes, 1)
			require.Equal(t, ChangeDropFragment, changes[0].Kind)
			require.Equal(t, 3, changes[0].Line)
			require.Contains(t, changes[0].Reason, "the line begins with 100 zero bytes")
			require.Contains(t, changes[0].Reason, "the complete entry after them is kept as a line of its own")
			require.NotContains(t, changes[0].Reason, "cut short")
			out, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Equal(t, want, string(out))
		})
	}
}
