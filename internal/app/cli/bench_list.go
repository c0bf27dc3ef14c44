package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/belayhq/belay/internal/app/bench"
)

type benchListOptions struct {
	Runs     int
	Sessions int
	Requests int
	Dir      string
	Data     string
	JSON     bool
}

func newBenchListCmd(stdio Stdio) *cobra.Command {
	var opts benchListOptions
	cmd := &cobra.Command{
		Use:   "list",
		Short: "Measure listing runs across sessions (GET /v1/runs, belay runs list) on a large store",
		Long: `Creates --runs runs over --sessions sessions (a tenth failed, ten tags),
opens the store as the daemon does, and times GET /v1/runs over loopback
HTTP for the newest page, a tag, failed only, one session, a deep page by
cursor and the last-changed order: p50 and p99 of --requests requests each.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Runs < 1 || opts.Sessions < 1 || opts.Sessions > opts.Runs || opts.Requests < 1 {
				return usagef("belay bench list --runs 100000 --sessions 1000", "--runs, --sessions and --requests must be at least 1, and --sessions at most --runs")
			}
			dir, err := benchDir(stdio, opts.Dir, opts.Data)
			if err != nil {
				return err
			}
			res, err := bench.List(cmd.Context(), bench.ListConfig{Dir: dir, Runs: opts.Runs, Sessions: opts.Sessions, Requests: opts.Requests,
				Progress: func(s string) { fmt.Fprintf(stdio.Err, "… %s\n", s) }})
			if err != nil {
				return err
			}
			if opts.JSON {
				return writeJSON(stdio.Out, res)
			}
			w := tabwriter.NewWriter(stdio.Out, 2, 4, 2, ' ', 0)
			fmt.Fprintf(w, "list bench: %d runs over %d sessions (created in %.1f s, store opened in %.2f s)\n\n", res.Runs, res.Sessions, res.FillSeconds, res.OpenSeconds)
			fmt.Fprintln(w, "query\treturned\tp50\tp99")
			for _, q := range res.Queries {
				fmt.Fprintf(w, "%s\t%d\t%.1f ms\t%.1f ms\n", q.Name, q.Returned, q.P50Millis, q.P99Millis)
			}
			return w.Flush()
		},
	}
	f := cmd.Flags()
	f.IntVar(&opts.Runs, "runs", 100000, "runs to create")
	f.IntVar(&opts.Sessions, "sessions", 1000, "sessions the runs are spread over")
	f.IntVar(&opts.Requests, "requests", 30, "requests timed per query")
	f.StringVar(&opts.Dir, "dir", "", "scratch directory (default: inside the data directory)")
	f.StringVar(&opts.Data, "data", "", "data directory (default $BELAY_HOME, $XDG_STATE_HOME/belay, ~/.local/state/belay)")
	f.BoolVar(&opts.JSON, "json", false, "print JSON")
	return cmd
}
