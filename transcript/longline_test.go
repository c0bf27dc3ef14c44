package transcript

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Sessions with a tool result longer than the longest line a repair holds
// (set to 4 KiB by the tests, 64 MiB otherwise): a file read whole, in
// the producers' shapes.
var (
	bigText = strings.Repeat(`package main\n\nfunc main() {\n\tprintln(\"hi\")\n}\n`, 120) // 6 KiB of JSON-escaped source

	piCall = `{"type":"message","id":"c3d4e5f6","parentId":"b2c3d4e5","timestamp":"2026-03-01T10:00:03.000Z","message":{"role":"assistant","content":[{"type":"toolCall","id":"call_1","name":"read","arguments":{"path":"main.go"}}],"api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5","stopReason":"toolUse","timestamp":1763681630200}}`
	piBig  = `{"type":"message","id":"d4e5f6a7","parentId":"c3d4e5f6","timestamp":"2026-03-01T10:00:04.000Z","message":{"role":"toolResult","toolCallId":"call_1","toolName":"read","content":[{"type":"text","text":"` + bigText + `"}],"isError":false,"timestamp":1763681630300}}`
	piEnd  = `{"type":"message","id":"e5f6a7b8","parentId":"d4e5f6a7","timestamp":"2026-03-01T10:00:05.000Z","message":{"role":"assistant","content":[{"type":"text","text":"It prints hi."}],"api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5","stopReason":"stop","timestamp":1763681630400}}`

	ccCall  = `{"parentUuid":"a2","isSidechain":false,"userType":"external","cwd":"/w/app","sessionId":"4d56e2a0-0000-4000-8000-000000000000","version":"2.1.39","gitBranch":"main","message":{"id":"msg_Z","type":"message","role":"assistant","model":"claude-opus-4-6","content":[{"type":"tool_use","id":"toolu_1","name":"Read","input":{"file_path":"/w/app/main.go"}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5}},"requestId":"req_3","type":"assistant","uuid":"a3","timestamp":"2026-02-12T16:02:29.000Z"}`
	ccBig   = `{"parentUuid":"a3","isSidechain":false,"userType":"external","cwd":"/w/app","sessionId":"4d56e2a0-0000-4000-8000-000000000000","version":"2.1.39","gitBranch":"main","type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_1","type":"tool_result","content":"` + bigText + `"}]},"uuid":"u4","timestamp":"2026-02-12T16:02:30.000Z","toolUseResult":{"type":"text","file":{"filePath":"/w/app/main.go","content":"` + bigText + `","numLines":600,"startLine":1,"totalLines":600}}}`
	ccBigU1 = strings.Replace(ccU1, `"content":"fix the parser"`, `"content":"`+bigText+`"`, 1) // a file pasted into the first message
	ccEnd   = `{"parentUuid":"u4","isSidechain":false,"userType":"external","cwd":"/w/app","sessionId":"4d56e2a0-0000-4000-8000-000000000000","version":"2.1.39","gitBranch":"main","message":{"id":"msg_W","type":"message","role":"assistant","model":"claude-opus-4-6","content":[{"type":"text","text":"It prints hi."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5}},"requestId":"req_4","type":"assistant","uuid":"a5","timestamp":"2026-02-12T16:02:31.000Z"}`
)

