package transcript

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// seedFixtures adds every fixture as a seed.
func seedFixtures(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.*")
	for _, p := range files {
		if data, err := os.ReadFile(p); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte(`{"type":"session","version":3,"id":"s"}` + "\n" + `{"type":"message","id":"a","parentId":"a","message":{"role":"assistant","content":[{"type":"toolCall","id":"x","name":"n","arguments":{}}]}}`))
	f.Add([]byte(`[{"role":"tool","tool_call_id":"x","content":"r"},{"role":"assistant","tool_calls":[{"id":"x","function":{"name":"f","arguments":"{"}}]}]`))
	// Entries glued onto a torn line, or onto each other.
	f.Add([]byte(jsonl(piHead, piU1, piA2, torn(piU3, `"role":"user","cont`)+piU4, piA5)))
	f.Add([]byte(jsonl(piHead, piU1, torn(piA2, `"stopRe`)+strings.Replace(piU3, `"b2c3d4e5"`, `"a1b2c3d4"`, 1)+piU4, piA5)))
	f.Add([]byte(jsonl(ccU1, ccA2, torn(ccU3, `"and the te`)+ccU4, ccA5)))
	f.Add([]byte(jsonl(ccU1, ccA2+ccU4, ccA5)))
	f.Add([]byte("\xef\xbb\xbf" + jsonl(torn(ccU1, `"fix the pa`)+ccU1, ccA2)))
	f.Add([]byte("\xef\xbb\xbf" + jsonl(piHead, piU1)))
	f.Add([]byte(`{"role":"user","content":"hi"}` + "\r\n" + `{"role":"assistant","content":"hel{"role":"user","content":"b"}{"role":"user","content":"c"}`))
}

// FuzzDocument parses any input in every format: it never panics, the
// written output parses again in the same format with no dropped lines,
// and repairing it again changes nothing; detection never panics.
func FuzzDocument(f *testing.F) {
	seedFixtures(f)
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 300<<10) + `"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"n","input":{}}]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = Detect(data)
		_, _, _ = detect(data)
		for _, format := range Formats {
			if format == FormatBelay && len(data) > 1<<16 {
				continue
			}
			d, err := Parse(data, format)
			if err != nil {
				continue
			}
			rep := d.Repair()
			out, err := d.Bytes()
			require.NoError(t, err)
			if len(d.Dropped) == 0 && len(d.Relinked) == 0 && len(rep.Changes) == 0 {
				require.Equal(t, string(data), string(out), "%s: clean input is untouched", format)
			}
			d2, err := Parse(out, format)
			require.NoError(t, err, "%s output must parse:\n%s", format, out)
			require.Empty(t, d2.Dropped, "%s output must be valid:\n%s", format, out)
			require.Empty(t, d2.Relinked, "%s output must have no broken link:\n%s", format, out)
			if format == FormatBelay {
				continue
			}
			rep2 := d2.Repair()
			require.Empty(t, rep2.Changes, "%s: idempotent (first pass %v):\n%s", format, rep.Changes, out)
			out2, err := d2.Bytes()
			require.NoError(t, err)
			require.Equal(t, string(out), string(out2))
			checkPaired(t, d2.Messages())
		}
	})
}

// FuzzRepairMessages repairs conversations drawn from the fuzz input.
func FuzzRepairMessages(f *testing.F) {
	f.Add(uint64(1), uint64(2))
	f.Add(uint64(7), uint64(99))
	f.Fuzz(func(t *testing.T, a, b uint64) {
		in := randomConversation(rand.New(rand.NewPCG(a, b)))
		out, _ := RepairMessages(in)
		checkPaired(t, out)
		again, rep := RepairMessages(out)
		require.Empty(t, rep.Changes)
		require.Equal(t, out, again)
	})
}

// FuzzValidJSON checks the fast validator against encoding/json.
func FuzzValidJSON(f *testing.F) {
	for _, s := range []string{`{}`, `[1,2.5e-3,"a\u00e9\n",true,null]`, `{"a":{"b":[]}}`, `01`, `"\x01"`, `{"a" 1}`, `-`, `1.`, `[1,]`, ` {"x":"\\"} `} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		require.Equal(t, json.Valid(data), validJSON(data), "%q", data)
	})
}

// TestValidStringRandom holds validJSON to json.Valid on strings made of
// the bytes the word-at-a-time string check tells apart (quotes,
// backslashes, escapes, control characters, bytes over 0x7f, plain ones),
// at every offset of its eight-byte words.
func TestValidStringRandom(t *testing.T) {
	pieces := []string{`"`, `\`, `\\`, `\"`, `\n`, `\u00e9`, `\u12`, `\x`, "\x00", "\x1f", "\x7f", "\x80", "\xe9", "é", " ", "a", "aaaaaaa", "\t"}
	r := rand.New(rand.NewPCG(5, 6))
	for range 200000 {
		var b strings.Builder
		b.WriteString(`["`)
		for n := r.IntN(12); n > 0; n-- {
			b.WriteString(pieces[r.IntN(len(pieces))])
		}
		b.WriteString(`"]`)
		data := []byte(b.String())
		require.Equal(t, json.Valid(data), validJSON(data), "%q", data)
	}
}

