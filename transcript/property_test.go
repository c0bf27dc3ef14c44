package transcript

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// cleanTree writes a random valid session: user turns, assistant replies
// with tool calls answered in order (Claude Code: parallel calls one per
// line, each result on its own call's line), final replies. It returns the
// lines and, per line, the id of the assistant entry it holds ("" if none).
func cleanTree(r *rand.Rand, f Format) (lines []string, asst []string) {
	n := 0
	id := func() string {
		n++
		if f == FormatPi {
			return fmt.Sprintf("%08x", n)
		}
		return fmt.Sprintf("11111111-0000-4000-8000-%012d", n)
	}
	pv := func(p string) string {
		if p == "" {
			return "null"
		}
		return `"` + p + `"`
	}
	add := func(line, a string) {
		lines = append(lines, line)
		asst = append(asst, a)
	}
	if f == FormatPi {
		add(`{"type":"session","version":3,"id":"s","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/"}`, "")
	}
	leaf := ""
	call := 0
	for turn, turns := 0, 1+r.IntN(5); turn < turns; turn++ {
		me := id()
		if f == FormatPi {
			add(`{"type":"message","id":"`+me+`","parentId":`+pv(leaf)+`,"timestamp":"2026-01-01T00:00:00.000Z","message":{"role":"user","content":"do `+me+`"}}`, "")
		} else {
			add(`{"parentUuid":`+pv(leaf)+`,"isSidechain":false,"sessionId":"s","type":"user","message":{"role":"user","content":"do `+me+`"},"uuid":"`+me+`"}`, "")
		}
		leaf = me
		for loop := r.IntN(3); loop >= 0; loop-- {
			k := r.IntN(3)
			var calls []string
			for range k {
				call++
				calls = append(calls, fmt.Sprintf("call_%d", call))
			}
			resp := "msg_" + id()
			if f == FormatPi {
				me := id()
				var blocks []string
				for _, c := range calls {
					blocks = append(blocks, `{"type":"toolCall","id":"`+c+`","name":"t","arguments":{"a":1}}`)
				}
				blocks = append(blocks, `{"type":"text","text":"`+me+`"}`)
				add(`{"type":"message","id":"`+me+`","parentId":`+pv(leaf)+`,"timestamp":"2026-01-01T00:00:00.000Z","message":{"role":"assistant","content":[`+strings.Join(blocks, ",")+`],"stopReason":"toolUse"}}`, me)
				leaf = me
				for _, c := range calls {
					me := id()
					add(`{"type":"message","id":"`+me+`","parentId":`+pv(leaf)+`,"timestamp":"2026-01-01T00:00:00.000Z","message":{"role":"toolResult","toolCallId":"`+c+`","toolName":"t","content":[{"type":"text","text":"r"}],"isError":false}}`, "")
					leaf = me
				}
				continue
			}
			asstLine := func(parent, block string) string {
				me := id()
				add(`{"parentUuid":`+pv(parent)+`,"isSidechain":false,"sessionId":"s","type":"assistant","message":{"id":"`+resp+`","role":"assistant","content":[`+block+`],"stop_reason":null},"uuid":"`+me+`"}`, me)
				return me
			}
			result := func(parent, c string) string {
				me := id()
				add(`{"parentUuid":`+pv(parent)+`,"isSidechain":false,"sessionId":"s","type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"`+c+`","content":"r"}]},"uuid":"`+me+`"}`, "")
				return me
			}
			leaf = asstLine(leaf, `{"type":"text","text":"thinking about it"}`)
			var parts []string
			for _, c := range calls {
				leaf = asstLine(leaf, `{"type":"tool_use","id":"`+c+`","name":"t","input":{"a":1}}`)
				parts = append(parts, leaf)
			}
			for i, c := range calls {
				me := result(parts[i], c)
				if i == len(calls)-1 {
					leaf = me
				}
			}
		}
		me = id()
		if f == FormatPi {
			add(`{"type":"message","id":"`+me+`","parentId":`+pv(leaf)+`,"timestamp":"2026-01-01T00:00:00.000Z","message":{"role":"assistant","content":[{"type":"text","text":"done"}],"stopReason":"stop"}}`, me)
		} else {
			add(`{"parentUuid":`+pv(leaf)+`,"isSidechain":false,"sessionId":"s","type":"assistant","message":{"id":"msg_`+me+`","role":"assistant","content":[{"type":"text","text":"done"}],"stop_reason":"end_turn"},"uuid":"`+me+`"}`, me)
		}
		leaf = me
	}
	return lines, asst
}

