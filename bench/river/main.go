// Command river is belay's peer bench against River (a PostgreSQL job
// queue for Go): in one run, on one throwaway PostgreSQL cluster, it
// measures the same work through River and through belay, and prints both
// rates and their ratios.
//
// The work: N durable no-op jobs, submitted one per transaction by 16
// submitters, and worked to completion. River: Client.Insert (one
// transaction per job) and a no-op worker. belay: `belay bench runs`
// (runtime.Submit of a no-op run through the fake provider, every state
// change durable) on the embedded file store and on the PostgreSQL store.
// belay on PostgreSQL runs with 1 node and with -nodes N (default 3)
// runtimes, each with its own connection pool, over the one database.
// Then River's InsertMany path (batches of 500) beside belay's batch path
// (runtime.SubmitBatch, the path of POST /v1/runs:batch and `belay send
// --batch`, in batches of the same size) on PostgreSQL. And the floor: the
// same jobs through bare SQL with nothing but a row per job, inserted one
// per transaction by the same submitters and claimed and completed up to
// -workers at a time: what PostgreSQL itself costs per job with this
// submit pattern (floor.go).
//
// Both run in this one process with the Go runtime settings the belay
// binary runs with (GOMAXPROCS, GOGC and GOMEMLIMIT; internal/gotune),
// unless the environment sets them.
//
// It lives in its own Go module so that belay's go.mod never depends on
// River. Run it from the repository:
//
//	cd bench/river && go run . -jobs 20000
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/belayhq/belay/internal/app/bench"
	"github.com/belayhq/belay/internal/gotune"
	"github.com/belayhq/belay/internal/testpg"
)

// riverVersion is the pinned River this bench measures (go.mod).
const riverVersion = "v0.51.1"

type config struct {
	Jobs       int
	Sessions   int
	Submitters int
	Batch      int
	Workers    int
	Nodes      int
	Dir        string
	JSON       bool
	Skip       map[string]bool
}

// Result is one measured path.
type Result struct {
	Name      string  `json:"name"`
	Jobs      int     `json:"jobs"`
	PerSec    float64 `json:"per_sec"`
	P50Millis float64 `json:"submit_to_complete_p50_ms"`
	P99Millis float64 `json:"submit_to_complete_p99_ms"`
	// ClientMicros and DatabaseMicros are the CPU time per job, from the
	// first submit to the last completion, of this process (the engine
	// measured, with its submitters and pool) and of the PostgreSQL
	// server.
	ClientMicros   float64 `json:"client_cpu_us_per_job"`
	DatabaseMicros float64 `json:"database_cpu_us_per_job,omitempty"`
	// NoDatabase: the path does not use PostgreSQL (belay's file store).
	NoDatabase bool   `json:"-"`
	Note       string `json:"note,omitempty"`
	Unmeasured bool   `json:"unmeasured,omitempty"`
}

// Report is the whole bench's output (-json).
type Report struct {
	River      string            `json:"river_version"`
	Postgres   string            `json:"postgres_version"`
	Jobs       int               `json:"jobs"`
	Submitters int               `json:"submitters"`
	Workers    int               `json:"river_max_workers"`
	GOMAXPROCS int               `json:"gomaxprocs"`
	GOGC       int               `json:"gogc"`
	Results    []Result          `json:"results"`
	Ratios     map[string]string `json:"ratios"`
}

