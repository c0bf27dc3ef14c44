package transcript

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// farSession writes a session of more entries than the streaming repair's
// window of recent ids (65,536) in format f: a user message and a text
// reply, over and over, every user message the same text ("continue")
// and every reply the same ("ok"), so that lines repeat everything but
// their ids. Each entry's line goes through each, which may change it,
// and the lines of extra are appended. It returns the file's path and the
// first entry's line.
func farSession(t *testing.T, f Format, each func(i int, line string) string, extra ...func(first string) string) (string, string) {
	t.Helper()
	var b strings.Builder
	if f == FormatPi {
		b.WriteString(`{"type":"session","version":3,"id":"s","timestamp":"2026-03-01T10:00:00.000Z","cwd":"/w"}` + "\n")
	}
	parent, first := "null", ""
	for i := range 70_000 {
		id := fmt.Sprintf("%08x", i+1)
		var line string
		switch {
		case f == FormatPi && i%2 == 0:
			line = `{"type":"message","id":"` + id + `","parentId":` + parent + `,"message":{"role":"user","content":"continue"}}`
		case f == FormatPi:
			line = `{"type":"message","id":"` + id + `","parentId":` + parent + `,"message":{"role":"assistant","content":[{"type":"text","text":"ok"}],"stopReason":"stop"}}`
		case i%2 == 0:
			line = `{"parentUuid":` + parent + `,"isSidechain":false,"sessionId":"s","type":"user","message":{"role":"user","content":"continue"},"uuid":"` + id + `"}`
		default:
			line = `{"parentUuid":` + parent + `,"isSidechain":false,"sessionId":"s","type":"assistant","message":{"id":"m` + id + `","role":"assistant","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn"},"uuid":"` + id + `"}`
		}
		if i == 0 {
			first = line
		}
		line = each(i, line)
		b.WriteString(line + "\n")
		parent = `"` + id + `"`
	}
	for _, e := range extra {
		b.WriteString(e(first) + "\n")
	}
	path := filepath.Join(t.TempDir(), "s.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o600))
	return path, first
}

// TestFarRepeat: a line written again far back, beyond the streaming
// repair's window of recent ids, is a repeat as in the in-memory repair:
// a byte-for-byte copy is dropped (before, the copy was the leaf, the
// path from it was its own entry alone, and the damage on the real path
// was not reported), and a line with the same id and other bytes is kept,
// its id still naming the first line. Healthy files whose lines repeat all
// but their ids (and Claude Code's summaries and snapshots, which have no
// uuid and are written again as they are) stay clean.
func TestFarRepeat(t *testing.T) {
	t.Parallel()
	keep := func(_ int, line string) string { return line }
	// The last reply calls a tool and has no result: damage on the path.
	callAt := func(f Format) func(int, string) string {
		return func(i int, line string) string {
			if i != 69_999 {
				return line
			}
			if f == FormatPi {
				return strings.Replace(line, `{"type":"text","text":"ok"}`, `{"type":"toolCall","id":"c1","name":"read","arguments":{}}`, 1)
			}
			return strings.Replace(line, `{"type":"text","text":"ok"}`, `{"type":"tool_use","id":"c1","name":"Read","input":{}}`, 1)
		}
	}
	again := func(first string) string { return first }
	other := func(first string) string { return strings.Replace(first, `"continue"`, `"continue, edited"`, 1) }
	summary := `{"type":"summary","summary":"Parser fixes","leafUuid":"00000002"}`
	snapshot := `{"type":"file-history-snapshot","messageId":"00000001","snapshot":{"messageId":"00000001","trackedFileBackups":{},"timestamp":"2026-03-01T10:00:00.000Z"},"isSnapshotUpdate":false}`
	for _, tc := range []struct {
		name    string
		format  Format
		each    func(int, string) string
		extra   []func(string) string
		changes []string // kind@line
	}{{
		name:    "pi: the first line written again at the end",
		format:  FormatPi,
		each:    callAt(FormatPi),
		extra:   []func(string) string{again},
		changes: []string{"drop_duplicate@70002", "insert_result@70001"},
	}, {
		name:    "claude: the first line written again at the end",
		format:  FormatClaude,
		each:    callAt(FormatClaude),
		extra:   []func(string) string{again},
		changes: []string{"drop_duplicate@70001", "insert_result@70000"},
	}, {
		name:   "pi: the first id again with other bytes is kept, and is the leaf",
		format: FormatPi,
		each:   keep,
		extra:  []func(string) string{other},
	}, {
		name:   "claude: summaries and snapshots written again far apart, no repeat",
		format: FormatClaude,
		each: func(i int, line string) string {
			if i == 3 {
				return summary + "\n" + snapshot + "\n" + line
			}
			return line
		},
		extra: []func(string) string{func(string) string { return summary + "\n" + snapshot }},
	}, {
		name:   "pi: lines repeat all but their ids",
		format: FormatPi,
		each:   keep,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path, _ := farSession(t, tc.format, tc.each, tc.extra...)
			rep, err := RepairFile(path, FileOptions{Format: tc.format, DryRun: true})
			require.NoError(t, err)
			require.True(t, rep.Messages, "streamed, line and message level")
			var got []string
			for _, c := range rep.Changes {
				got = append(got, fmt.Sprintf("%s@%d", c.Kind, c.Line))
			}
			require.Equal(t, tc.changes, got)
			if len(tc.changes) == 0 {
				require.Equal(t, StatusClean, rep.Status)
			}
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			require.True(t, sameRepair(t, data, tc.format), "streamed")
		})
	}
}

