package transcript

import (
	"bytes"
	"errors"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// sameRepair repairs data by streaming and in memory and requires the
// same changes and bytes; it returns false when the streaming repair left
// the file to the in-memory one.
func sameRepair(t *testing.T, data []byte, f Format) bool {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s.jsonl")
	require.NoError(t, os.WriteFile(path, data, 0o600))
	in, err := os.Open(path)
	require.NoError(t, err)
	defer in.Close()
	s, sChanges, sErr := analyzeStream(in, int64(len(data)), f)
	if errors.Is(sErr, errNoStream) {
		return false
	}
	if sErr == nil {
		defer s.lt.close()
	}
	d, mErr := Parse(data, f)
	require.Equal(t, mErr != nil, sErr != nil, "stream: %v\nmemory: %v\n%s", sErr, mErr, data)
	if mErr != nil {
		return true
	}
	var mChanges []Change
	mChanges = append(mChanges, d.Dropped...)
	mChanges = append(mChanges, d.Relinked...)
	mChanges = append(mChanges, d.Repair().Changes...)
	if len(mChanges) == 0 {
		require.Empty(t, sChanges)
		require.Empty(t, s.regions, "clean: nothing to repair")
		return true
	}
	dry, err := s.regionChanges()
	require.NoError(t, err)
	mOut, err := d.Bytes()
	require.NoError(t, err)
	s2, _, err := analyzeStream(in, int64(len(data)), f)
	require.NoError(t, err)
	defer s2.lt.close()
	var sOut bytes.Buffer
	written, err := s2.write(&sOut)
	require.NoError(t, err)
	require.Equal(t, changeList(mChanges), changeList(append(sChanges, written...)), "changes:\n%s", data)
	require.Equal(t, changeList(written), changeList(dry), "a dry run reports what a repair does")
	require.Equal(t, string(mOut), sOut.String(), "output:\n%s", data)
	return true
}

func changeList(cs []Change) string {
	var b strings.Builder
	for _, c := range cs {
		msg := -1
		if c.Message != nil {
			msg = *c.Message
		}
		fmt.Fprintf(&b, "%s line=%d msg=%d call=%s tool=%s: %s\n", c.Kind, c.Line, msg, c.CallID, c.Tool, c.Reason)
	}
	return b.String()
}

// TestStreamMatchesMemory: streaming repair gives the report and bytes the
// in-memory repair gives, on every tree fixture.
func TestStreamMatchesMemory(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/*.jsonl")
	require.NoError(t, err)
	n := 0
	for _, path := range files {
		name := filepath.Base(path)
		if !strings.HasPrefix(name, "pi_") && !strings.HasPrefix(name, "claude_") {
			continue
		}
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		f := Format(strings.SplitN(name, "_", 2)[0])
		if sameRepair(t, data, f) {
			n++
		} else {
			require.Contains(t, []string{"pi_v1.jsonl"}, name, "left to the in-memory repair")
		}
	}
	require.GreaterOrEqual(t, n, 7)
}

// randomTree writes a random pi or Claude Code session with damage: torn
// lines, lines repeated right after or far back (byte for byte, or the id
// with other bytes), torn lines with the next written onto them, missing
// and duplicated results, orphans, results out
// of place, calls without input, errored turns, blank user turns, broken
// parent links, branches, parallel calls whose results hang on their own
// call's line.
func randomTree(r *rand.Rand, f Format) []byte {
	var b bytes.Buffer
	id := 0
	newID := func() string {
		id++
		if f == FormatPi {
			return fmt.Sprintf("%08x", id)
		}
		return fmt.Sprintf("00000000-0000-4000-8000-%012d", id)
	}
	type ent struct{ id, line string }
	var all []ent
	leaf := ""
	pv := func(p string) string {
		if p == "" {
			return "null"
		}
		return `"` + p + `"`
	}
	emit := func(parent string, body func(id, parent string) string) string {
		me := newID()
		line := body(me, parent)
		all = append(all, ent{me, line})
		switch k := r.IntN(40); {
		case k == 0:
			b.WriteString(line[:r.IntN(len(line))] + "\n") // torn
		case k == 1:
			b.WriteString(line + "\n" + line + "\n") // written twice
		case k == 2:
			// never written: children break
		case k == 3:
			// torn, and the next line written onto it
			b.WriteString(line[:r.IntN(len(line)+1)])
		case k == 4 || k == 5:
			// and an earlier entry written again, often far back: byte
			// for byte, or with the same id and other bytes
			again := all[r.IntN(len(all))].line
			if k == 5 {
				again = `{"again":true,` + again[1:]
			}
			b.WriteString(line + "\n" + again + "\n")
		default:
			b.WriteString(line + "\n")
		}
		return me
	}
	if f == FormatPi {
		b.WriteString(`{"type":"session","version":3,"id":"s","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/"}` + "\n")
	}
	callID := func() string { return "c" + fmt.Sprint(r.IntN(4)) }
	user := func(text string) func(string, string) string {
		return func(me, p string) string {
			if f == FormatPi {
				return `{"type":"message","id":"` + me + `","parentId":` + pv(p) + `,"message":{"role":"user","content":"` + text + `"}}`
			}
			return `{"parentUuid":` + pv(p) + `,"isSidechain":false,"sessionId":"s","type":"user","message":{"role":"user","content":"` + text + `"},"uuid":"` + me + `"}`
		}
	}
	call := func(ids []string, stop, resp string) func(string, string) string {
		return func(me, p string) string {
			var blocks []string
			if r.IntN(3) == 0 {
				blocks = append(blocks, `{"type":"text","text":"ok"}`)
			}
			for _, c := range ids {
				in := `,"input":{}`
				if f == FormatPi {
					in = `,"arguments":{"x":1}`
				}
				if r.IntN(12) == 0 {
					in = ""
				}
				typ := "toolCall"
				if f == FormatClaude {
					typ = "tool_use"
				}
				blocks = append(blocks, `{"type":"`+typ+`","id":"`+c+`","name":"t"`+in+`}`)
			}
			if len(blocks) == 0 {
				blocks = append(blocks, `{"type":"text","text":"reply"}`)
			}
			content := "[" + strings.Join(blocks, ",") + "]"
			if f == FormatPi {
				return `{"type":"message","id":"` + me + `","parentId":` + pv(p) + `,"message":{"role":"assistant","content":` + content + `,"stopReason":"` + stop + `"}}`
			}
			sr := "null"
			if stop != "" {
				sr = `"` + stop + `"`
			}
			return `{"parentUuid":` + pv(p) + `,"isSidechain":false,"sessionId":"s","type":"assistant","message":{"id":"` + resp + `","role":"assistant","content":` + content + `,"stop_reason":` + sr + `},"uuid":"` + me + `"}`
		}
	}
	result := func(c string) func(string, string) string {
		return func(me, p string) string {
			if f == FormatPi {
				return `{"type":"message","id":"` + me + `","parentId":` + pv(p) + `,"message":{"role":"toolResult","toolCallId":"` + c + `","toolName":"t","content":[{"type":"text","text":"r"}],"isError":false}}`
			}
			return `{"parentUuid":` + pv(p) + `,"isSidechain":false,"sessionId":"s","type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"` + c + `","content":"r"}]},"uuid":"` + me + `"}`
		}
	}
	other := func(me, p string) string {
		if f == FormatPi {
			return `{"type":"label","id":"` + me + `","parentId":` + pv(p) + `,"targetId":"x","label":"l"}`
		}
		return `{"parentUuid":` + pv(p) + `,"isSidechain":false,"sessionId":"s","type":"system","subtype":"turn_duration","uuid":"` + me + `"}`
	}
	for i, n := 0, 3+r.IntN(25); i < n; i++ {
		switch r.IntN(9) {
		case 0, 1:
			text := "hi"
			if r.IntN(5) == 0 {
				text = "  "
			}
			leaf = emit(leaf, user(text))
		case 2, 3, 4:
			var ids []string
			for k := r.IntN(4); k > 0; k-- {
				ids = append(ids, callID())
			}
			stop := ""
			if r.IntN(8) == 0 {
				stop = "error"
			}
			resp := fmt.Sprintf("msg_%d", r.IntN(3))
			if f == FormatClaude && len(ids) > 1 && r.IntN(2) == 0 {
				// Parallel calls, one line each, results on their own call's line.
				var parts []string
				for _, c := range ids {
					leaf = emit(leaf, call([]string{c}, stop, resp))
					parts = append(parts, leaf)
				}
				for k, c := range ids {
					if r.IntN(6) == 0 {
						continue
					}
					me := emit(parts[k], result(c))
					if k == len(ids)-1 {
						leaf = me
					}
				}
				continue
			}
			leaf = emit(leaf, call(ids, stop, resp))
		case 5, 6:
			leaf = emit(leaf, result(callID()))
		case 7:
			leaf = emit(leaf, other)
		default:
			// Branch: continue from an earlier entry.
			if len(all) > 0 {
				leaf = all[r.IntN(len(all))].id
			}
		}
	}
	return b.Bytes()
}

// TestStreamMatchesMemoryRandom holds streaming repair to the in-memory
// repair on random damaged sessions, and checks what repair guarantees.
func TestStreamMatchesMemoryRandom(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	streamed := 0
	for i := 0; i < 600; i++ {
		f := []Format{FormatPi, FormatClaude}[i%2]
		data := randomTree(r, f)
		if sameRepair(t, data, f) {
			streamed++
		}
	}
	require.Greater(t, streamed, 480)
}

// FuzzStream holds streaming repair to the in-memory one on any input.
func FuzzStream(f *testing.F) {
	seedFixtures(f)
	r := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 20; i++ {
		f.Add(randomTree(r, []Format{FormatPi, FormatClaude}[i%2]))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, format := range []Format{FormatPi, FormatClaude} {
			sameRepair(t, data, format)
			farWindow(func() { sameRepair(t, data, format) })
			longLines(func() { sameRepair(t, data, format) })
		}
	})
}

// longLines runs fn with every line longer than 64 bytes too long to hold:
// read in pieces, checked on its outline. It sets a package var: not for
// parallel tests.
func longLines(fn func()) {
	defer func(n int) { maxLineSize = n }(maxLineSize)
	maxLineSize = 64
	fn()
}

// farWindow runs fn with the streaming repair seeing every file as larger
// than its window: a window of 4 ids, and a filter of 512 bits whose false
// positives make nearly every line a repeat candidate, settled two at a
// time. It sets package vars: not for parallel tests.
func farWindow(fn func()) {
	defer func(n, bits, cands int) { windowSize, bloomBits, maxRepeatCands = n, bits, cands }(windowSize, bloomBits, maxRepeatCands)
	windowSize, bloomBits, maxRepeatCands = 4, 512, 2
	fn()
}

// TestStreamSmallWindow runs the differential test with a window of 4
// ids, so that parents are found through the filter of all ids and the
// extra pass, and lines written twice far apart through the filter and
// that pass, as in files larger than the window, and a line table of two
// blocks of 4 lines in memory, so that it spills to its file as in files
// of many lines; then with a filter of 512 bits, whose false positives
// make nearly every line a repeat candidate, settled two at a time; then
// with nearly every line longer than the longest line held, so that they
// are checked on their outlines and copied, not held. (Not parallel: it
// sets the window, the table, the filter, the candidates' bound and the
// longest line held.)
func TestStreamSmallWindow(t *testing.T) {
	defer func(n, shift, resident, bits, cands, line int) {
		windowSize, tableShift, tableResident, bloomBits, maxRepeatCands, maxLineSize = n, shift, resident, bits, cands, line
	}(windowSize, tableShift, tableResident, bloomBits, maxRepeatCands, maxLineSize)
	windowSize = 4
	tableShift, tableResident = 2, 2 // 4 lines a block, 2 in memory: the line table spills
	files, err := filepath.Glob("testdata/*.jsonl")
	require.NoError(t, err)
	for _, tc := range []struct {
		name         string
		bits, cands  int
		line         int
		seed1, seed2 uint64
	}{
		{"filter of 2 MiB", 1 << 24, 1 << 17, MaxLineSize, 9, 10},
		{"filter of 512 bits, candidates settled two at a time", 512, 2, MaxLineSize, 11, 12},
		{"lines longer than 150 bytes read in pieces, not held", 1 << 24, 1 << 17, 150, 13, 14},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bloomBits, maxRepeatCands, maxLineSize = tc.bits, tc.cands, tc.line
			r := rand.New(rand.NewPCG(tc.seed1, tc.seed2))
			for i := 0; i < 200; i++ {
				f := []Format{FormatPi, FormatClaude}[i%2]
				sameRepair(t, randomTree(r, f), f)
			}
			for _, path := range files {
				name := filepath.Base(path)
				if strings.HasPrefix(name, "pi_") || strings.HasPrefix(name, "claude_") {
					data, err := os.ReadFile(path)
					require.NoError(t, err)
					sameRepair(t, data, Format(strings.SplitN(name, "_", 2)[0]))
				}
			}
		})
	}
}

// wantParts is what the check pass's lightParts must say of a line: the
// same as its light Messages.
func wantParts(seed maphash.Seed, msgs []*Message) []lightPart {
	var out []lightPart
	for _, m := range msgs {
		p := lightPart{role: m.Role, errored: m.Errored(), blank: m.Role == RoleUser && blank(m)}
		if b, ok := resultOf(m); ok {
			p.result, p.resultID = true, maphash.String(seed, b.CallID)
		}
		if m.Role == RoleAssistant && m.Meta.ResponseID != "" {
			p.resp, p.hasResp = maphash.String(seed, m.Meta.ResponseID), true
		}
		calls := m.ToolCalls()
		p.malformed = m.Role == RoleAssistant && !m.Errored() && len(m.Blocks) > 0 && len(calls) == len(m.Blocks)
		for _, b := range calls {
			c := lightCall{id: maphash.String(seed, b.ID), bad: inputMissing(b.Input) || strings.TrimSpace(b.ID) == ""}
			p.malformed = p.malformed && c.bad
			if p.ncalls < len(p.calls) {
				p.calls[p.ncalls] = c
			} else {
				p.over = true
			}
			p.ncalls++
		}
		out = append(out, p)
	}
	return out
}

func checkLightParts(t *testing.T, data []byte) {
	seed := maphash.MakeSeed()
	var ll lightLine
	for _, line := range bytes.Split(data, []byte("\n")) {
		line = bytes.TrimSuffix(line, []byte("\r"))
		if !validJSON(line) || line[skipSpace(line, 0)] != '{' {
			continue
		}
		for _, f := range []Format{FormatPi, FormatClaude} {
			ll.read(f, line)
			got := ll.parts(f, seed, nil)
			require.Equal(t, wantParts(seed, lightMessages(f, line)), got, "%s: %s", f, line)
			// The scan reads an entry from where its check found the keys:
			// the same reading.
			var k keyCheck
			why := ""
			if f == FormatPi {
				k = keyCheck{top: piLineKeys, sub: piMsgKeys, subOf: "message"}
				why = piCheckKeys(line, &k)
			} else {
				k = keyCheck{top: ccLineKeys, sub: ccMsgKeys, subOf: "message"}
				why = claudeCheckKeys(line, &k)
			}
			if why == "" {
				var checked lightLine
				checked.readChecked(f, line, &k)
				require.Equal(t, got, checked.parts(f, seed, nil), "%s (read as checked): %s", f, line)
			}
		}
	}
}

// TestLightParts holds the check pass's reading of a line (lightParts,
// which allocates nothing) to its light Messages, on every fixture line.
func TestLightParts(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/*.jsonl")
	require.NoError(t, err)
	for _, path := range files {
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		checkLightParts(t, data)
	}
	checkLightParts(t, []byte(`{"type":"assistant","isApiErrorMessage":true,"message":{"id":"r\u0031","content":[{"type":"tool_use","id":" ","input":{}},{"type":"tool_use","id":"a","input":null},{"type":"t\u0065xt","text":"x"},{"type":"tool_use","id":"b","input":{}},{"type":"tool_use","id":"c","input":{}},{"type":"tool_use","id":"d","input":{}}]}}
{"type":"user","message":{"content":[{"type":"text","text":" \n"},{"type":"tool_result","tool_use_id":"a"},"x",{"type":"text","text":"\u00a0"},{"type":"tool_result","tool_use_id":"b\u0062"}]}}
{"type":"message","message":{"role":"assistant","stopReason":"Aborted","content":[{"type":"toolCall","id":"a","arguments":{}},{"type":"tool_use","id":"b"}]}}
{"type":"message","message":{"role":"user","content":"  "}}
{"type":"message","message":{"role":"toolResult","toolCallId":"x"}}
{"type":"assistant","isApiErrorMessage":false,"isApiErrorMessage":true,"message":{"id":"r","content":[{"type":"text","text":"x"}]}}
{"type":"system","type":"assistant","message":{"id":"r","content":[]}}
{"type":"summary","Message":{"role":"user","content":"a"},"message":{"role":"assistant","content":"b"}}
{"type":"message","message":{"role":"assistant","stopReason":"stop","content":"a","content":[{"type":"toolCall","id":"a","arguments":{}}]}}
{"type":"message","message":"not an object","id":"x"}`))
}

// FuzzLightParts holds lightParts to light Messages on any line.
func FuzzLightParts(f *testing.F) {
	seedFixtures(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		checkLightParts(t, data)
	})
}

// TestStreamReadsPathOnce: on every tree fixture the scan reads the path
// (the check pass is not needed), and where the path is not the chain in
// file order (the leaf on a branch that left it) the check pass reads it
// again; both give what the in-memory repair gives.
func TestStreamReadsPathOnce(t *testing.T) {
	t.Parallel()
	analyze := func(data []byte, f Format) *streamRepair {
		path := filepath.Join(t.TempDir(), "s.jsonl")
		require.NoError(t, os.WriteFile(path, data, 0o600))
		in, err := os.Open(path)
		require.NoError(t, err)
		defer in.Close()
		s, _, err := analyzeStream(in, int64(len(data)), f)
		require.NoError(t, err)
		s.lt.close()
		return s
	}
	files, err := filepath.Glob("testdata/*.jsonl")
	require.NoError(t, err)
	for _, path := range files {
		name := filepath.Base(path)
		if !strings.HasPrefix(name, "pi_") && !strings.HasPrefix(name, "claude_") || name == "pi_v1.jsonl" || name == "pi_badheader.jsonl" {
			continue
		}
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		require.False(t, analyze(data, Format(strings.SplitN(name, "_", 2)[0])).reread, name)
	}
	branch := `{"type":"session","version":3,"id":"s","timestamp":"2026-03-01T10:00:00.000Z","cwd":"/x"}
{"type":"message","id":"a","parentId":null,"timestamp":"2026-03-01T10:00:01.000Z","message":{"role":"user","content":"hi","timestamp":1}}
{"type":"message","id":"b","parentId":"a","timestamp":"2026-03-01T10:00:01.000Z","message":{"role":"assistant","content":[{"type":"toolCall","id":"c1","name":"read","arguments":{}}],"stopReason":"toolUse","timestamp":2}}
{"type":"message","id":"c","parentId":"a","timestamp":"2026-03-01T10:00:01.000Z","message":{"role":"assistant","content":[{"type":"toolCall","id":"c2","name":"read","arguments":{}}],"stopReason":"toolUse","timestamp":2}}
{"type":"message","id":"d","parentId":"c","timestamp":"2026-03-01T10:00:01.000Z","message":{"role":"toolResult","toolCallId":"c1","toolName":"read","content":[],"isError":false,"timestamp":3}}
`
	require.True(t, analyze([]byte(branch), FormatPi).reread)
	require.True(t, sameRepair(t, []byte(branch), FormatPi))
}
