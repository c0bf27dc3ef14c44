package transcript

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay/journal"
)

var fixed = func() time.Time { return time.Date(2026, 11, 22, 1, 2, 3, 4, time.UTC) }

// copyFixture copies a testdata file into a temp dir with mode perm.
func copyFixture(t *testing.T, name string, perm os.FileMode) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, data, perm))
	require.NoError(t, os.Chmod(path, perm))
	return path
}

func TestRepairFileMissingAndEmpty(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rep, err := RepairFile(filepath.Join(dir, "nope.jsonl"), FileOptions{})
	require.NoError(t, err)
	require.Equal(t, StatusMissing, rep.Status)
	empty := filepath.Join(dir, "empty.jsonl")
	require.NoError(t, os.WriteFile(empty, nil, 0o600))
	rep, err = RepairFile(empty, FileOptions{})
	require.NoError(t, err)
	require.Equal(t, StatusEmpty, rep.Status)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "nothing created")
}

func TestRepairFileCleanUntouched(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"pi_clean.jsonl", "claude_clean.jsonl", "claude_toolcalls_clean.jsonl", "claude_compacted_clean.jsonl", "claude_subagent_clean.jsonl", "openai_clean.json", "openai_clean.jsonl", "anthropic_clean.json", "belay_clean.jsonl"} {
		for _, lines := range []bool{false, true} {
			path := copyFixture(t, name, 0o640)
			old := time.Now().Add(-time.Hour).Truncate(time.Second)
			require.NoError(t, os.Chtimes(path, old, old))
			before, _ := os.ReadFile(path)
			rep, err := RepairFile(path, FileOptions{LinesOnly: lines})
			require.NoError(t, err, name)
			require.Equal(t, StatusClean, rep.Status, name)
			require.Empty(t, rep.Changes)
			after, _ := os.ReadFile(path)
			require.Equal(t, before, after)
			fi, err := os.Stat(path)
			require.NoError(t, err)
			require.True(t, fi.ModTime().Equal(old), "%s: mtime unchanged", name)
			entries, _ := os.ReadDir(filepath.Dir(path))
			require.Len(t, entries, 1, "%s: no backup or temp file", name)
		}
	}
}

func TestRepairFileRepairs(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"pi_broken.jsonl", "claude_broken.jsonl", "pi_treedamage.jsonl", "claude_treedamage.jsonl", "openai_broken.json", "openai_broken.jsonl", "anthropic_broken.json", "belay_broken.jsonl", "pi_v1.jsonl"} {
		path := copyFixture(t, name, 0o640)
		before, _ := os.ReadFile(path)
		rep, err := RepairFile(path, FileOptions{Now: fixed})
		require.NoError(t, err, name)
		require.Equal(t, StatusRepaired, rep.Status, name)
		require.NotEmpty(t, rep.Changes)
		require.Equal(t, path+".bak-20261122T010203.000000004Z", rep.Backup)
		backup, err := os.ReadFile(rep.Backup)
		require.NoError(t, err)
		require.Equal(t, before, backup, "the backup holds the original bytes")
		after, _ := os.ReadFile(path)
		want, err := os.ReadFile(filepath.Join("testdata", "golden", name+".repaired"))
		require.NoError(t, err)
		require.Equal(t, string(want), string(after), name)
		fi, _ := os.Stat(path)
		require.Equal(t, os.FileMode(0o640), fi.Mode().Perm(), "mode kept")
		// Repairing again changes nothing.
		rep, err = RepairFile(path, FileOptions{})
		require.NoError(t, err)
		require.Equal(t, StatusClean, rep.Status, "%s: %+v", name, rep.Changes)
	}
}

func TestRepairFileRefusesInvalidHeader(t *testing.T) {
	t.Parallel()
	for _, lines := range []bool{false, true} {
		path := copyFixture(t, "pi_badheader.jsonl", 0o600)
		before, _ := os.ReadFile(path)
		rep, err := RepairFile(path, FileOptions{LinesOnly: lines, Format: FormatPi})
		require.ErrorIs(t, err, ErrRefused)
		require.Equal(t, StatusRefused, rep.Status)
		require.Contains(t, rep.Reason, "header")
		after, _ := os.ReadFile(path)
		require.Equal(t, before, after)
		entries, _ := os.ReadDir(filepath.Dir(path))
		require.Len(t, entries, 1)
	}
	// A torn first line of a belay journal is refused too.
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(`{"seq":1,"ts":"x","type":"session.created","data":null,"crc":"00000000"}`+"\n"), 0o600))
	_, err := RepairFile(path, FileOptions{Format: FormatBelay})
	require.ErrorIs(t, err, ErrRefused)
	// Unknown formats are refused with the list of supported ones.
	path = filepath.Join(t.TempDir(), "x.txt")
	require.NoError(t, os.WriteFile(path, []byte("just text\n"), 0o600))
	rep, err := RepairFile(path, FileOptions{})
	require.ErrorIs(t, err, ErrRefused)
	require.Contains(t, rep.Reason, "belay, pi, claude, openai, anthropic")
}

