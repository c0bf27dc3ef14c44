package cli

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/belayhq/belay/internal/app/bench"
)

type benchWatchOptions struct {
	Subscribers int
	Posts       int
	Interval    time.Duration
	Watchers    int
	Sessions    int
	Dir         string
	Data        string
	JSON        bool
}

func newBenchWatchCmd(stdio Stdio) *cobra.Command {
	var opts benchWatchOptions
	cmd := &cobra.Command{
		Use:   "watch",
		Short: "Measure live streams: fan-out latency to many subscribers, and what a watcher costs",
		Long: `Starts a daemon (its own process) and opens --subscribers SSE streams on
one session, then appends --posts events to it, one every --interval, and
reports the time from each event's append (its journal timestamp) to its
arrival at each subscriber (p50, p99, max), checking that every subscriber
got every event exactly once. Beside it, from the same run, the floor: the
same fan-out (subscribers, events, interval, frame size) over bare unix
sockets, a goroutine per stream writing each event and a reader per stream
timing it, with no HTTP, JSON or store: what any server on this machine
would take at least, and belay's latency as a ratio to it. Then opens --watchers streams spread over
--sessions sessions and reports the daemon's open descriptors and resident
memory per watcher. Streams get half of the daemon's connections, and each
stream takes a descriptor in this process too: the open file limit bounds
--watchers.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Subscribers < 1 || opts.Posts < 1 || opts.Interval <= 0 || opts.Watchers < 0 || opts.Sessions < 1 {
				return usagef("belay bench watch --subscribers 1000 --posts 100", "--subscribers, --posts, --interval and --sessions must be positive, --watchers not negative")
			}
			dir, err := benchDir(stdio, opts.Dir, opts.Data)
			if err != nil {
				return err
			}
			exe, err := selfExecutable()
			if err != nil {
				return fmt.Errorf("cannot find the belay executable: %w", err)
			}
			res, err := bench.Fanout(cmd.Context(), bench.FanoutConfig{
				Dir: dir, Exe: exe, Subscribers: opts.Subscribers, Posts: opts.Posts, Interval: opts.Interval,
				Watchers: opts.Watchers, Sessions: opts.Sessions,
				Progress: func(s string) { fmt.Fprintf(stdio.Err, "… %s\n", s) },
			})
			if err != nil {
				return err
			}
			if opts.JSON {
				return writeJSON(stdio.Out, res)
			}
			w := tabwriter.NewWriter(stdio.Out, 2, 4, 2, ' ', 0)
			fmt.Fprintf(w, "fan-out: %d subscribers on one session, %d events (%d deliveries, each once)\n", res.Subscribers, res.Posts, res.Deliveries)
			fmt.Fprintln(w, "append to received\tp50\tp99\tmax")
			fmt.Fprintf(w, "belay (SSE)\t%.2f ms\t%.2f ms\t%.2f ms\n", res.P50Millis, res.P99Millis, res.MaxMillis)
			fmt.Fprintf(w, "floor (bare unix sockets, %d-byte frames)\t%.2f ms\t%.2f ms\t%.2f ms\n", res.FrameBytes, res.FloorP50Millis, res.FloorP99Millis, res.FloorMaxMillis)
			fmt.Fprintf(w, "belay ÷ floor\t%.2f\t%.2f\t\n", res.P50Millis/max(res.FloorP50Millis, 1e-3), res.P99Millis/max(res.FloorP99Millis, 1e-3))
			if res.Watchers > 0 {
				fmt.Fprintf(w, "\nwatchers: %d across %d sessions (connected in %.1f s)\n", res.Watchers, res.Sessions, res.WatchersConnected)
				fmt.Fprintln(w, "daemon fds\tdaemon RSS\tfds per watcher\tRSS per watcher")
				fmt.Fprintf(w, "%d\t%s\t%.2f\t%s\n", res.DaemonFDs, sizeString(res.DaemonRSSBytes), res.WatcherFDs, sizeString(int64(res.WatcherRSSBytes)))
			}
			return w.Flush()
		},
	}
	f := cmd.Flags()
	f.IntVar(&opts.Subscribers, "subscribers", 1000, "streams on the one session")
	f.IntVar(&opts.Posts, "posts", 100, "events appended to it")
	f.DurationVar(&opts.Interval, "interval", 20*time.Millisecond, "time between events")
	f.IntVar(&opts.Watchers, "watchers", 9000, "streams across sessions for the per-watcher cost (0 skips it)")
	f.IntVar(&opts.Sessions, "sessions", 100, "sessions the watchers follow")
	f.StringVar(&opts.Dir, "dir", "", "scratch directory (default: inside the data directory)")
	f.StringVar(&opts.Data, "data", "", dataFlagHelp)
	f.BoolVar(&opts.JSON, "json", false, "print JSON")
	return cmd
}