func main() {
	var cfg config
	var skip string
	flag.IntVar(&cfg.Jobs, "jobs", 20000, "jobs (runs) per path")
	flag.IntVar(&cfg.Sessions, "sessions", 1000, "belay sessions the runs are spread over")
	flag.IntVar(&cfg.Submitters, "submitters", 16, "concurrent submitters, one job per transaction each")
	flag.IntVar(&cfg.Batch, "batch", 500, "River InsertMany batch size")
	// River fetches at most MaxWorkers jobs per fetch and fetches at most
	// once per FetchCooldown (100 ms by default): MaxWorkers 100 capped it
	// at about 1,000 jobs/s on any machine, which measured the cap, not
	// River. 1,000 leaves the cap (10,000 jobs/s) above what it reaches.
	flag.IntVar(&cfg.Workers, "workers", 1000, "River MaxWorkers of the default queue (River works at most MaxWorkers jobs per 100 ms fetch cooldown)")
	flag.IntVar(&cfg.Nodes, "nodes", 3, "belay nodes (runtimes with their own pools) of the multi-node PostgreSQL path")
	flag.StringVar(&cfg.Dir, "dir", "", "scratch directory for belay's file store (default: the system temp dir)")
	flag.StringVar(&skip, "skip", "", "comma-separated paths to skip: river, floor, river-batch, belay-file, belay-pg, belay-pg-nodes, belay-batch")
	flag.BoolVar(&cfg.JSON, "json", false, "print JSON")
	flag.Parse()
	// Both engines run in this one process, with the Go runtime settings
	// the belay binary runs with (the environment's win).
	gotune.Apply(os.Getenv)
	cfg.Skip = map[string]bool{}
	for _, s := range strings.Split(skip, ",") {
		if s = strings.TrimSpace(s); s != "" {
			cfg.Skip[s] = true
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "… "+format+"\n", args...)
}

func run(ctx context.Context, cfg config) error {
	progress("starting a throwaway PostgreSQL (fsync on)")
	pg, err := testpg.New(ctx, testpg.Options{Fsync: true, SharedBuffers: "128MB", MaxConnections: 200})
	if err != nil {
		return err
	}
	defer func() {
		if err := pg.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
		}
	}()
	rep := Report{River: riverVersion, Jobs: cfg.Jobs, Submitters: cfg.Submitters, Workers: cfg.Workers, GOMAXPROCS: runtime.GOMAXPROCS(0), GOGC: gotune.Current().GCPercent, Ratios: map[string]string{}}
	byName := map[string]Result{}
	add := func(r Result) {
		rep.Results = append(rep.Results, r)
		byName[r.Name] = r
	}

	if !cfg.Skip["river"] {
		r, version, err := benchRiver(ctx, pg, cfg, false)
		if err != nil {
			return fmt.Errorf("river: %w", err)
		}
		rep.Postgres = version
		add(r)
	}
	if !cfg.Skip["floor"] {
		if err := settle(ctx, pg); err != nil {
			return err
		}
		r, err := benchFloor(ctx, pg, cfg)
		if err != nil {
			return fmt.Errorf("floor: %w", err)
		}
		add(r)
	}
	if !cfg.Skip["belay-file"] {
		if err := settle(ctx, pg); err != nil {
			return err
		}
		progress("belay on the embedded file store")
		res, err := bench.Runs(ctx, bench.RunsConfig{Dir: cfg.Dir, Runs: cfg.Jobs, Sessions: cfg.Sessions, Submitters: cfg.Submitters})
		if err != nil {
			return fmt.Errorf("belay file store: %w", err)
		}
		r := Result{Name: "belay-file", Jobs: cfg.Jobs, PerSec: res.RunsPerSec, P50Millis: res.P50Millis, P99Millis: res.P99Millis,
			ClientMicros: res.CPUMicrosPerRun, NoDatabase: true, Note: fmt.Sprintf("%.1f durable events per run", res.SyncsPerRun)}
		add(r)
	}
	// belay on PostgreSQL, each path on a fresh database of the cluster.
	belayPG := func(name string, nodes, batch int, note string) error {
		if cfg.Skip[name] {
			return nil
		}
		if err := settle(ctx, pg); err != nil {
			return err
		}
		progress("%s: belay on PostgreSQL, %d node(s)", name, nodes)
		db, err := pg.CreateDatabase(ctx)
		if err != nil {
			return err
		}
		res, err := bench.Runs(ctx, bench.RunsConfig{Dir: cfg.Dir, Store: pg.URL(db), Runs: cfg.Jobs, Sessions: cfg.Sessions, Submitters: cfg.Submitters, Nodes: nodes, Batch: batch, DatabaseCPU: pg.CPU})
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		r := Result{Name: name, Jobs: cfg.Jobs, PerSec: res.RunsPerSec, P50Millis: res.P50Millis, P99Millis: res.P99Millis,
			ClientMicros: res.CPUMicrosPerRun, DatabaseMicros: res.DatabaseCPUMicrosPerRun, Note: fmt.Sprintf("%.1f durable events per run, %d node(s)%s", res.SyncsPerRun, nodes, note)}
		add(r)
		return nil
	}
	if err := belayPG("belay-pg", 1, 0, ""); err != nil {
		return err
	}
	if cfg.Nodes > 1 {
		if err := belayPG("belay-pg-nodes", cfg.Nodes, 0, ""); err != nil {
			return err
		}
	}
	if !cfg.Skip["river-batch"] {
		if err := settle(ctx, pg); err != nil {
			return err
		}
		r, _, err := benchRiver(ctx, pg, cfg, true)
		if err != nil {
			return fmt.Errorf("river InsertMany: %w", err)
		}
		add(r)
	}
	if err := belayPG("belay-batch", 1, cfg.Batch, fmt.Sprintf(", SubmitBatch in batches of %d", cfg.Batch)); err != nil {
		return err
	}
	ratio := func(key, a, b string) {
		ra, oka := byName[a]
		rb, okb := byName[b]
		if oka && okb && rb.PerSec > 0 && !ra.Unmeasured {
			rep.Ratios[key] = fmt.Sprintf("%.2fx", ra.PerSec/rb.PerSec)
		}
	}
	ratio("floor / river", "floor", "river")
	ratio("belay-file / river", "belay-file", "river")
	ratio("belay-pg / river", "belay-pg", "river")
	ratio(fmt.Sprintf("belay-pg-nodes (%d) / river", cfg.Nodes), "belay-pg-nodes", "river")
	ratio("belay-batch / river-batch", "belay-batch", "river-batch")
	return print(rep, cfg.JSON)
}

