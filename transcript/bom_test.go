package transcript

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestByteOrderMark: a file that begins with a UTF-8 byte-order mark is
// detected and read in every format; repair removes the mark, reports it,
// and keeps the first entry (before, a Claude Code file lost its first
// line, and pi, OpenAI and Anthropic files were refused).
func TestByteOrderMark(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		fixture string
		format  Format
	}{
		{"pi_clean.jsonl", FormatPi},
		{"claude_clean.jsonl", FormatClaude},
		{"claude_toolcalls_clean.jsonl", FormatClaude},
		{"openai_clean.jsonl", FormatOpenAI},
		{"openai_clean.json", FormatOpenAI},
		{"anthropic_clean.json", FormatAnthropic},
		{"belay_clean.jsonl", FormatBelay},
	} {
		clean, err := os.ReadFile(filepath.Join("testdata", tc.fixture))
		require.NoError(t, err)
		marked := append([]byte("\xef\xbb\xbf"), clean...)
		f, err := Detect(marked)
		require.NoError(t, err)
		require.Equal(t, tc.format, f, tc.fixture)
		d, err := Parse(marked, "")
		require.NoError(t, err, tc.fixture)
		require.Equal(t, []Change{bomChange()}, d.Dropped, tc.fixture)
		want, err := Parse(clean, tc.format)
		require.NoError(t, err)
		require.Equal(t, want.Messages(), d.Messages(), "%s: the first entry is kept", tc.fixture)
		for _, lines := range []bool{false, true} {
			path := filepath.Join(t.TempDir(), tc.fixture)
			require.NoError(t, os.WriteFile(path, marked, 0o600))
			rep, err := RepairFile(path, FileOptions{NoBackup: true, LinesOnly: lines})
			require.NoError(t, err, "%s lines-only=%v", tc.fixture, lines)
			require.Equal(t, StatusRepaired, rep.Status)
			require.Equal(t, []Change{bomChange()}, rep.Changes, "%s lines-only=%v", tc.fixture, lines)
			require.Equal(t, int64(len(clean)), rep.BytesAfter)
			out, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Equal(t, string(clean), string(out), "%s lines-only=%v", tc.fixture, lines)
		}
		if tc.format == FormatPi || tc.format == FormatClaude {
			require.True(t, sameRepair(t, marked, tc.format), "%s is streamed", tc.fixture)
		}
	}
	// The mark with a torn first line, an entry glued onto it: both go,
	// the entry stays.
	in := "\xef\xbb\xbf" + jsonl(torn(ccU1, `"fix the pa`)+ccU1, ccA2)
	require.True(t, sameRepair(t, []byte(in), FormatClaude))
	d, err := Parse([]byte(in), FormatClaude)
	require.NoError(t, err)
	require.Equal(t, []string{ChangeDropBOM, ChangeDropFragment}, []string{d.Dropped[0].Kind, d.Dropped[1].Kind})
	out, err := d.Bytes()
	require.NoError(t, err)
	require.Equal(t, jsonl(ccU1, ccA2), string(out))
}

// TestByteOrderMarkOnAJournal: a belay journal with the mark and a lost
// line is repaired as without the mark (a lost-line placeholder keeps the
// seqs), the mark removed besides: the mark is not a dropped line, which
// would make every later seq look like a jump.
func TestByteOrderMarkOnAJournal(t *testing.T) {
	t.Parallel()
	clean, err := os.ReadFile(filepath.Join("testdata", "belay_clean.jsonl"))
	require.NoError(t, err)
	lines := strings.SplitAfter(string(clean), "\n")
	require.Greater(t, len(lines), 5)
	lost := strings.Join(append(append([]string{}, lines[:3]...), lines[4:]...), "")
	without, err := Parse([]byte(lost), FormatBelay)
	require.NoError(t, err)
	with, err := Parse(append([]byte("\xef\xbb\xbf"), lost...), FormatBelay)
	require.NoError(t, err)
	require.Equal(t, ChangeDropBOM, with.Dropped[0].Kind)
	require.Equal(t, without.Dropped, with.Dropped[1:])
	a, err := without.Bytes()
	require.NoError(t, err)
	b, err := with.Bytes()
	require.NoError(t, err)
	require.Equal(t, string(a), string(b))
}