// TestRepeatedIDDroppedFromPath: when repair drops from the path a line
// with the id of an earlier line (and other bytes), the entries naming
// that id keep their parent: the id names the earlier line, which stays.
// (Before, they were relinked as if the id were gone.) In memory and
// streaming.
func TestRepeatedIDDroppedFromPath(t *testing.T) {
	t.Parallel()
	head := `{"type":"session","version":3,"id":"s","timestamp":"2026-03-01T10:00:00.000Z","cwd":"/w"}`
	a := `{"type":"message","id":"a1","parentId":null,"message":{"role":"user","content":"fix the parser"}}`
	b := `{"type":"message","id":"b2","parentId":"a1","message":{"role":"assistant","content":[{"type":"text","text":"On it."}],"stopReason":"stop"}}`
	// The leaf: the id of the first line, a result that answers no call.
	leaf := `{"type":"message","id":"a1","parentId":null,"message":{"role":"toolResult","toolCallId":"c9","toolName":"read","content":[],"isError":false}}`
	in := jsonl(head, a, b, leaf)
	d, err := Parse([]byte(in), FormatPi)
	require.NoError(t, err)
	rep := d.Repair()
	require.Len(t, rep.Changes, 1)
	require.Equal(t, ChangeDropOrphan, rep.Changes[0].Kind)
	out, err := d.Bytes()
	require.NoError(t, err)
	require.Equal(t, jsonl(head, a, b), string(out), "b2 still names a1")
	require.True(t, sameRepair(t, []byte(in), FormatPi))
}

// TestStreamRepeatedIDs holds the streaming repair to the in-memory one
// where a line has the id of an earlier one (and other bytes), or a child
// comes before its parent.
func TestStreamRepeatedIDs(t *testing.T) {
	t.Parallel()
	head := `{"type":"session","version":3,"id":"s","timestamp":"2026-03-01T10:00:00.000Z","cwd":"/w"}`
	msg := func(id, parent, body string) string {
		p := "null"
		if parent != "" {
			p = `"` + parent + `"`
		}
		return `{"type":"message","id":"` + id + `","parentId":` + p + `,"message":` + body + `}`
	}
	user := `{"role":"user","content":"go on"}`
	call := `{"role":"assistant","content":[{"type":"toolCall","id":"c1","name":"read","arguments":{}}],"stopReason":"toolUse"}`
	reply := `{"role":"assistant","content":[{"type":"text","text":"done"}],"stopReason":"stop"}`
	orphan := `{"role":"toolResult","toolCallId":"c9","toolName":"read","content":[],"isError":false}`
	cc := func(typ, uuid, parent, message string) string {
		p := "null"
		if parent != "" {
			p = `"` + parent + `"`
		}
		return `{"parentUuid":` + p + `,"isSidechain":false,"sessionId":"s","type":"` + typ + `","message":` + message + `,"uuid":"` + uuid + `"}`
	}
	ccCall := `{"id":"msg_1","role":"assistant","content":[{"type":"tool_use","id":"c1","name":"Read","input":{}}],"stop_reason":"tool_use"}`
	for _, tc := range []struct {
		name   string
		format Format
		in     string
	}{{
		// The leaf has the id of the call's line, whose result hangs on
		// that id: the in-memory repair pairs it with the leaf's call.
		name:   "claude: the leaf has the id of a call's line with a result",
		format: FormatClaude,
		in: jsonl(cc("user", "u1", "", user), cc("assistant", "a2", "u1", ccCall),
			cc("user", "r3", "a2", `{"role":"user","content":[{"type":"tool_result","tool_use_id":"c1","content":"ok"}]}`),
			strings.Replace(cc("assistant", "a2", "u1", ccCall), `"isSidechain"`, `"cwd":"/w","isSidechain"`, 1)),
	}, {
		// The leaf has the id of a line on its path, and both call c1
		// without a result: the results made up for them take ids made
		// from that id, kept apart.
		name:   "pi: the leaf has the id of a line on its path, both with a call to answer",
		format: FormatPi,
		in: jsonl(head, msg("a1", "", user), msg("b2", "a1", call), msg("c3", "b2", user), msg("d4", "c3", reply),
			msg("e5", "d4", user), strings.Replace(msg("b2", "e5", call), `"toolUse"`, `"toolUse","x":1`, 1)),
	}, {
		// The entry before the broken link has the id of the first line:
		// the link goes to that first line, the entry the id names.
		name:   "a broken link relinked to an entry whose id an earlier line has",
		format: FormatPi,
		in:     jsonl(head, msg("a1", "", user), msg("b2", "a1", call), msg("a1", "b2", user), msg("c3", "gone", reply)),
	}, {
		// The first line's parent comes after it, and repair drops that
		// parent from the path: the in-memory repair relinks the child.
		name:   "a child before its parent, which repair drops",
		format: FormatPi,
		in:     jsonl(head, msg("b2", "a1", user), msg("c3", "b2", reply), msg("a1", "", orphan)),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sameRepair(t, []byte(tc.in), tc.format)
		})
	}
}
