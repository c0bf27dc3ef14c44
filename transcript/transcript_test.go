package transcript

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// golden compares got with testdata/golden/name, rewriting it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		require.NoError(t, os.WriteFile(path, got, 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./transcript -update to create it")
	require.Equal(t, string(want), string(got), "golden %s (run with -update to accept)", name)
}

func indent(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	require.NoError(t, err)
	return append(b, '\n')
}

// TestGolden parses every fixture (detecting its format), writes it back
// unrepaired (byte-identical when nothing was dropped), repairs it and
// compares messages, report and output with the golden files; the output
// must parse cleanly and repair to itself.
func TestGolden(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/*.*")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, path := range files {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			d, err := Parse(data, "")
			if err != nil {
				golden(t, name+".error", []byte(err.Error()+"\n"))
				return
			}
			want := Format(strings.SplitN(name, "_", 2)[0])
			require.Equal(t, want, d.Format)
			same, err := d.Bytes()
			require.NoError(t, err)
			if len(d.Dropped) == 0 {
				require.Equal(t, string(data), string(same), "round trip of an unrepaired document")
			}
			golden(t, name+".messages.json", indent(t, d.Messages()))
			rep := d.Repair()
			out, err := d.Bytes()
			require.NoError(t, err)
			golden(t, name+".report.json", indent(t, map[string]any{"format": d.Format, "dropped": d.Dropped, "relinked": d.Relinked, "changes": rep.Changes}))
			golden(t, name+".repaired", out)
			if strings.Contains(name, "_clean") {
				require.Empty(t, d.Dropped)
				require.Empty(t, d.Relinked)
				require.Empty(t, rep.Changes)
				require.Equal(t, string(data), string(out))
			}
			// The output is valid for its format and repairs to itself.
			d2, err := Parse(out, d.Format)
			require.NoError(t, err)
			require.Empty(t, d2.Dropped)
			require.Empty(t, d2.Relinked)
			if d.Format != FormatBelay {
				require.Empty(t, d2.Repair().Changes, "repair is idempotent")
				out2, err := d2.Bytes()
				require.NoError(t, err)
				require.Equal(t, string(out), string(out2))
				checkPaired(t, d2.Messages())
			}
		})
	}
}

// checkPaired is the property repair guarantees: every tool call of a turn
// that did not error has exactly one result, after it, and every result
// answers a call before it.
func checkPaired(t *testing.T, msgs []Message) {
	t.Helper()
	type key struct {
		frame int
		id    string
	}
	open := map[key]int{} // unanswered calls
	frame := -1
	errored := map[key]bool{}
	answered := map[key]int{}
	calls := map[key]int{}
	var lastResp string
	for i, m := range msgs {
		switch m.Role {
		case RoleAssistant:
			if !(m.Meta.ResponseID != "" && m.Meta.ResponseID == lastResp) {
				for k, n := range open {
					require.True(t, n == 0 || errored[k], "message %d: call %s of frame %d has no result", i, k.id, k.frame)
				}
				frame++
				open = map[key]int{}
			}
			lastResp = m.Meta.ResponseID
			for _, b := range m.ToolCalls() {
				k := key{frame, b.ID}
				open[k]++
				calls[k]++
				if m.Errored() {
					errored[k] = true
				}
			}
		case RoleTool:
			b, ok := m.Result()
			require.True(t, ok)
			k := key{frame, b.CallID}
			require.Positive(t, open[k], "message %d: result for %s answers no open call", i, b.CallID)
			open[k]--
			answered[k]++
			require.LessOrEqual(t, answered[k], calls[k])
		case RoleUser, RoleSystem:
			lastResp = ""
			for k, n := range open {
				require.True(t, n == 0 || errored[k], "message %d: call %s has no result before a %s message", i, k.id, m.Role)
			}
		}
	}
	for k, n := range open {
		require.True(t, n == 0 || errored[k], "call %s has no result", k.id)
	}
}

func TestDetectUnknown(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"", "hello world\n", `{"foo":1}` + "\n" + `{"bar":2}` + "\n", "\x00\x01"} {
		_, err := Detect([]byte(in))
		require.ErrorIs(t, err, ErrUnknownFormat, "%q", in)
		require.Contains(t, err.Error(), "belay, pi, claude, openai, anthropic")
	}
	_, err := ParseFormat("nope")
	require.ErrorIs(t, err, ErrUnknownFormat)
	f, err := ParseFormat("Claude-Code")
	require.NoError(t, err)
	require.Equal(t, FormatClaude, f)
}

func TestCRLFKept(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("testdata/openai_broken.jsonl")
	require.NoError(t, err)
	d, err := Parse(data, "")
	require.NoError(t, err)
	d.Repair()
	out, err := d.Bytes()
	require.NoError(t, err)
	require.Equal(t, bytes.Count(out, []byte("\n")), bytes.Count(out, []byte("\r\n")), "every line keeps its CRLF")
}
