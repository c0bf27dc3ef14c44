package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/belayhq/belay/internal/app/bench"
	"github.com/belayhq/belay/internal/gotune"
)

type benchRepairOptions struct {
	Size     string
	Messages int
	Rounds   int
	Dir      string
	Data     string
	JSON     bool
}

func newBenchRepairCmd(stdio Stdio) *cobra.Command {
	var opts benchRepairOptions
	cmd := &cobra.Command{
		Use:   "repair",
		Short: "Measure transcript repair: throughput, memory and scaling of each mode",
		Long: `Generates a pi session and a Claude Code session of --size (and of a tenth
of that), damaged every 1000 lines or so: a torn line, a lost line (its
child's parent link breaks) and a tool result that answers no call. Each is
repaired three ways from the same damaged bytes (copied and synced to disk
before each timed repair), in one run, --rounds times each (the ways
alternating; each reports its median round):
  lines_only  belay repair --lines-only (the baseline)
  check       belay repair --dry-run (everything but writing)
  default     belay repair: line and message level, backup, temp file,
              fsync, rename
and each reports MB/s and the peak live heap and peak RSS. Targets: default
>= 200 MB/s, check >= 400 MB/s, peak RSS < 64 MiB, default time on the large
file over the small one <= 11 (scale), with RSS flat (rss_growth about 1).
Then times message-level repair (tool call/result pairing) of N and 10N
generated messages: pairing_scale is about 10 when it scales linearly.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			size, err := parseSize(opts.Size)
			if err != nil || size < 1e5 {
				return usagef("belay bench repair --size 200MB", "--size: give a size of at least 100KB, like 200MB")
			}
			if opts.Rounds < 1 {
				return usagef("belay bench repair --rounds 3", "--rounds must be at least 1")
			}
			if opts.Messages < 1 {
				return usagef("belay bench repair --messages 20000", "--messages must be at least 1")
			}
			// Measured as `belay repair` runs: at its GOGC.
			defer gotune.Bounded(stdio.Getenv)()
			dir, err := benchDir(stdio, opts.Dir, opts.Data)
			if err != nil {
				return err
			}
			res, err := bench.Repair(cmd.Context(), bench.RepairConfig{
				Dir: dir, Size: size, Messages: opts.Messages, Rounds: opts.Rounds,
				Progress: func(s string) { fmt.Fprintf(stdio.Err, "… %s\n", s) },
			})
			if err != nil {
				return err
			}
			if opts.JSON {
				return writeJSON(stdio.Out, res)
			}
			w := tabwriter.NewWriter(stdio.Out, 2, 4, 2, ' ', 0)
			fmt.Fprintf(w, "repair bench (targets: default >= %.0f MB/s, check >= %.0f MB/s, peak RSS < %s, scale <= %.0f; median of %d rounds; GOGC %d)\n",
				res.TargetMBPerSec, res.TargetCheckMBPerSec, fmt.Sprintf("%d MiB", res.TargetPeakRSSBytes>>20), res.TargetScale, res.Rounds, res.GOGC)
			for _, rf := range res.Formats {
				fmt.Fprintf(w, "\n%s\tsize\tlines\ttorn/lost/orphans\tmode\ttime\tMB/s\tCPU s\tchanges\tpeak heap\tpeak RSS\n", rf.Format)
				for _, f := range rf.Files {
					for _, run := range []struct {
						name string
						r    bench.RepairRun
					}{{"lines-only", f.LinesOnly}, {"check", f.Check}, {"default", f.Default}} {
						fmt.Fprintf(w, "\t%s\t%d\t%d/%d/%d\t%s\t%.2f s\t%.0f\t%.2f\t%d\t%s\t%s\n", sizeString(f.Bytes), f.Lines, f.Torn, f.Lost, f.Orphan,
							run.name, run.r.Seconds, run.r.MBPerSec, run.r.CPUSeconds, run.r.Changes, sizeString(int64(run.r.PeakHeapBytes)), sizeString(run.r.PeakRSSBytes))
					}
				}
				fmt.Fprintf(w, "\tscale (default, large/small): %.1f\trss growth: %.2f\n", rf.Scale, rf.RSSGrowth)
			}
			fmt.Fprintln(w, "\nmessages\ttime\tns/message\tchanges")
			for _, p := range res.Pairing {
				fmt.Fprintf(w, "%d\t%.3f s\t%.0f\t%d\n", p.Messages, p.Seconds, p.NsPerMessage, p.Changes)
			}
			fmt.Fprintf(w, "\npairing_scale (10N/N): %.1f\n", res.PairingScale)
			return w.Flush()
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Size, "size", "200MB", "size of the larger generated session file")
	f.IntVar(&opts.Messages, "messages", 20000, "N for the pairing measurement (it also runs 10N)")
	f.IntVar(&opts.Rounds, "rounds", 3, "repairs of each file each way; each way reports its median round")
	f.StringVar(&opts.Dir, "dir", "", "scratch directory (default: inside the data directory)")
	f.StringVar(&opts.Data, "data", "", "data directory (default $BELAY_HOME, $XDG_STATE_HOME/belay, ~/.local/state/belay)")
	f.BoolVar(&opts.JSON, "json", false, "print JSON")
	return cmd
}
