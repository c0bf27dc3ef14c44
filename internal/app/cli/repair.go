package cli

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/belayhq/belay/internal/datadir"
	"github.com/belayhq/belay/internal/gotune"
	"github.com/belayhq/belay/internal/ids"
	"github.com/belayhq/belay/journal"
	"github.com/belayhq/belay/transcript"
)

type repairOptions struct {
	Files     []string
	Session   string
	Data      string
	Format    string
	DryRun    bool
	JSON      bool
	NoBackup  bool
	LinesOnly bool
}

// repairOutput is `belay repair --json` (docs/transcripts.md).
type repairOutput struct {
	// OK is false when any file was refused, missing or failed.
	OK    bool                     `json:"ok"`
	Files []*transcript.FileReport `json:"files"`
}

func newRepairCmd(stdio Stdio) *cobra.Command {
	var opts repairOptions
	cmd := &cobra.Command{
		Use:   "repair [FILE...]",
		Short: "Repair agent transcripts and belay journals in place, safely",
		Long: `Repairs transcript files: belay journals, pi and Claude Code sessions,
OpenAI Chat Completions and Anthropic Messages (JSON array or JSONL). The
format is detected unless --format names it.

File level: lines that are not valid JSON, or not valid entries of the
format, and lines written twice are dropped and reported with their line
numbers; an entry written onto a torn line is kept as a line of its own,
and a leading byte-order mark is removed. In pi and Claude Code sessions
an entry whose parent is missing is relinked to its nearest surviving
ancestor, and reported (not with --lines-only, which says how many it
leaves). A file whose
header is invalid is refused and never changed.
Message level: tool calls are paired with their results per turn (Claude
Code: across the tree, each result on its own call's line), missing
results get a synthetic error result, malformed calls, duplicate and orphan
results are dropped; delivered replies and errored turns are left alone.
pi and Claude Code sessions are repaired streaming, in memory that does
not grow with the file. A line longer than 8 MiB (a tool result holding a
whole file) is kept, read in pieces and never held unless damaged;
docs/transcripts.md lists every check and change.

Before any change the original is kept as FILE.bak-<UTC time> (a hard
link, or a copy where links fail), then the file is replaced atomically
(temp file, fsync, rename) with its mode and owner. A file with nothing to
fix is not touched. Exit status: 0 when every file is clean or repaired, 1
when any was refused or missing.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			defer gotune.Bounded(stdio.Getenv)() // a repair's promise is bounded memory
			opts.Files = args
			if opts.Session != "" {
				path, err := sessionJournal(stdio, opts.Data, opts.Session)
				if err != nil {
					return err
				}
				opts.Files = append(opts.Files, path)
			}
			if len(opts.Files) == 0 {
				return usagef("belay repair ~/.pi/agent/sessions/--w--/session.jsonl", "name at least one file (or --session ID)")
			}
			if opts.Format != "" {
				if _, err := transcript.ParseFormat(opts.Format); err != nil {
					return usagef("belay repair --format pi FILE", "--format: %v", err)
				}
			}
			return runRepair(stdio, opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Format, "format", "", "the files' format: belay, pi, claude, openai or anthropic (default: detect)")
	f.BoolVar(&opts.DryRun, "dry-run", false, "check: report what would change; write nothing")
	f.BoolVar(&opts.JSON, "json", false, "print a JSON report")
	f.BoolVar(&opts.NoBackup, "no-backup", false, "do not keep FILE.bak-<time>")
	f.BoolVar(&opts.LinesOnly, "lines-only", false, "file-level repair only (streaming, bounded memory)")
	f.StringVar(&opts.Session, "session", "", "repair this session's journal in the data directory")
	f.StringVar(&opts.Data, "data", "", "data directory for --session (default $BELAY_HOME, $XDG_STATE_HOME/belay, ~/.local/state/belay)")
	return cmd
}

// sessionJournal returns the journal path of a session in the data dir.
func sessionJournal(stdio Stdio, data, session string) (string, error) {
	if err := ids.Check("ses_", session); err != nil {
		return "", usagef("belay repair --session ses_...", "--session: %v", err)
	}
	dir, err := datadir.Resolve(data, stdio.Getenv)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "sessions", session, journal.FileName), nil
}

func runRepair(stdio Stdio, opts repairOptions) error {
	format, _ := transcript.ParseFormat(opts.Format)
	if opts.Format == "" {
		format = ""
	}
	out := repairOutput{OK: true, Files: []*transcript.FileReport{}}
	var failed []string
	for _, path := range opts.Files {
		rep, err := repairOne(path, opts, transcript.FileOptions{
			Format: format, DryRun: opts.DryRun, NoBackup: opts.NoBackup, LinesOnly: opts.LinesOnly,
		})
		if err != nil && !errors.Is(err, transcript.ErrRefused) {
			rep.Status, rep.Reason = transcript.StatusRefused, err.Error()
		}
		out.Files = append(out.Files, rep)
		if rep.Status == transcript.StatusRefused || rep.Status == transcript.StatusMissing {
			out.OK = false
			failed = append(failed, fmt.Sprintf("%s: %s", path, rep.Reason))
		}
		if !opts.JSON {
			printRepair(stdio, rep)
		}
	}
	if opts.JSON {
		if err := writeJSON(stdio.Out, out); err != nil {
			return err
		}
	}
	if !out.OK {
		return &exitError{code: ExitError, err: fmt.Errorf("not repaired: %s", strings.Join(failed, "; "))}
	}
	return nil
}

// repairOne repairs one file; a journal inside a belay data directory is
// repaired only while this process owns the directory (ownDataDirOf).
// A path through symbolic links is the file they lead to: that is the
// file repaired (a link stays a link), and whether it is a journal of a
// data directory is judged by where it really is.
func repairOne(path string, opts repairOptions, fo transcript.FileOptions) (*transcript.FileReport, error) {
	real := path
	if p, err := filepath.EvalSymlinks(path); err == nil {
		real = p
	}
	if !opts.DryRun {
		release, err := ownDataDirOf(context.Background(), real)
		if err != nil {
			return &transcript.FileReport{Path: path, Status: transcript.StatusRefused, Reason: err.Error()}, err
		}
		defer release()
	}
	rep, err := transcript.RepairFile(real, fo)
	if rep != nil {
		rep.Path = path
	}
	return rep, err
}

func printRepair(stdio Stdio, rep *transcript.FileReport) {
	w := stdio.Out
	format := ""
	if rep.Format != "" {
		format = " (" + string(rep.Format) + ")"
	}
	switch rep.Status {
	case transcript.StatusClean:
		fmt.Fprintf(w, "%s%s: clean, not changed\n", rep.Path, format)
	case transcript.StatusEmpty, transcript.StatusMissing, transcript.StatusRefused:
		fmt.Fprintf(w, "%s%s: %s: %s\n", rep.Path, format, rep.Status, rep.Reason)
	case transcript.StatusWould:
		fmt.Fprintf(w, "%s%s: would repair (%s, dry run: nothing written)\n", rep.Path, format, counted(len(rep.Changes), "change"))
	case transcript.StatusRepaired:
		fmt.Fprintf(w, "%s%s: repaired (%s, %d → %d bytes)\n", rep.Path, format, counted(len(rep.Changes), "change"), rep.BytesBefore, rep.BytesAfter)
		if rep.Backup != "" {
			fmt.Fprintf(w, "  backup: %s\n", rep.Backup)
		}
	}
	for _, c := range rep.Changes {
		where := ""
		if c.Line > 0 {
			where = fmt.Sprintf("line %d: ", c.Line)
		}
		call := ""
		if c.CallID != "" {
			call = " [" + c.CallID + "]"
		}
		fmt.Fprintf(w, "  %s%s%s: %s\n", where, c.Kind, call, c.Reason)
	}
	if rep.Note != "" {
		fmt.Fprintf(w, "  note: %s\n", rep.Note)
	}
}
