package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/belayhq/belay/internal/bench"
)

type benchRepairOptions struct {
	Size     string
	Messages int
	Dir      string
	Data     string
	JSON     bool
}

func newBenchRepairCmd(stdio Stdio) *cobra.Command {
	var opts benchRepairOptions
	cmd := &cobra.Command{
		Use:   "repair",
		Short: "Measure transcript repair: file-level throughput and memory, message-level scaling",
		Long: `Generates a pi session of --size (and one a tenth of that) with an invalid
line every 1000 lines, and repairs each in place as belay repair --lines-only
does: a validating pass, a backup, a copy without the bad lines to a temp
file, fsync, rename. Reports MB/s (target: 200) and the peak live heap and
peak RSS during each repair, which must not grow with the file size. Then
times message-level repair (tool call/result pairing) of N and 10N
generated messages: pairing_scale is about 10 when it scales linearly.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			size, err := parseSize(opts.Size)
			if err != nil || size < 1e5 {
				return usagef("belay bench repair --size 200MB", "--size: give a size of at least 100KB, like 200MB")
			}
			if opts.Messages < 1 {
				return usagef("belay bench repair --messages 20000", "--messages must be at least 1")
			}
			dir, err := benchDir(stdio, opts.Dir, opts.Data)
			if err != nil {
				return err
			}
			res, err := bench.Repair(cmd.Context(), bench.RepairConfig{
				Dir: dir, Size: size, Messages: opts.Messages,
				Progress: func(s string) { fmt.Fprintf(stdio.Err, "… %s\n", s) },
			})
			if err != nil {
				return err
			}
			if opts.JSON {
				return writeJSON(stdio.Out, res)
			}
			w := tabwriter.NewWriter(stdio.Out, 2, 4, 2, ' ', 0)
			fmt.Fprintf(w, "repair bench: %s sessions, file level (target %.0f MB/s)\n\n", res.Format, res.TargetMBPerSec)
			fmt.Fprintln(w, "size\tlines\tdropped\ttime\tMB/s\tscan MB/s\tpeak heap\tpeak RSS")
			for _, f := range res.Files {
				fmt.Fprintf(w, "%s\t%d\t%d\t%.2f s\t%.0f\t%.0f\t%s\t%s\n", sizeString(f.Bytes), f.Lines, f.Dropped, f.Seconds, f.MBPerSec, f.ScanOnlyMB, sizeString(int64(f.PeakHeapBytes)), sizeString(f.PeakRSSBytes))
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
	f.StringVar(&opts.Dir, "dir", "", "scratch directory (default: inside the data directory)")
	f.StringVar(&opts.Data, "data", "", "data directory (default $BELAY_HOME, $XDG_STATE_HOME/belay, ~/.local/state/belay)")
	f.BoolVar(&opts.JSON, "json", false, "print JSON")
	return cmd
}
