package transcript

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLinesOnlyNamesDanglingChildren: --lines-only changes no parent
// link, so the entries whose parent was on a dropped line still name it;
// the report counts them and says what relinks them, and the repair it
// names does.
func TestLinesOnlyNamesDanglingChildren(t *testing.T) {
	t.Parallel()
	piA5On := func(parent string) string {
		return strings.Replace(piA5, `"parentId":"d4e5f6a7"`, `"parentId":"`+parent+`"`, 1)
	}
	ccTorn := torn(ccU3, `"and the te`) // torn before its uuid
	for _, tc := range []struct {
		name     string
		format   Format
		in       string
		children int
		note     string // the note holds this ("": no note)
	}{{
		name:     "pi: a torn line with children",
		format:   FormatPi,
		in:       jsonl(piHead, piU1, piA2, torn(piU3, `"role":"user","cont`), piA5On("c3d4e5f6"), strings.Replace(piA5On("c3d4e5f6"), `"id":"e5f6a7b8"`, `"id":"f6a7b8c9"`, 1)),
		children: 2,
		note:     "2 entries still name as parent an entry on a dropped line",
	}, {
		name:   "pi: a torn last line has no children",
		format: FormatPi,
		in:     jsonl(piHead, piU1, piA2, torn(piU3, `"role":"user","cont`)),
	}, {
		name:     "pi: the entry glued onto a torn line names it",
		format:   FormatPi,
		in:       jsonl(piHead, piU1, piA2, torn(piU3, `"timest`)+strings.Replace(piU4, `"parentId":"b2c3d4e5"`, `"parentId":"c3d4e5f6"`, 1), piA5),
		children: 1,
		note:     "1 entry still names as parent",
	}, {
		name:   "pi: a dropped line nothing names",
		format: FormatPi,
		in:     jsonl(piHead, piU1, piA2, torn(piU3, `"role":"user","cont`), piU4, piA5),
	}, {
		name:   "claude: a torn line whose uuid was torn away",
		format: FormatClaude,
		in:     jsonl(ccU1, ccA2, ccTorn, strings.Replace(ccA5, `"parentUuid":"u4"`, `"parentUuid":"u3"`, 1)),
		note:   "entries after 1 dropped entry whose own id was torn away may still name it as parent",
	}, {
		// A run of zeros (a block the crash left unwritten) is no entry:
		// nothing can name it.
		name:   "pi: zeros are not an entry",
		format: FormatPi,
		in:     jsonl(piHead, piU1, piA2, strings.Repeat("\x00", 40), piU4, piA5),
	}, {
		name:     "claude: a torn line that kept its uuid",
		format:   FormatClaude,
		in:       jsonl(ccU1, ccA2, torn(ccU3, `"timestamp":"2026-02-12T16:0`), strings.Replace(ccA5, `"parentUuid":"u4"`, `"parentUuid":"u3"`, 1)),
		children: 1,
		note:     "1 entry still names as parent",
	}, {
		name:   "claude: the byte-order mark only",
		format: FormatClaude,
		in:     "\xef\xbb\xbf" + jsonl(ccU1, ccA2),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "s.jsonl")
			require.NoError(t, os.WriteFile(path, []byte(tc.in), 0o600))
			for _, dry := range []bool{true, false} {
				rep, err := RepairFile(path, FileOptions{Format: tc.format, LinesOnly: true, NoBackup: true, DryRun: dry})
				require.NoError(t, err)
				require.Equal(t, tc.children, rep.DanglingChildren)
				if tc.note == "" {
					require.Empty(t, rep.Note)
					continue
				}
				require.Contains(t, rep.Note, tc.note)
				require.Contains(t, rep.Note, "without --lines-only")
			}
			if tc.note == "" {
				return
			}
			// The repair the note names relinks them.
			rep, err := RepairFile(path, FileOptions{Format: tc.format, NoBackup: true})
			require.NoError(t, err)
			relinks := 0
			for _, c := range rep.Changes {
				if c.Kind == ChangeRelink {
					relinks++
				}
			}
			require.Equal(t, max(tc.children, 1), relinks)
			require.Zero(t, rep.DanglingChildren)
			require.Empty(t, rep.Note)
		})
	}
}