// TestSingleDamageProperty: a random valid session checks clean and is
// left untouched; any single deletion (but of the last line),
// duplication or truncation of a line (with the next line written onto
// it or not) is detected, and repair keeps every
// assistant reply that survived it and gives a file that checks clean.
func TestSingleDamageProperty(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 8))
	dir := t.TempDir()
	for i := 0; i < 400; i++ {
		f := []Format{FormatPi, FormatClaude}[i%2]
		lines, asst := cleanTree(r, f)
		join := func(ls []string) []byte { return []byte(strings.Join(ls, "\n") + "\n") }
		path := filepath.Join(dir, "s.jsonl")
		require.NoError(t, os.WriteFile(path, join(lines), 0o600))
		rep, err := RepairFile(path, FileOptions{Format: f, DryRun: true})
		require.NoError(t, err)
		require.Equal(t, StatusClean, rep.Status, "%s", join(lines))

		first := 0
		if f == FormatPi {
			first = 1
		}
		at := first + r.IntN(len(lines)-first)
		mutated := append([]string(nil), lines...)
		survivors := map[string]bool{}
		for k, a := range asst {
			if a != "" && k != at {
				survivors[a] = true
			}
		}
		kind := r.IntN(4)
		switch kind {
		case 0: // deletion
			if at == len(lines)-1 {
				at--
			}
			if at < first {
				continue
			}
			survivors = map[string]bool{}
			for k, a := range asst {
				if a != "" && k != at {
					survivors[a] = true
				}
			}
			mutated = append(mutated[:at], mutated[at+1:]...)
		case 1: // duplication
			mutated = append(mutated[:at+1], mutated[at:]...)
			if a := asst[at]; a != "" {
				survivors[a] = true
			}
		case 2: // truncation
			l := mutated[at]
			mutated[at] = l[:1+r.IntN(len(l)-2)]
		default: // truncation, and the next line written onto it
			if at == len(lines)-1 {
				at--
			}
			if at < first {
				continue
			}
			l := mutated[at]
			mutated[at] = l[:1+r.IntN(len(l)-2)] + mutated[at+1]
			mutated = append(mutated[:at+1], mutated[at+2:]...)
			survivors = map[string]bool{}
			for k, a := range asst {
				if a != "" && k != at {
					survivors[a] = true
				}
			}
		}
		require.NoError(t, os.WriteFile(path, join(mutated), 0o600))
		rep, err = RepairFile(path, FileOptions{Format: f, DryRun: true})
		require.NoError(t, err, "kind %d at %d:\n%s", kind, at, join(mutated))
		require.Equal(t, StatusWould, rep.Status, "kind %d at line %d not detected:\n%s", kind, at+1, join(mutated))
		out := streamRepaired(t, path, f)
		d, err := Parse(out, f)
		require.NoError(t, err)
		kept := map[string]bool{}
		for _, m := range d.Messages() {
			if m.Role == RoleAssistant {
				kept[m.Meta.ID] = true
			}
		}
		for a := range survivors {
			require.True(t, kept[a], "assistant entry %s lost (kind %d at line %d):\n%s\nrepaired:\n%s\nreport: %v", a, kind, at+1, string(join(mutated)), string(out), rep.Changes)
		}
		require.NoError(t, os.WriteFile(path, out, 0o600))
		again, err := RepairFile(path, FileOptions{Format: f, DryRun: true})
		require.NoError(t, err)
		require.Equal(t, StatusClean, again.Status, "repaired output re-checks clean: %v\n%s", again.Changes, out)
	}
}

// streamRepaired returns what the streaming repair writes for the file
// (RepairFile without the backup and the atomic replace).
func streamRepaired(t *testing.T, path string, f Format) []byte {
	t.Helper()
	in, err := os.Open(path)
	require.NoError(t, err)
	defer in.Close()
	fi, err := in.Stat()
	require.NoError(t, err)
	s, _, err := analyzeStream(in, fi.Size(), f)
	require.NoError(t, err)
	defer s.lt.close()
	var out bytes.Buffer
	_, err = s.write(&out)
	require.NoError(t, err)
	return out.Bytes()
}
