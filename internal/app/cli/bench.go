package cli

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/belayhq/belay/internal/app/bench"
	"github.com/belayhq/belay/internal/datadir"
	"github.com/belayhq/belay/store/pgstore"
)

func newBenchCmd(stdio Stdio) *cobra.Command {
	var cpuProfile, memProfile string
	var profile *os.File
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure belay on this machine",
		Long: `Measure belay on this machine. Every bench prints a baseline measured in
the same run, so its results read as ratios on any machine.

--cpuprofile FILE writes a CPU profile of the whole bench, --memprofile
FILE a profile of the memory it allocated (Go's pprof format; read them
with "go tool pprof FILE", -sample_index=alloc_space for the bytes
allocated).`,
		Args: noArgs,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			if cpuProfile == "" {
				return nil
			}
			f, err := os.Create(cpuProfile)
			if err != nil {
				return fmt.Errorf("bench: --cpuprofile: %w", err)
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				f.Close()
				return fmt.Errorf("bench: --cpuprofile: %w", err)
			}
			profile = f
			return nil
		},
	}
	cmd.PersistentFlags().StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the bench to this file")
	cmd.PersistentFlags().StringVar(&memProfile, "memprofile", "", "write a profile of the memory the bench allocated to this file")
	cmd.AddCommand(newBenchJournalCmd(stdio), newBenchRunsCmd(stdio), newBenchRepairCmd(stdio), newBenchReadCmd(stdio), newBenchExportCmd(stdio), newBenchWatchCmd(stdio), newBenchBrowserCmd(stdio), newBenchListCmd(stdio), newBenchFailoverCmd(stdio))
	// The profile is written however the bench ends (cobra skips a
	// post-run hook when the command fails).
	stop := func() error {
		var errs []error
		if profile != nil {
			pprof.StopCPUProfile()
			err := profile.Close()
			profile = nil
			if err != nil {
				errs = append(errs, fmt.Errorf("bench: --cpuprofile: %w", err))
			} else {
				fmt.Fprintf(stdio.Err, "CPU profile written to %s (go tool pprof %s)\n", cpuProfile, cpuProfile)
			}
		}
		if memProfile != "" {
			if err := writeAllocs(memProfile); err != nil {
				errs = append(errs, fmt.Errorf("bench: --memprofile: %w", err))
			} else {
				fmt.Fprintf(stdio.Err, "memory profile written to %s (go tool pprof -sample_index=alloc_space %s)\n", memProfile, memProfile)
			}
		}
		return errors.Join(errs...)
	}
	for _, sub := range cmd.Commands() {
		run := sub.RunE
		if run == nil {
			panic("bench: subcommand " + sub.Name() + " has no RunE") // every bench has one: the profile is stopped there
		}
		sub.RunE = func(c *cobra.Command, args []string) error {
			err := run(c, args)
			return errors.Join(err, stop())
		}
	}
	return cmd
}

