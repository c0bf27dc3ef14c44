package cli

import (
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/belayhq/belay/internal/app/bench"
)

type benchFailoverOptions struct {
	Store    string
	Bin      string
	Nodes    int
	Runs     int
	Kills    int
	LeaseTTL time.Duration
	Dir      string
	Data     string
	JSON     bool
}

func newBenchFailoverCmd(stdio Stdio) *cobra.Command {
	var opts benchFailoverOptions
	cmd := &cobra.Command{
		Use:   "failover",
		Short: "Measure failover on PostgreSQL: kill -9 a node, time until its runs resume on another",
		Long: `Starts --nodes belay serve processes (this binary) on the PostgreSQL
database --store names, each with its own data directory under the
scratch directory and [runs] lease_ttl = --lease-ttl. It sends --runs
long fake runs, waits until they run, SIGKILLs the node holding the most
of them, and measures, by the journal's (the database's) times, how long
after the kill each of its runs was leased by another node. The killed
node is restarted and the runs cancelled before the next of --kills
rounds. Reports the runs moved and the failover time p50 and max against
the target, the lease TTL + 1 s. Use a scratch database.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Store == "" {
				opts.Store = stdio.Getenv("BELAY_STORE")
			}
			dir, err := benchDir(stdio, opts.Dir, opts.Data)
			if err != nil {
				return err
			}
			bin := opts.Bin
			if bin == "" {
				if bin, err = os.Executable(); err != nil {
					return fmt.Errorf("bench: %w", err)
				}
			}
			res, err := bench.Failover(cmd.Context(), bench.FailoverConfig{
				Bin: bin, Dir: dir, Store: opts.Store, Nodes: opts.Nodes, Runs: opts.Runs, Kills: opts.Kills, LeaseTTL: opts.LeaseTTL,
				Progress: func(s string) { fmt.Fprintf(stdio.Err, "… %s\n", s) },
			})
			if err != nil {
				return err
			}
			if opts.JSON {
				return writeJSON(stdio.Out, res)
			}
			w := tabwriter.NewWriter(stdio.Out, 2, 4, 2, ' ', 0)
			fmt.Fprintf(w, "failover bench: %d nodes, store %s, lease TTL %v, %d kills\n\n", res.Nodes, res.Store, opts.LeaseTTL, res.Kills)
			fmt.Fprintln(w, "runs moved\tp50\tmax\ttarget (TTL + 1 s)")
			fmt.Fprintf(w, "%d\t%.0f ms\t%.0f ms\t%.0f ms\n", res.Moved, res.P50Millis, res.MaxMillis, res.TargetMillis)
			return w.Flush()
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Store, "store", "", "postgres://USER@HOST/DB (a scratch database; default $BELAY_STORE)")
	f.StringVar(&opts.Bin, "bin", "", "the belay executable the nodes run (default: this one)")
	f.IntVar(&opts.Nodes, "nodes", 3, "nodes serving the database")
	f.IntVar(&opts.Runs, "runs", 30, "runs sent before each kill")
	f.IntVar(&opts.Kills, "kills", 3, "nodes killed, one after another")
	f.DurationVar(&opts.LeaseTTL, "lease-ttl", 5*time.Second, "the nodes' run lease TTL")
	f.StringVar(&opts.Dir, "dir", "", "scratch directory for the nodes' data directories (default: inside the data directory)")
	f.StringVar(&opts.Data, "data", "", "data directory (default $BELAY_HOME, $XDG_STATE_HOME/belay, ~/.local/state/belay)")
	f.BoolVar(&opts.JSON, "json", false, "print JSON")
	return cmd
}