// settle leaves the cluster quiet before the next path: the paths before
// left dead rows and dirty pages that autovacuum and the checkpointer
// would otherwise work through during the next path's timed phase (on a
// 2-core machine, CPU and disk taken from whichever engine runs then).
// Every database is vacuumed and analyzed, then the cluster checkpoints.
func settle(ctx context.Context, pg *testpg.Cluster) error {
	progress("letting PostgreSQL settle (VACUUM ANALYZE, CHECKPOINT)")
	admin, err := pgxpool.New(ctx, pg.URL("postgres"))
	if err != nil {
		return fmt.Errorf("settle: %w", err)
	}
	defer admin.Close()
	rows, err := admin.Query(ctx, `SELECT datname FROM pg_database WHERE datallowconn AND NOT datistemplate AND datname <> 'postgres'`)
	if err != nil {
		return fmt.Errorf("settle: %w", err)
	}
	var dbs []string
	for rows.Next() {
		var db string
		if err := rows.Scan(&db); err != nil {
			rows.Close()
			return fmt.Errorf("settle: %w", err)
		}
		dbs = append(dbs, db)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("settle: %w", err)
	}
	for _, db := range dbs {
		pool, err := pgxpool.New(ctx, pg.URL(db))
		if err != nil {
			return fmt.Errorf("settle %s: %w", db, err)
		}
		_, err = pool.Exec(ctx, `VACUUM ANALYZE`)
		pool.Close()
		if err != nil {
			return fmt.Errorf("settle %s: %w", db, err)
		}
	}
	if _, err := admin.Exec(ctx, `CHECKPOINT`); err != nil {
		return fmt.Errorf("settle: %w", err)
	}
	return nil
}

func print(rep Report, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	w := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintf(w, "peer bench: %d jobs, %d submitters (one job per transaction), River %s (MaxWorkers %d), %s, GOMAXPROCS %d and GOGC %d for both\n\n", rep.Jobs, rep.Submitters, rep.River, rep.Workers, rep.Postgres, rep.GOMAXPROCS, rep.GOGC)
	fmt.Fprintln(w, "path\tjobs/s\tp50\tp99\tCPU/job: engine\tPostgreSQL\tnote")
	for _, r := range rep.Results {
		if r.Unmeasured {
			fmt.Fprintf(w, "%s\t-\t-\t-\t-\t-\t%s\n", r.Name, r.Note)
			continue
		}
		db := fmt.Sprintf("%.0f µs", r.DatabaseMicros)
		if r.NoDatabase {
			db = "-"
		}
		fmt.Fprintf(w, "%s\t%.0f\t%.1f ms\t%.1f ms\t%.0f µs\t%s\t%s\n", r.Name, r.PerSec, r.P50Millis, r.P99Millis, r.ClientMicros, db, r.Note)
	}
	if len(rep.Ratios) > 0 {
		fmt.Fprintln(w)
		keys := make([]string, 0, len(rep.Ratios))
		for k := range rep.Ratios {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "%s\t%s\n", k, rep.Ratios[k])
		}
	}
	return w.Flush()
}

// NoOpArgs is River's no-op job.
type NoOpArgs struct{}

// Kind names the job kind.
func (NoOpArgs) Kind() string { return "noop" }

type noOpWorker struct {
	river.WorkerDefaults[NoOpArgs]
}