// writeAllocs writes the heap profile (what was allocated since the
// process started, and what is live after a collection) to path.
func writeAllocs(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC() // the live heap as of now
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

type benchRunsOptions struct {
	Runs       int
	Sessions   int
	Submitters int
	Idle       int
	InFlight   int
	Sync       string
	Store      string
	Nodes      int
	Batch      int
	Paced      float64
	Dir        string
	Data       string
	JSON       bool
}

func newBenchRunsCmd(stdio Stdio) *cobra.Command {
	var opts benchRunsOptions
	cmd := &cobra.Command{
		Use:   "runs",
		Short: "Measure end-to-end durable runs per second, submit-to-complete latency, and memory per idle session",
		Long: `Runs durable no-op runs end to end (the fake provider with zero latency)
through the runtime and the embedded store on the data directory's
filesystem: every run is created, leased, started, completed and announced
in its session's inbox, each point a crash must not take back fsynced.
Reports runs per second, submit-to-complete latency p50/p99, and the journal
events and synced commits (fdatasyncs) per run. Then it creates --idle idle
sessions, --in-flight of them with a queued run, closes that store and
reports what a restart takes: the load time after the clean close (from the
store index), the resident memory the sessions take, the load time after
a kill (the index older than the journals of the sessions with a run, which
are opened from their journals) and the load time without the index
(every journal opened).

With --store postgres://USER@HOST/DB the runs go through the PostgreSQL
store instead (its schema is migrated if needed; the bench's sessions stay
in the database; the idle-memory part is skipped, it measures the file
store). Use a scratch database. --nodes N runs N runtimes, each with its
own connection pool, over that one database (the submitters spread over
them), as N daemons would.

--batch N submits the runs N at a time (runtime.SubmitBatch, the path of
POST /v1/runs:batch and belay send --batch) instead of one per call.

--paced 0.5 adds a second phase after the peak one: as many runs again,
offered at half the peak rate just measured, open loop (each submit at its
scheduled moment, its latency counted from that moment, so a submit that
falls behind shows), and reports what came of it: the latency at 50% of
peak load.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runBenchRuns(cmd, stdio, opts) },
	}
	f := cmd.Flags()
	f.IntVar(&opts.Runs, "runs", 20000, "runs to submit")
	f.IntVar(&opts.Sessions, "sessions", 1000, "sessions the runs are spread over")
	f.IntVar(&opts.Submitters, "submitters", 16, "concurrent submitters")
	f.IntVar(&opts.Idle, "idle", 100000, "idle sessions for the memory and restart measurement (0 to skip)")
	f.IntVar(&opts.InFlight, "in-flight", 10000, "of the idle sessions, how many hold a queued run at the restart")
	f.StringVar(&opts.Sync, "sync", "log", "store sync mode: log (the store-wide commit log), file (fdatasync per journal) or filesystem (shared syncfs)")
	f.StringVar(&opts.Store, "store", "", "store to bench: file: (default) or postgres://USER@HOST/DB (a scratch database)")
	f.IntVar(&opts.Nodes, "nodes", 1, "runtimes over the one database, each with its own pool (postgres:// only)")
	f.IntVar(&opts.Batch, "batch", 0, "submit the runs in batches of this many (0: one per call)")
	f.Float64Var(&opts.Paced, "paced", 0, "then offer as many runs again at this fraction of the peak rate, open loop (0: skip)")
	f.StringVar(&opts.Dir, "dir", "", "scratch directory (default: inside the data directory)")
	f.StringVar(&opts.Data, "data", "", "data directory (default $BELAY_HOME, $XDG_STATE_HOME/belay, ~/.local/state/belay)")
	f.BoolVar(&opts.JSON, "json", false, "print JSON")
	return cmd
}

func runBenchRuns(cmd *cobra.Command, stdio Stdio, opts benchRunsOptions) error {
	if opts.Runs < 1 || opts.Sessions < 1 || opts.Submitters < 1 || opts.Idle < 0 || opts.InFlight < 0 || opts.Nodes < 1 || opts.Batch < 0 {
		return usagef("belay bench runs --runs 20000 --sessions 1000", "--runs, --sessions, --submitters and --nodes must be at least 1, --idle, --in-flight and --batch at least 0")
	}
	if opts.Paced < 0 || opts.Paced >= 1 {
		return usagef("belay bench runs --paced 0.5", "--paced is a fraction of the peak rate: above 0 and below 1 (0 skips the paced phase)")
	}
	if opts.Nodes > 1 && !pgstore.IsURL(opts.Store) {
		return usagef("belay bench runs --store postgres://USER@HOST/DB --nodes 3", "--nodes above 1 needs --store postgres://... (the file store has one node)")
	}
	dir, err := benchDir(stdio, opts.Dir, opts.Data)
	if err != nil {
		return err
	}
	res, err := bench.Runs(cmd.Context(), bench.RunsConfig{
		Dir: dir, Runs: opts.Runs, Sessions: opts.Sessions, Submitters: opts.Submitters, IdleSessions: opts.Idle, InFlight: opts.InFlight, Sync: opts.Sync, Store: opts.Store,
		Nodes: opts.Nodes, Batch: opts.Batch, Paced: opts.Paced,
		Progress: func(s string) { fmt.Fprintf(stdio.Err, "… %s\n", s) },
	})
	if err != nil {
		return err
	}
	if opts.JSON {
		return writeJSON(stdio.Out, res)
	}
	w := tabwriter.NewWriter(stdio.Out, 2, 4, 2, ' ', 0)
	how := "one run per submit"
	if res.Batch > 0 {
		how = fmt.Sprintf("batches of %d", res.Batch)
	}
	fmt.Fprintf(w, "runs bench: %d runs over %d sessions, %d submitters (%s), store %s, %d node(s)\n", res.Runs, res.Sessions, res.Submitters, how, res.Store, res.Nodes)
	limit := "none"
	if res.GOMEMLIMIT > 0 {
		limit = sizeString(res.GOMEMLIMIT)
	}
	fmt.Fprintf(w, "Go runtime: GOMAXPROCS %d on %d CPUs, GOGC %d, GOMEMLIMIT %s\n\n", res.GOMAXPROCS, res.CPUs, res.GOGC, limit)
	fmt.Fprintln(w, "runs/s\tp50\tp99\tjournal events/run\tsyncs/run\tCPU/run")
	commits := "-" // not counted for PostgreSQL
	if res.CommitsPerRun > 0 {
		commits = fmt.Sprintf("%.2f", res.CommitsPerRun)
	}
	fmt.Fprintf(w, "%.0f\t%.1f ms\t%.1f ms\t%.1f\t%s\t%.0f µs\n", res.RunsPerSec, res.P50Millis, res.P99Millis, res.SyncsPerRun, commits, res.CPUMicrosPerRun)
	if res.SyncP99Millis > 0 {
		fmt.Fprintf(w, "sync latency\tp50 %.1f ms\tp99 %.1f ms\n", res.SyncP50Millis, res.SyncP99Millis)
	}
	fmt.Fprintf(w, "waiting for a CPU\t\tp99 %.1f ms\n", res.SchedWaitP99Millis)
	if res.Paced > 0 {
		fmt.Fprintf(w, "\nat %.0f%% of peak\toffered runs/s\truns/s\tp50\tp99\tsync p99\twaiting for a CPU p99\n", 100*res.Paced)
		fmt.Fprintf(w, "\t%.0f\t%.0f\t%.1f ms\t%.1f ms\t%.1f ms\t%.1f ms\n", res.PacedOffered, res.PacedRunsPerSec, res.PacedP50Millis, res.PacedP99Millis, res.PacedSyncP99Millis, res.PacedSchedWaitP99Millis)
	}
	fmt.Fprintln(w, "\nbaseline (same filesystem, same run)\tfdatasync/s\truns/s ÷ fdatasync/s")
	fmt.Fprintf(w, "1 file, 4 KiB appends\t%.0f\t%.2f\n", res.FsyncPerSec, res.RunsPerFsync)
	fmt.Fprintf(w, "%d files at once\t%.0f\t%.2f\n", res.Submitters, res.ParallelFsyncPerSec, res.RunsPerSec/max(res.ParallelFsyncPerSec, 1))
	if res.IdleSessions > 0 {
		fmt.Fprintln(w, "\nidle sessions\truns in flight\tRSS\tper session\tload time (index)\tafter a kill\tno index\topen files")
		fmt.Fprintf(w, "%d\t%d\t%s\t%.0f B\t%.2f s (%d from index)\t%.2f s (%d from journals)\t%.2f s\t%d\n", res.IdleSessions, res.IdleInFlight, sizeString(deref(res.IdleRSSBytes)), deref(res.IdleBytesPerSess),
			res.IdleLoadSeconds, res.IdleIndexed, res.IdleKillLoadSeconds, res.IdleKillOpened, res.IdleColdLoadSeconds, res.IdleOpenJournals)
	}
	return w.Flush()
}

// benchDir returns the scratch directory: --dir, else the data directory.
func benchDir(stdio Stdio, dir, data string) (string, error) {
	if dir == "" {
		d, err := datadir.Resolve(data, stdio.Getenv)
		if err != nil {
			return "", err
		}
		dir = d
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("bench: %w", err)
	}
	return dir, nil
}

type benchJournalOptions struct {
	Writers   int
	Sessions  int
	Duration  time.Duration
	EventSize int
	OpenSize  string
	Dir       string
	Data      string
	JSON      bool
}

func newBenchJournalCmd(stdio Stdio) *cobra.Command {
	var opts benchJournalOptions
	cmd := &cobra.Command{
		Use:   "journal",
		Short: "Measure durable append throughput, latency, open and seek against a raw fdatasync baseline",
		Long: `Measures the session journal on the filesystem of the data directory:

  - Sync append throughput and p50/p99 latency, for the given writers per
    session and sessions (default: both 64x1 and 4x256), and in the same
    run a raw baseline: plain write+fdatasync loops over the same bytes
    with the same batch size. ratio_vs_raw = journal / raw.
  - Buffered (token delta) append throughput, until everything is synced.
  - Time to open a journal of --open-size with a valid snapshot, and of a
    tenth of that size, to show it does not grow with size; also the full
    scan open time without a snapshot, and the time to read a random seq.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("writers") != cmd.Flags().Changed("sessions") {
				return usagef("belay bench journal --writers 64 --sessions 1", "give --writers and --sessions together, or neither for the standard scenarios")
			}
			return runBenchJournal(cmd, stdio, opts)
		},
	}
	f := cmd.Flags()
	f.IntVar(&opts.Writers, "writers", 0, "concurrent writers per session")
	f.IntVar(&opts.Sessions, "sessions", 0, "sessions (journals)")
	f.DurationVar(&opts.Duration, "duration", 3*time.Second, "length of each timed phase")
	f.IntVar(&opts.EventSize, "event-size", 200, "approximate bytes per event")
	f.StringVar(&opts.OpenSize, "open-size", "1GB", "size of the journal to time open and seek in (0 to skip)")
	f.StringVar(&opts.Dir, "dir", "", "scratch directory (default: inside the data directory, so the same filesystem is measured)")
	f.StringVar(&opts.Data, "data", "", "data directory (default $BELAY_HOME, $XDG_STATE_HOME/belay, ~/.local/state/belay)")
	f.BoolVar(&opts.JSON, "json", false, "print JSON")
	return cmd
}