// FuzzRepairFile runs RepairFile on any input in every format, default
// and lines-only: a file it calls clean is untouched, and a repaired file
// checks clean when repaired again the same way.
func FuzzRepairFile(f *testing.F) {
	seedFixtures(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1<<16 {
			return
		}
		dir := t.TempDir()
		for _, format := range Formats {
			for _, lines := range []bool{false, true} {
				path := filepath.Join(dir, "t.jsonl")
				require.NoError(t, os.WriteFile(path, data, 0o600))
				opts := FileOptions{Format: format, LinesOnly: lines, NoBackup: true}
				rep, err := RepairFile(path, opts)
				if err != nil {
					require.ErrorIs(t, err, ErrRefused)
					continue
				}
				out, err := os.ReadFile(path)
				require.NoError(t, err)
				if rep.Status != StatusRepaired {
					require.Equal(t, string(data), string(out), "%s %s: not repaired means untouched", format, rep.Status)
					continue
				}
				again, err := RepairFile(path, opts)
				require.NoError(t, err, "%s lines-only=%v: output refused:\n%s", format, lines, out)
				require.Equal(t, StatusClean, again.Status, "%s lines-only=%v: %v\n%s", format, lines, again.Changes, out)
			}
		}
	})
}

// FuzzRepairFileLongLines holds RepairFile, with every line longer than
// 64 bytes too long to hold (checked on its outline, copied, cut only when
// damaged), to RepairFile with the lines held, on any input in the JSONL
// formats but belay's (whose lines are at most its record limit): the
// same report, and the same bytes.
func FuzzRepairFileLongLines(f *testing.F) {
	seedFixtures(f)
	f.Add([]byte(jsonl(piHead, piU1, piA2, piCall, piBig, piEnd)))
	f.Add([]byte(jsonl(ccU1, ccA2, ccCall, torn(ccBig, `"numLines"`)+ccEnd)))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1<<16 {
			return
		}
		dir := t.TempDir()
		for _, format := range []Format{FormatPi, FormatClaude, FormatOpenAI, FormatAnthropic} {
			for _, lines := range []bool{false, true} {
				repair := func() (*FileReport, error, []byte) {
					path := filepath.Join(dir, "t.jsonl")
					require.NoError(t, os.WriteFile(path, data, 0o600))
					rep, err := RepairFile(path, FileOptions{Format: format, LinesOnly: lines, NoBackup: true})
					out, rerr := os.ReadFile(path)
					require.NoError(t, rerr)
					return rep, err, out
				}
				held, heldErr, heldOut := repair()
				var long *FileReport
				var longErr error
				var longOut []byte
				longLines(func() { long, longErr, longOut = repair() })
				require.Equal(t, heldErr == nil, longErr == nil, "%s lines-only=%v: %v / %v", format, lines, heldErr, longErr)
				require.Equal(t, held.Status, long.Status, "%s lines-only=%v", format, lines)
				require.Equal(t, changeList(held.Changes), changeList(long.Changes), "%s lines-only=%v", format, lines)
				require.Equal(t, held.DanglingChildren, long.DanglingChildren, "%s lines-only=%v", format, lines)
				require.Equal(t, held.Note, long.Note, "%s lines-only=%v", format, lines)
				require.Equal(t, string(heldOut), string(longOut), "%s lines-only=%v", format, lines)
			}
		}
	})
}

// FuzzSkipString holds skipString (quotes found many bytes at a time) to
// reading the string a byte at a time, escapes consuming the byte after
// them, on any bytes.
func FuzzSkipString(f *testing.F) {
	for _, s := range []string{`"abc"`, `"a\"b"`, `"a\\"b`, `"\\\\\"x"`, `"abc\`, `"`, `"\u0022"`, `"x\\\"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 || b[0] != '"' {
			b = append([]byte{'"'}, b...)
		}
		want := len(b)
		for i := 1; i < len(b); i++ {
			if b[i] == '\\' {
				i++
				continue
			}
			if b[i] == '"' {
				want = i + 1
				break
			}
		}
		require.Equal(t, want, skipString(b, 0), "%q", b)
	})
}