// TestLongLineKept: a valid line longer than the longest line a repair
// holds is kept, never dropped for its length (before, it was dropped as
// "line longer than 67108864 bytes"): checked on its outline, copied from
// the file, its parent link patched around it; a damaged one is cut as any
// other. Streaming, in memory and line by line (--lines-only). (Not
// parallel: it sets the longest line held.)
func TestLongLineKept(t *testing.T) {
	defer func(n int) { maxLineSize = n }(maxLineSize)
	maxLineSize = 4 << 10
	require.Greater(t, len(piBig), maxLineSize)
	require.Greater(t, len(ccBig), maxLineSize)
	for _, tc := range []struct {
		name    string
		format  Format
		in      string
		changes []string // kind@line, of the default repair; none: the file is clean
		want    string   // its output, when given (always the in-memory repair's)
		// linesOnly is what --lines-only writes ("": the file is clean),
		// and the entries it leaves naming a dropped line's as parent.
		linesOnly string
		dangling  int
	}{{
		name:   "pi: a healthy long tool result stays clean",
		format: FormatPi,
		in:     jsonl(piHead, piU1, piA2, piCall, piBig, piEnd),
	}, {
		name:   "claude: a healthy long tool result stays clean",
		format: FormatClaude,
		in:     jsonl(ccU1, ccA2, ccCall, ccBig, ccEnd),
	}, {
		name:    "pi: the line before the long one is lost: it is relinked, copied around its parent",
		format:  FormatPi,
		in:      jsonl(piHead, piU1, piA2, piCall, strings.Replace(piBig, `"parentId":"c3d4e5f6"`, `"parentId":"zzzzzzzz"`, 1), piEnd),
		changes: []string{"relink@5"},
		want:    jsonl(piHead, piU1, piA2, piCall, piBig, piEnd),
	}, {
		name:      "claude: a long line torn, the next entry written onto it",
		format:    FormatClaude,
		in:        jsonl(ccU1, ccA2, ccCall, torn(ccBig, `"numLines"`)+strings.Replace(ccEnd, `"parentUuid":"u4"`, `"parentUuid":"a3"`, 1)),
		changes:   []string{"drop_fragment@4", "insert_result@3"},
		linesOnly: jsonl(ccU1, ccA2, ccCall, strings.Replace(ccEnd, `"parentUuid":"u4"`, `"parentUuid":"a3"`, 1)),
	}, {
		name:      "pi: the call before the long result torn: its children relinked, the orphan result dropped",
		format:    FormatPi,
		in:        jsonl(piHead, piU1, piA2, torn(piCall, `"role":"assis`), piBig, piEnd),
		changes:   []string{"drop_line@4", "relink@5", "drop_orphan@5"},
		linesOnly: jsonl(piHead, piU1, piA2, piBig, piEnd),
		dangling:  1,
	}, {
		name:      "pi: a long last line torn",
		format:    FormatPi,
		in:        jsonl(piHead, piU1, piA2, piCall, piBig[:len(piBig)-40]),
		changes:   []string{"drop_line@5", "insert_result@4"},
		linesOnly: jsonl(piHead, piU1, piA2, piCall),
	}, {
		name:   "pi: the long result in a turn that repair rewrites: a second result dropped",
		format: FormatPi,
		in: jsonl(piHead, piU1, piA2, piCall, piBig,
			strings.NewReplacer(`"id":"d4e5f6a7","parentId":"c3d4e5f6"`, `"id":"d4e5f6a8","parentId":"d4e5f6a7"`, bigText, "again").Replace(piBig),
			strings.Replace(piEnd, `"parentId":"d4e5f6a7"`, `"parentId":"d4e5f6a8"`, 1)),
		changes: []string{"drop_duplicate@6"},
		want:    jsonl(piHead, piU1, piA2, piCall, piBig, piEnd),
	}, {
		name:      "claude: a long first line with a byte-order mark",
		format:    FormatClaude,
		in:        "\xef\xbb\xbf" + jsonl(ccBigU1, ccA2),
		changes:   []string{"drop_bom"},
		want:      jsonl(ccBigU1, ccA2),
		linesOnly: jsonl(ccBigU1, ccA2),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			require.True(t, sameRepair(t, []byte(tc.in), tc.format), "streamed")
			d, err := Parse([]byte(tc.in), tc.format)
			require.NoError(t, err)
			d.Repair()
			memory, err := d.Bytes()
			require.NoError(t, err)
			if tc.want != "" {
				require.Equal(t, tc.want, string(memory))
			}
			for _, lines := range []bool{false, true} {
				path := filepath.Join(t.TempDir(), "s.jsonl")
				require.NoError(t, os.WriteFile(path, []byte(tc.in), 0o600))
				rep, err := RepairFile(path, FileOptions{Format: tc.format, NoBackup: true, LinesOnly: lines})
				require.NoError(t, err, "lines-only=%v", lines)
				out, err := os.ReadFile(path)
				require.NoError(t, err)
				want, clean := string(memory), len(tc.changes) == 0
				if lines {
					want, clean = tc.linesOnly, tc.linesOnly == ""
					require.Equal(t, tc.dangling, rep.DanglingChildren)
				} else {
					var got []string
					for _, c := range rep.Changes {
						got = append(got, c.Kind+lineAt(c.Line))
					}
					require.Equal(t, tc.changes, got)
				}
				if clean {
					require.Equal(t, StatusClean, rep.Status, "lines-only=%v: %v", lines, rep.Changes)
					require.Equal(t, tc.in, string(out), "lines-only=%v: not touched", lines)
					continue
				}
				require.Equal(t, StatusRepaired, rep.Status, "lines-only=%v", lines)
				require.Equal(t, want, string(out), "lines-only=%v", lines)
			}
		})
	}
}

func lineAt(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("@%d", n)
}

// TestLongLineTooBigRefused: a line too long to hold whose outline (its
// keys, ids and content blocks) is too long to keep as well cannot be
// checked: the repair is refused, naming the line and the bounds, and the
// file keeps every byte. (Not parallel: it sets both bounds.)
func TestLongLineTooBigRefused(t *testing.T) {
	defer func(n, o int) { maxLineSize, maxOutlineSize = n, o }(maxLineSize, maxOutlineSize)
	maxLineSize, maxOutlineSize = 4<<10, 256
	in := jsonl(ccU1, ccA2, ccCall, ccBig, ccEnd)
	for _, lines := range []bool{false, true} {
		path := filepath.Join(t.TempDir(), "s.jsonl")
		require.NoError(t, os.WriteFile(path, []byte(in), 0o600))
		rep, err := RepairFile(path, FileOptions{Format: FormatClaude, LinesOnly: lines})
		require.ErrorIs(t, err, ErrRefused, "lines-only=%v", lines)
		require.Equal(t, StatusRefused, rep.Status)
		require.Contains(t, rep.Reason, fmt.Sprintf("line 4 is %d bytes, longer than the 4096 bytes a repair holds in memory", len(ccBig)+1))
		require.Contains(t, rep.Reason, "nothing was changed")
		out, err := os.ReadFile(path)
		require.NoError(t, err)
		require.Equal(t, in, string(out))
		entries, err := os.ReadDir(filepath.Dir(path))
		require.NoError(t, err)
		require.Len(t, entries, 1, "no backup, no temporary file")
	}
}