func TestRepairFileDryRunAndNoBackup(t *testing.T) {
	t.Parallel()
	path := copyFixture(t, "pi_broken.jsonl", 0o600)
	before, _ := os.ReadFile(path)
	rep, err := RepairFile(path, FileOptions{DryRun: true})
	require.NoError(t, err)
	require.Equal(t, StatusWould, rep.Status)
	require.NotEmpty(t, rep.Changes)
	after, _ := os.ReadFile(path)
	require.Equal(t, before, after)
	rep, err = RepairFile(path, FileOptions{NoBackup: true})
	require.NoError(t, err)
	require.Equal(t, StatusRepaired, rep.Status)
	require.Empty(t, rep.Backup)
	entries, _ := os.ReadDir(filepath.Dir(path))
	require.Len(t, entries, 1)
}

// TestRepairLinesCRLF drops only the bad lines, keeping CRLF line ends.
func TestRepairLinesCRLF(t *testing.T) {
	t.Parallel()
	path := copyFixture(t, "openai_broken.jsonl", 0o600)
	rep, err := RepairFile(path, FileOptions{LinesOnly: true, NoBackup: true})
	require.NoError(t, err)
	require.Equal(t, StatusRepaired, rep.Status)
	require.Len(t, rep.Changes, 2)
	require.Equal(t, 3, rep.Changes[0].Line)
	require.Equal(t, 5, rep.Changes[1].Line)
	after, _ := os.ReadFile(path)
	require.Equal(t, "{\"role\":\"user\",\"content\":\"hi\"}\r\n{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}\r\n{\"role\":\"assistant\",\"content\":\"ok\"}\r\n", string(after))
}

// TestRepairBelayJournal: the rewritten journal opens cleanly through the
// journal package, with gap-free seqs that name the same events as before
// (a placeholder stands in for the dropped one), and both repair paths
// agree.
func TestRepairBelayJournal(t *testing.T) {
	t.Parallel()
	var outs []string
	for _, lines := range []bool{false, true} {
		dir := t.TempDir()
		data, err := os.ReadFile("testdata/belay_broken.jsonl")
		require.NoError(t, err)
		path := filepath.Join(dir, journal.FileName)
		require.NoError(t, os.WriteFile(path, data, 0o600))
		rep, err := RepairFile(path, FileOptions{LinesOnly: lines, NoBackup: true})
		require.NoError(t, err)
		require.Equal(t, StatusRepaired, rep.Status)
		require.False(t, rep.Messages, "a journal is never repaired at the message level")
		kinds := map[string]int{}
		for _, c := range rep.Changes {
			kinds[c.Kind]++
		}
		require.Equal(t, map[string]int{ChangeDropLine: 2, ChangeKeepSeqs: 1}, kinds)
		j, err := journal.Open(dir, journal.Options{ReadOnly: true})
		require.NoError(t, err)
		evs, err := j.Read(0, 0)
		require.NoError(t, err)
		require.NoError(t, j.Close())
		// Every surviving event keeps its seq; the damaged seq 12 is a
		// placeholder, so a watcher resuming after seq N sees the same
		// events as before the repair.
		require.Len(t, evs, 25)
		for i, e := range evs {
			require.Equal(t, uint64(i+1), e.Seq)
		}
		require.Equal(t, EventJournalLost, evs[11].Type)
		orig := map[uint64]string{}
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			if seq, ok := lineSeq([]byte(line)); ok && (belayCodec{}).checkLine([]byte(line)) == "" && orig[seq] == "" {
				typ, _ := getString([]byte(line), "type")
				orig[seq] = typ
			}
		}
		for _, e := range evs {
			if e.Type != EventJournalLost {
				require.Equal(t, orig[e.Seq], e.Type, "seq %d names the same event", e.Seq)
			}
		}
		require.Equal(t, -1, int(j.Recovery().TornAt))
		out, _ := os.ReadFile(path)
		outs = append(outs, string(out))
	}
	require.Equal(t, outs[0], outs[1])
}

