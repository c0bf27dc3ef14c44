package transcript

import (
	"bytes"
	"hash/maphash"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// outlineOf reads line as the long-line readers do: written to the
// outliner in pieces cut at random.
func outlineOf(r *rand.Rand, seed maphash.Seed, line []byte, fileStart bool, parKey string) *lineOutline {
	o := newOutliner(seed, fileStart, parKey)
	for rest := line; len(rest) > 0; {
		n := 1 + r.IntN(len(rest))
		if r.IntN(3) == 0 {
			n = min(len(rest), 1+r.IntN(3))
		}
		o.write(rest[:n])
		rest = rest[n:]
	}
	return o.finish()
}

// byteSink is a spanSink over a line held in memory.
type byteSink struct{ src, out []byte }

func (b *byteSink) copy(off, end int64) { b.out = append(b.out, b.src[off:end]...) }
func (b *byteSink) write(p []byte)      { b.out = append(b.out, p...) }

// checkOutline requires every check of the outline of line to say what
// the same check of line says.
func checkOutline(t *testing.T, r *rand.Rand, line []byte) {
	t.Helper()
	seed := maphash.MakeSeed()
	for _, fileStart := range []bool{false, true} {
		body := bytes.TrimSuffix(line, []byte("\r"))
		if fileStart {
			body = bytes.TrimPrefix(body, utf8BOM)
		}
		ol := outlineOf(r, seed, line, fileStart, "parentId")
		require.Equal(t, fileStart && bytes.HasPrefix(line, utf8BOM) && len(line) >= len(utf8BOM), ol.bom, "%q", line)
		require.Equal(t, int64(len(body)), ol.n, "%q", line)
		require.Equal(t, maphash.Bytes(seed, body), ol.sum, "%q", line)
		require.Equal(t, len(bytes.TrimSpace(body)) == 0, ol.blank, "%q", line)
		require.Equal(t, validJSON(body), ol.valid, "%q", line)
		if !ol.valid {
			require.Nil(t, ol.out)
			continue
		}
		out := ol.out
		require.True(t, validJSON(out), "outline %q of %q", out, line)
		for _, f := range []Format{FormatPi, FormatClaude, FormatOpenAI, FormatAnthropic} {
			c, err := codecFor(f)
			require.NoError(t, err)
			require.Equal(t, c.checkLine(body), c.checkLine(out), "%s: outline %q of %q", f, out, line)
			require.Equal(t, gluedEntry(f, c)(body), gluedEntry(f, c)(out), "%s: %q", f, line)
		}
		require.Equal(t, piCodec{}.checkHeader(body) == nil, piCodec{}.checkHeader(out) == nil, "%q", line)
		for _, key := range []string{"type", "id", "uuid", "parentId", "parentUuid", "version", "sessionId"} {
			a, aok := getField(body, key)
			b, bok := getField(out, key)
			require.Equal(t, aok, bok, "%s: %q", key, line)
			if len(a) > 0 && (a[0] == '"' || a[0] == 't' || a[0] == 'f' || a[0] == 'n' || a[0] == '-' || a[0] >= '0' && a[0] <= '9') {
				require.Equal(t, string(a), string(b), "%s: %q", key, line)
			}
		}
		for _, f := range []Format{FormatPi, FormatClaude} {
			// The scan's reading: flags, id, parent and the light parts.
			s := newStreamRepair(nil, 0, f)
			s.seed = seed
			var want, got scanLine
			var kw, kg keyCheck
			s.extract(body, &want, &kw)
			s.extract(out, &got, &kg)
			require.Equal(t, want.why, got.why, "%s: outline %q of %q", f, out, line)
			require.Equal(t, want.fl, got.fl, "%s: %q", f, line)
			require.Equal(t, want.h, got.h, "%s: %q", f, line)
			require.Equal(t, want.ph, got.ph, "%s: %q", f, line)
			require.Equal(t, want.hasPar, got.hasPar, "%s: %q", f, line)
			require.Equal(t, string(body[want.parAt[0]:want.parAt[1]]), string(out[got.parAt[0]:got.parAt[1]]), "%s: %q", f, line)
			if want.why == "" {
				var lw, lg lightLine
				lw.readChecked(f, body, &kw)
				lg.readChecked(f, out, &kg)
				require.Equal(t, lw.parts(f, seed, nil), lg.parts(f, seed, nil), "%s: outline %q of %q", f, out, line)
			}
			require.Equal(t, lightMessages(f, body), lightMessages(f, out), "%s: outline %q of %q", f, out, line)
		}
		// The parent link's span, and a patch of it from the outline.
		if v, ok := getField(body, "parentId"); ok {
			require.Equal(t, string(v), string(body[ol.parAt[0]:ol.parAt[1]]), "%q", line)
		} else {
			require.Equal(t, int64(-1), ol.parAt[0], "%q", line)
		}
		if body[skipSpace(body, 0)] == '{' {
			sink := &byteSink{src: body}
			patchSpans(sink, 0, ol, "parentId", []byte(`"p9"`))
			require.Equal(t, string(setField(body, "parentId", []byte(`"p9"`))), string(sink.out), "%q", line)
		}
	}
}

// outlineSeeds are lines that reach the outliner's corners.
var outlineSeeds = []string{
	``, ` `, "\t \u00a0\u3000 ", "\xef\xbb\xbf", "\xef\xbb", "\xef\r000", "\xef\xbb\xbf{\"type\":\"user\"}", "{}\r", "{} \r",
	`{"type":"message","id":"a","parentId":null,"message":{"role":"user","content":" \n\t\u2028 "}}`,
	`{"type":"message","id":"a","parentId":"b","message":{"role":"user","content":[{"type":"text","text":"\u0020\n"},{"type":"text","text":"\u00a0"},{"type":"text","text":"\ud83d\ude00"}]}}`,
	`{"type":"message","id":"a","parentId":"b","message":{"role":"user","content":[{"type":"text","text":"\ud800"},{"type":"text","text":" \u0085 "},"str",1,null,[1],{"type":"tool_result","tool_use_id":"c\u0031"}]}}`,
	`{"type":"message","id":"a","parentId":"b","message":{"role":"assistant","content":[{"type":"toolCall","id":" ","name":"n","arguments":null},{"type":"toolCall","id":"c2","name":"n","arguments":{"x":[1,2,{"y":"z"}]}},{"type":"toolCall","id":"c3","name":"n","input":"s"}],"stopReason":"error"}}`,
	`{"parentUuid":"p","isSidechain":true,"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"big"}]}]},"uuid":"u","toolUseResult":{"originalFile":"…","structuredPatch":[{"lines":["+a","-b"]}]}}`,
	`{"parentUuid":"p","type":"assistant","isApiErrorMessage":true,"isApiErrorMessage":false,"message":{"id":"m","content":[]},"uuid":"u"}`,
	`{"type":"summary","summary":"s","leafUuid":"l"}`, `{"type":"file-history-snapshot","messageId":"m","snapshot":{"a":1}}`,
	`{"type":"user","Type":"user","message":{}}`, `{"message":{"role":"user","Role":"x"},"message":{"role":"user"}}`,
	`{"typ\u0065":"user","m\u0065ssage":{"role":"user"}}`, `{"type":"t\u0065xt","id":"\u0061"}`,
	`{"role":"user","content":"hi"}`, `{"role":"tool","tool_call_id":"c","content":[{"type":"text","text":" "}]}`,
	`{"type":"session","version":3,"id":"s"}`, `{"type":"session","version":3.0e1,"id":" "}`,
	`[1,2]`, `"str"`, `-0.5e+10`, `01`, `-`, `1.`, `1e`, `1e+`, `tru`, `nul`, `{"a":1,}`, `{"a" 1}`, `[1,]`, `{"a":"\x01"}`,
	`{"a":"\q"}`, `{"a":"\u12g4"}`, `{"a":1}x`, `{"a":1} `, `{"parentId":"x","parentId":"y","a":{"parentId":"z"}}`,
	`{ "parentId" : "x" , "b" : [ ] }`, `{ }`, `{"message":"not an object","id":"x"}`,
	strings.Repeat("[", 10001) + strings.Repeat("]", 10001), strings.Repeat("[", 10002) + strings.Repeat("]", 10002),
	strings.Repeat(`{"a":`, 10001) + `"s"` + strings.Repeat("}", 10001), strings.Repeat(`{"a":`, 10001) + `1` + strings.Repeat("}", 10001),
}

// TestOutline holds the outline of a line to the line, for every check
// that reads it, on every fixture line and the seeds.
func TestOutline(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 8))
	files, err := filepath.Glob("testdata/*.*")
	require.NoError(t, err)
	for _, path := range files {
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		for _, line := range bytes.Split(data, []byte("\n")) {
			checkOutline(t, r, line)
		}
	}
	for _, line := range outlineSeeds {
		checkOutline(t, r, []byte(line))
	}
}

// FuzzOutline holds the outline of any line to the line.
func FuzzOutline(f *testing.F) {
	for _, line := range outlineSeeds {
		f.Add([]byte(line))
	}
	seedFixtures(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		r := rand.New(rand.NewPCG(uint64(len(data)), 1))
		for _, line := range bytes.Split(data, []byte("\n")) {
			checkOutline(t, r, line)
		}
	})
}
