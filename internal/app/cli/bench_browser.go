package cli

import (
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/belayhq/belay/internal/app/bench"
)

type benchBrowserOptions struct {
	Runs  int
	Speed float64
	Dir   string
	Data  string
	JSON  bool
}

func newBenchBrowserCmd(stdio Stdio) *cobra.Command {
	var opts benchBrowserOptions
	cmd := &cobra.Command{
		Use:   "browser",
		Short: "Measure the browser provider: time to first delta, memory per browser, recovery after a daemon kill",
		Long: `Starts the loopback chat site (time-compressed by --speed) and a daemon
(a child process), sends --runs answers at once in real headless
Chromium, and reports the time from send to the first answer text and
the memory of each browser. Then it SIGKILLs the daemon mid-answer,
restarts it and reports how long the run took to stream again and to
finish, and whether the answer is exact with the prompt sent once.
Needs chromium.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Runs < 1 || opts.Speed <= 0 {
				return usagef("belay bench browser --runs 2", "--runs must be at least 1 and --speed positive")
			}
			dir, err := benchDir(stdio, opts.Dir, opts.Data)
			if err != nil {
				return err
			}
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			res, err := bench.Browser(cmd.Context(), bench.BrowserConfig{
				Exe: exe, Dir: dir, Runs: opts.Runs, Speed: opts.Speed,
				Progress: func(s string) { fmt.Fprintf(stdio.Err, "… %s\n", s) },
			})
			if err != nil {
				return err
			}
			if opts.JSON {
				return writeJSON(stdio.Out, res)
			}
			w := tabwriter.NewWriter(stdio.Out, 2, 4, 2, ' ', 0)
			fmt.Fprintf(w, "browser bench: %d concurrent runs, site time x%g (thinking %.0f s of site time = %.1f s)\n\n", res.Runs, res.Speed, res.ThinkSeconds, res.ThinkSeconds/res.Speed)
			fmt.Fprintln(w, "submit→first delta p50\tmax\tsubmit→site send p50\tsite send→first delta p50\tbrowser memory mean\tmax")
			fmt.Fprintf(w, "%.2f s\t%.2f s\t%.2f s\t%.2f s\t%s\t%s\n", res.FirstDeltaP50Seconds, res.FirstDeltaMaxSeconds, res.SubmitToSendP50Seconds, res.SiteSendToDeltaP50Seconds, sizeString(res.BrowserMemoryMeanBytes), sizeString(res.BrowserMemoryMaxBytes))
			fmt.Fprintln(w, "\nafter SIGKILL: daemon up\tstreaming again\tcomplete\texactly once")
			fmt.Fprintf(w, "%.2f s\t%.2f s\t%.2f s\t%v\n", res.RestartSeconds, res.RecoveryDeltaSeconds, res.RecoveryFinishSeconds, res.ExactlyOnce)
			if err := w.Flush(); err != nil {
				return err
			}
			if !res.ExactlyOnce {
				return &exitError{code: ExitError, err: fmt.Errorf("an answer was not exact or a prompt was sent twice")}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&opts.Runs, "runs", 2, "runs at once (each holds a browser)")
	f.Float64Var(&opts.Speed, "speed", 60, "site seconds per real second")
	f.StringVar(&opts.Dir, "dir", "", "scratch directory (default: inside the data directory)")
	f.StringVar(&opts.Data, "data", "", dataFlagHelp)
	f.BoolVar(&opts.JSON, "json", false, "print JSON")
	return cmd
}