// TestParallelScanMatchesSequential checks the segmented scan of a large
// file against the sequential one.
func TestParallelScanMatchesSequential(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	b.WriteString(`{"type":"session","version":3,"id":"s"}` + "\n")
	line := `{"type":"message","id":"x","parentId":null,"message":{"role":"user","content":"` + strings.Repeat("a", 300) + `"}}`
	for i := 0; b.Len() < parallelMin+(1<<20); i++ {
		switch {
		case i%997 == 0:
			b.WriteString(line[:50] + "\n")
		case i%1999 == 0:
			b.WriteString("\r\n")
		default:
			b.WriteString(line + "\n")
		}
	}
	path := filepath.Join(t.TempDir(), "big.jsonl")
	require.NoError(t, os.WriteFile(path, b.Bytes(), 0o600))
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var seqC, parC []Change
	seq, err := scanLines(bytes.NewReader(b.Bytes()), FormatPi, func(c Change) { seqC = append(seqC, c) })
	require.NoError(t, err)
	par, err := scanFile(f, int64(b.Len()), FormatPi, func(c Change) { parC = append(parC, c) })
	require.NoError(t, err)
	require.NotEmpty(t, seq)
	require.Equal(t, seq, par)
	require.Equal(t, seqC, parC)
}

// TestRepairFileBackup: the backup is a hard link to the original bytes
// (repair renames a new file over the path, so the link keeps them), or a
// copy where links fail; either keeps the bytes and mode, and an existing
// backup is never replaced.
func TestRepairFileBackup(t *testing.T) {
	t.Parallel()
	path := copyFixture(t, "pi_broken.jsonl", 0o640)
	before, err := os.ReadFile(path)
	require.NoError(t, err)
	orig, err := os.Stat(path)
	require.NoError(t, err)
	rep, err := RepairFile(path, FileOptions{Now: fixed})
	require.NoError(t, err)
	bfi, err := os.Stat(rep.Backup)
	require.NoError(t, err)
	require.True(t, os.SameFile(orig, bfi), "the backup is the original file, linked")
	nfi, err := os.Stat(path)
	require.NoError(t, err)
	require.False(t, os.SameFile(nfi, bfi), "the repaired file is a new one")

	dir := t.TempDir()
	src := filepath.Join(dir, "s.jsonl")
	require.NoError(t, os.WriteFile(src, before, 0o640))
	fi, err := os.Stat(src)
	require.NoError(t, err)
	noLinks := func(string, string) error { return errors.New("operation not permitted") }
	dst := src + ".bak"
	require.NoError(t, keepBackup(dst, src, fi, noLinks))
	got, err := os.ReadFile(dst)
	require.NoError(t, err)
	require.Equal(t, before, got)
	cfi, err := os.Stat(dst)
	require.NoError(t, err)
	require.False(t, os.SameFile(fi, cfi), "copied")
	require.Equal(t, os.FileMode(0o640), cfi.Mode().Perm())
	require.ErrorContains(t, keepBackup(dst, src, fi, os.Link), "already exists")

	// Through a symlink, the backup is a copy of the target's bytes, not a
	// second symlink.
	target := copyFixture(t, "pi_broken.jsonl", 0o640)
	link := filepath.Join(t.TempDir(), "link.jsonl")
	require.NoError(t, os.Symlink(target, link))
	rep, err = RepairFile(link, FileOptions{Now: fixed})
	require.NoError(t, err)
	li, err := os.Lstat(rep.Backup)
	require.NoError(t, err)
	require.True(t, li.Mode().IsRegular())
	got, err = os.ReadFile(rep.Backup)
	require.NoError(t, err)
	require.Equal(t, before, got)
}

// TestRepairRefusesAFileWrittenMeanwhile: a file appended to while its
// repair runs (an agent still writing its session) is not replaced: the
// repaired copy would lose what was appended. The repair is refused, the
// file keeps every byte, and no backup or temp file is left.
func TestRepairRefusesAFileWrittenMeanwhile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.jsonl")
	require.NoError(t, os.WriteFile(path, []byte("line 1\n"), 0o600))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	rep := &FileReport{Path: path}
	err = replace(path, fi, rep, FileOptions{Now: time.Now}, func(w io.Writer) error {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		if _, err := f.WriteString("line 2, written during the repair\n"); err != nil {
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		_, err = w.Write([]byte("repaired\n"))
		return err
	})
	require.ErrorIs(t, err, ErrRefused)
	require.ErrorContains(t, err, "changed while it was being repaired")
	require.Equal(t, StatusRefused, rep.Status)
	require.Empty(t, rep.Backup)
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "line 1\nline 2, written during the repair\n", string(got))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no backup, no temp file")

	// Unchanged meanwhile, the same replace goes through.
	fi, err = os.Stat(path)
	require.NoError(t, err)
	rep = &FileReport{Path: path}
	require.NoError(t, replace(path, fi, rep, FileOptions{Now: time.Now}, func(w io.Writer) error {
		_, err := w.Write([]byte("repaired\n"))
		return err
	}))
	got, err = os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "repaired\n", string(got))
	require.NotEmpty(t, rep.Backup)
}