func (noOpWorker) Work(context.Context, *river.Job[NoOpArgs]) error { return nil }

// benchRiver runs River on a fresh database: N no-op jobs inserted one per
// transaction by the submitters (or, batched, with InsertMany in batches
// of cfg.Batch), worked to completion.
func benchRiver(ctx context.Context, pg *testpg.Cluster, cfg config, batched bool) (Result, string, error) {
	name := "river"
	if batched {
		name = "river-batch"
	}
	progress("%s: %d jobs", name, cfg.Jobs)
	db, err := pg.CreateDatabase(ctx)
	if err != nil {
		return Result{}, "", err
	}
	pcfg, err := pgxpool.ParseConfig(pg.URL(db))
	if err != nil {
		return Result{}, "", err
	}
	pcfg.MaxConns = int32(2*cfg.Submitters + 8)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return Result{}, "", err
	}
	defer pool.Close()
	var version string
	if err := pool.QueryRow(ctx, `SHOW server_version`).Scan(&version); err != nil {
		return Result{}, "", err
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return Result{}, "", err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return Result{}, "", err
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &noOpWorker{})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cfg.Workers}},
		Workers: workers,
	})
	if err != nil {
		return Result{}, "", err
	}
	events, cancelSub := client.SubscribeConfig(&river.SubscribeConfig{Kinds: []river.EventKind{river.EventKindJobCompleted}, ChanSize: cfg.Jobs + 1000})
	defer cancelSub()
	if err := client.Start(ctx); err != nil {
		return Result{}, "", err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = client.Stop(sctx)
	}()

	var (
		lat      = make([]float64, 0, cfg.Jobs)
		lastDone time.Time
		doneAll  = make(chan struct{})
	)
	go func() {
		n := 0
		for ev := range events {
			if ev.Job == nil || ev.Job.FinalizedAt == nil {
				continue
			}
			lat = append(lat, float64(ev.Job.FinalizedAt.Sub(ev.Job.CreatedAt).Microseconds())/1000)
			n++
			if n == cfg.Jobs {
				lastDone = time.Now()
				close(doneAll)
				return
			}
		}
	}()

	db0, err := pg.CPU()
	if err != nil {
		return Result{}, "", err
	}
	client0 := processCPU()
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, cfg.Submitters)
	for w := 0; w < cfg.Submitters; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if batched {
					from := next.Add(int64(cfg.Batch)) - int64(cfg.Batch)
					if from >= int64(cfg.Jobs) {
						return
					}
					n := min(int64(cfg.Batch), int64(cfg.Jobs)-from)
					params := make([]river.InsertManyParams, n)
					for i := range params {
						params[i] = river.InsertManyParams{Args: NoOpArgs{}}
					}
					if _, err := client.InsertMany(ctx, params); err != nil {
						errc <- err
						return
					}
					continue
				}
				if next.Add(1) > int64(cfg.Jobs) {
					return
				}
				if _, err := client.Insert(ctx, NoOpArgs{}, nil); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return Result{}, "", err
	}
	select {
	case <-doneAll:
	case <-ctx.Done():
		return Result{}, "", ctx.Err()
	case <-time.After(10 * time.Minute):
		return Result{}, "", errors.New("jobs did not complete within 10 minutes")
	}
	elapsed := lastDone.Sub(start)
	clientCPU := processCPU() - client0
	dbCPU, err := pg.CPU()
	if err != nil {
		return Result{}, "", err
	}
	// The table is the truth: every job completed, once.
	var completed int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&completed); err != nil {
		return Result{}, "", err
	}
	if completed != cfg.Jobs {
		return Result{}, "", fmt.Errorf("%d of %d jobs completed", completed, cfg.Jobs)
	}
	sort.Float64s(lat)
	r := Result{Name: name, Jobs: cfg.Jobs, PerSec: float64(cfg.Jobs) / elapsed.Seconds(), P50Millis: pct(lat, 0.5), P99Millis: pct(lat, 0.99),
		ClientMicros: float64(clientCPU.Microseconds()) / float64(cfg.Jobs), DatabaseMicros: float64((dbCPU - db0).Microseconds()) / float64(cfg.Jobs)}
	if batched {
		r.Note = fmt.Sprintf("InsertMany, batches of %d", cfg.Batch)
	} else {
		r.Note = "Insert, one transaction per job"
	}
	return r, version, nil
}

// processCPU is the CPU time (user and system) this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func pct(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * p)
	return sorted[i]
}
