package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/belayhq/belay/internal/app/bench"
	"github.com/belayhq/belay/transcript"
)

type benchExportOptions struct {
	benchReadOptions
	Format string
}

func newBenchExportCmd(stdio Stdio) *cobra.Command {
	var opts benchExportOptions
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Measure exporting a session with a very long answer: throughput and peak memory of daemon and CLI",
		Long: `Journals a session whose one run's answer is --size bytes long, in text
deltas of --chunk bytes, then, each with a daemon of its own (its own
process), times belay read RUN (the baseline) and belay sessions export
SESSION --format F (its own process) to a pipe. Reports throughput, the
export's over the read's, and the peak resident memory (VmHWM) of daemon
and CLI, which do not grow with the session's size. The openai export is
checked byte for byte.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			size, chunk, err := opts.answer("export")
			if err != nil {
				return err
			}
			f, err := transcript.ParseFormat(opts.Format)
			if err != nil {
				return usagef("belay bench export --format openai", "--format: %v", err)
			}
			dir, exe, err := benchProcesses(stdio, opts.Dir, opts.Data)
			if err != nil {
				return err
			}
			res, err := bench.Export(cmd.Context(), bench.ExportConfig{
				Dir: dir, Exe: exe, Size: size, Chunk: chunk, Format: string(f),
				Progress: func(s string) { fmt.Fprintf(stdio.Err, "… %s\n", s) },
			})
			if err != nil {
				return err
			}
			if opts.JSON {
				return writeJSON(stdio.Out, res)
			}
			w := tabwriter.NewWriter(stdio.Out, 2, 4, 2, ' ', 0)
			fmt.Fprintf(w, "export bench: a %s answer in %d-byte deltas (%d events, journal %s), format %s\n\n", sizeString(res.AnswerBytes), res.Chunk, res.Events, sizeString(res.JournalBytes), res.Format)
			fmt.Fprintln(w, "command\tbytes\ttime\tMB/s\tdaemon peak RSS\tCLI peak RSS\tdaemon CPU\tCLI CPU\tCPU-bound MB/s")
			for _, p := range []struct {
				name string
				p    bench.ExportPhase
			}{{"read (baseline)", res.Read}, {"sessions export", res.Export}} {
				fmt.Fprintf(w, "%s\t%s\t%.2f s\t%.0f\t%s\t%s\t%.2f s\t%.2f s\t%.0f\n", p.name, sizeString(p.p.Bytes), p.p.Seconds, p.p.MBPerSec,
					sizeString(p.p.DaemonPeakRSS), sizeString(p.p.CLIPeakRSS), p.p.DaemonCPUSeconds, p.p.CLICPUSeconds, p.p.CPUBoundMBPerSec)
			}
			fmt.Fprintf(w, "\nexport/read: %.2f; verified: %v\n", res.Ratio, res.Verified)
			return w.Flush()
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Size, "size", "1GB", "length of the answer")
	f.StringVar(&opts.Chunk, "chunk", "4KiB", "length of each text delta")
	f.StringVar(&opts.Format, "format", "openai", "export format: belay, pi, claude, openai or anthropic")
	f.StringVar(&opts.Dir, "dir", "", "scratch directory (default: inside the data directory)")
	f.StringVar(&opts.Data, "data", "", dataFlagHelp)
	f.BoolVar(&opts.JSON, "json", false, "print JSON")
	return cmd
}
