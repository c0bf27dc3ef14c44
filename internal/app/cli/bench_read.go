package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/belayhq/belay/internal/app/bench"
)

type benchReadOptions struct {
	Size  string
	Chunk string
	Dir   string
	Data  string
	JSON  bool
}

func newBenchReadCmd(stdio Stdio) *cobra.Command {
	var opts benchReadOptions
	cmd := &cobra.Command{
		Use:   "read",
		Short: "Measure reading a very long answer back: throughput and peak memory of daemon and CLI",
		Long: `Journals one complete run whose answer is --size bytes long, in text
deltas of --chunk bytes, starts a daemon on it (its own process), and times
belay read RUN (its own process) to a pipe, checking every byte read back.
Reports throughput and the peak resident memory (VmHWM, ru_maxrss) of the
daemon and of the CLI, which do not grow with the answer's size.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			size, chunk, err := opts.answer("read")
			if err != nil {
				return err
			}
			dir, exe, err := benchProcesses(stdio, opts.Dir, opts.Data)
			if err != nil {
				return err
			}
			res, err := bench.Read(cmd.Context(), bench.ReadConfig{
				Dir: dir, Exe: exe, Size: size, Chunk: chunk,
				Progress: func(s string) { fmt.Fprintf(stdio.Err, "… %s\n", s) },
			})
			if err != nil {
				return err
			}
			if opts.JSON {
				return writeJSON(stdio.Out, res)
			}
			w := tabwriter.NewWriter(stdio.Out, 2, 4, 2, ' ', 0)
			fmt.Fprintf(w, "read bench: a %s answer in %d-byte deltas (%d events, journal %s)\n\n", sizeString(res.AnswerBytes), res.Chunk, res.Events, sizeString(res.JournalBytes))
			fmt.Fprintln(w, "read\tMB/s\tdaemon peak RSS\tCLI peak RSS\tdaemon CPU\tCLI CPU\tCPU-bound MB/s\tverified")
			fmt.Fprintf(w, "%.2f s\t%.0f\t%s\t%s\t%.2f s\t%.2f s\t%.0f\t%v\n", res.Seconds, res.MBPerSec, sizeString(res.DaemonPeakRSS), sizeString(res.CLIPeakRSS),
				res.DaemonCPUSeconds, res.CLICPUSeconds, res.CPUBoundMBPerSec, res.Verified)
			return w.Flush()
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Size, "size", "1GB", "length of the answer")
	f.StringVar(&opts.Chunk, "chunk", "4KiB", "length of each text delta")
	f.StringVar(&opts.Dir, "dir", "", "scratch directory (default: inside the data directory)")
	f.StringVar(&opts.Data, "data", "", dataFlagHelp)
	f.BoolVar(&opts.JSON, "json", false, "print JSON")
	return cmd
}

// answer checks --size and --chunk of `belay bench NAME`.
func (o benchReadOptions) answer(name string) (size int64, chunk int, err error) {
	size, err = parseSize(o.Size)
	if err != nil || size < 1 {
		return 0, 0, usagef("belay bench "+name+" --size 1GB", "--size: want a size like 1GB")
	}
	c, err := parseSize(o.Chunk)
	if err != nil || c < 1 || c > 512<<10 {
		return 0, 0, usagef("belay bench "+name+" --chunk 4KiB", "--chunk: want a size from 1B to 512KiB")
	}
	return size, int(c), nil
}

// benchProcesses returns the scratch directory (benchDir) and the belay
// executable, for a bench that runs daemon and CLI as processes.
func benchProcesses(stdio Stdio, dir, data string) (string, string, error) {
	dir, err := benchDir(stdio, dir, data)
	if err != nil {
		return "", "", err
	}
	exe, err := selfExecutable()
	if err != nil {
		return "", "", fmt.Errorf("cannot find the belay executable: %w", err)
	}
	return dir, exe, nil
}