func runBenchJournal(cmd *cobra.Command, stdio Stdio, opts benchJournalOptions) error {
	openSize, err := parseSize(opts.OpenSize)
	if err != nil {
		return usagef("belay bench journal --open-size 200MB", "--open-size: %v", err)
	}
	if opts.Writers < 0 || opts.Sessions < 0 {
		return usagef("belay bench journal --writers 64 --sessions 1", "--writers and --sessions must be positive")
	}
	dir, err := benchDir(stdio, opts.Dir, opts.Data)
	if err != nil {
		return err
	}
	cfg := bench.JournalConfig{
		Dir: dir, Duration: opts.Duration, EventSize: opts.EventSize, OpenSize: openSize,
		Progress: func(s string) { fmt.Fprintf(stdio.Err, "… %s\n", s) },
	}
	if opts.Writers > 0 {
		cfg.Scenarios = []bench.Scenario{{Writers: opts.Writers, Sessions: opts.Sessions}}
	}
	res, err := bench.Journal(cmd.Context(), cfg)
	if err != nil {
		return err
	}
	if opts.JSON {
		return writeJSON(stdio.Out, res)
	}
	printJournalBench(stdio, res)
	return nil
}

func printJournalBench(stdio Stdio, res *bench.JournalResult) {
	w := tabwriter.NewWriter(stdio.Out, 2, 4, 2, ' ', 0)
	fmt.Fprintf(w, "journal bench: %d-byte events, %s per phase\n\n", res.EventSize, res.Duration)
	fmt.Fprintln(w, "sessions x writers\tsync ev/s\tp50\tp99\tev/commit\traw ev/s\tratio_vs_raw\tbuffered ev/s")
	for _, s := range res.Scenarios {
		fmt.Fprintf(w, "%d x %d\t%.0f\t%s\t%s\t%.1f\t%.0f\t%.2f\t%.0f\n",
			s.Sessions, s.Writers, s.SyncEventsPerSec, micros(s.SyncP50Micros), micros(s.SyncP99Micros),
			s.EventsPerCommit, s.RawEventsPerSec, s.RatioVsRaw, s.BufferedEventsPerSec)
	}
	if res.Open != nil {
		fmt.Fprintln(w, "\njournal size\tevents\topen with snapshot\topen by full scan\tseek random seq")
		for _, o := range res.Open.Sizes {
			fmt.Fprintf(w, "%s\t%d\t%.2f ms\t%.1f ms\t%.1f µs\n", sizeString(o.Bytes), o.Events, o.OpenSnapshotMillis, o.OpenScanMillis, o.SeekMicros)
		}
	}
	_ = w.Flush()
}

func micros(us float64) string {
	if us >= 1000 {
		return fmt.Sprintf("%.1f ms", us/1000)
	}
	return fmt.Sprintf("%.0f µs", us)
}

// parseSize reads sizes like 200MB, 1GB, 512KiB or a plain byte count.
func parseSize(s string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KIB", 1 << 10}, {"MIB", 1 << 20}, {"GIB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSuffix(t, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseFloat(strings.TrimSpace(t), 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a size like 200MB or 1GB", s)
	}
	return int64(n * float64(mult)), nil
}

func sizeString(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2f GB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	}
	return fmt.Sprintf("%d B", n)
}

// deref is *p, or the zero value when p is nil (not measured).
func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