// TestRepairBelayJournalTornTail: a torn last line is dropped and leaves
// no seq to fill, so the report claims no placeholder, on both repair
// paths, in a dry run as in the repair; and a dry run reports what the
// repair does.
func TestRepairBelayJournalTornTail(t *testing.T) {
	t.Parallel()
	clean, err := os.ReadFile("testdata/belay_clean.jsonl")
	require.NoError(t, err)
	broken, err := os.ReadFile("testdata/belay_broken.jsonl")
	require.NoError(t, err)
	for _, tc := range []struct {
		name   string
		data   []byte
		placed bool
	}{
		{"torn tail", append(append([]byte{}, clean...), `{"seq":99,"ty`...), false},
		{"damage inside", broken, true},
	} {
		for _, lines := range []bool{false, true} {
			dir := t.TempDir()
			path := filepath.Join(dir, journal.FileName)
			require.NoError(t, os.WriteFile(path, tc.data, 0o600))
			dry, err := RepairFile(path, FileOptions{LinesOnly: lines, NoBackup: true, DryRun: true})
			require.NoError(t, err)
			require.Equal(t, StatusWould, dry.Status)
			rep, err := RepairFile(path, FileOptions{LinesOnly: lines, NoBackup: true})
			require.NoError(t, err)
			require.Equal(t, StatusRepaired, rep.Status)
			require.Equal(t, rep.Changes, dry.Changes, "%s, lines only %v: the dry run reports what the repair does", tc.name, lines)
			var keep []Change
			for _, c := range rep.Changes {
				if c.Kind == ChangeKeepSeqs {
					keep = append(keep, c)
				}
			}
			j, err := journal.Open(dir, journal.Options{ReadOnly: true})
			require.NoError(t, err)
			evs, err := j.Read(0, 0)
			require.NoError(t, err)
			require.NoError(t, j.Close())
			lost := 0
			for _, e := range evs {
				if e.Type == EventJournalLost {
					lost++
				}
			}
			if !tc.placed {
				require.Empty(t, keep, "%s, lines only %v: no placeholder was written", tc.name, lines)
				require.Zero(t, lost)
				continue
			}
			require.Len(t, keep, 1, "%s, lines only %v", tc.name, lines)
			require.Positive(t, lost)
			require.Contains(t, keep[0].Reason, fmt.Sprintf("%d journal.lost placeholder", lost), "the count is the journal's")
		}
	}
}

// TestRepairBelayJournalSplices: lines whose seq is out of place (a later
// line spliced in early, a line repeated, a high seq at the tail) are
// judged the same by both repair paths, in a dry run as in the repair:
// the same drops, the same journal, and a tail splice is not "clean".
func TestRepairBelayJournalSplices(t *testing.T) {
	t.Parallel()
	clean, err := os.ReadFile("testdata/belay_clean.jsonl")
	require.NoError(t, err)
	lines := strings.SplitAfter(strings.TrimSuffix(string(clean), "\n"), "\n")
	require.Greater(t, len(lines), 21)
	with := func(at int, extra string) []byte {
		out := append([]string{}, lines[:at]...)
		out = append(out, extra)
		out = append(out, lines[at:]...)
		s := strings.Join(out, "")
		if !strings.HasSuffix(s, "\n") {
			s += "\n"
		}
		return []byte(s)
	}
	last := lines[len(lines)-1]
	if !strings.HasSuffix(last, "\n") {
		last += "\n"
	}
	for _, tc := range []struct {
		name string
		data []byte
		line int // the one line dropped
	}{
		{"a later line spliced in early", with(3, lines[19]), 4},
		{"a line repeated", with(5, lines[4]), 6},
		{"a later line spliced at the tail", append(append([]byte{}, clean...), last...), len(lines) + 1},
	} {
		var outs []string
		for _, linesOnly := range []bool{false, true} {
			dir := t.TempDir()
			path := filepath.Join(dir, journal.FileName)
			require.NoError(t, os.WriteFile(path, tc.data, 0o600))
			dry, err := RepairFile(path, FileOptions{LinesOnly: linesOnly, NoBackup: true, DryRun: true})
			require.NoError(t, err)
			rep, err := RepairFile(path, FileOptions{LinesOnly: linesOnly, NoBackup: true})
			require.NoError(t, err)
			require.Equal(t, StatusRepaired, rep.Status, "%s, lines only %v: %+v", tc.name, linesOnly, rep.Changes)
			require.Equal(t, rep.Changes, dry.Changes, "%s, lines only %v", tc.name, linesOnly)
			var drops []int
			for _, c := range rep.Changes {
				if c.Kind != ChangeKeepSeqs {
					drops = append(drops, c.Line)
				}
			}
			require.Equal(t, []int{tc.line}, drops, "%s, lines only %v: %+v", tc.name, linesOnly, rep.Changes)
			out, err := os.ReadFile(path)
			require.NoError(t, err)
			outs = append(outs, string(out))
		}
		require.Equal(t, outs[0], outs[1], "%s: both paths write the same journal", tc.name)
	}
}
