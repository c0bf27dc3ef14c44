package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/app/daemon"
	"github.com/belayhq/belay/internal/vfs"
	"github.com/belayhq/belay/provider"
	"github.com/belayhq/belay/provider/fake"
	brt "github.com/belayhq/belay/runtime"
	"github.com/belayhq/belay/store"
	"github.com/belayhq/belay/store/fsstore"
	"github.com/belayhq/belay/store/pgstore"
)

// RunsConfig configures the runs benchmark.
type RunsConfig struct {
	// Dir is where the scratch data directories go.
	Dir string
	// Runs to submit and complete, spread over Sessions.
	Runs     int
	Sessions int
	// Submitters submit concurrently.
	Submitters int
	// IdleSessions is how many idle sessions to load for the memory
	// measurement (0 skips it).
	IdleSessions int
	// Sync is the store's sync mode (fsstore.SyncFile or SyncFilesystem).
	Sync string
	// Store is "" or "file:" (the embedded store in a scratch directory)
	// or a postgres:// URL (pgstore; migrated if needed, its sessions
	// left in the database).
	Store string
	// Nodes runs that many runtimes, each with its own store (its own
	// connection pool), over one PostgreSQL database (postgres:// only);
	// the submitters are spread over them.
	Nodes int
	// Batch > 0 submits the runs in batches of that many per call
	// (runtime.SubmitBatch, the path of POST /v1/runs:batch) instead of
	// one per call.
	Batch    int
	Progress func(string)
}

// RunsResult is `belay bench runs --json`.
type RunsResult struct {
	Runs        int     `json:"runs"`
	Sessions    int     `json:"sessions"`
	Submitters  int     `json:"submitters"`
	Sync        string  `json:"sync"`
	Store       string  `json:"store"`
	Nodes       int     `json:"nodes"`
	Batch       int     `json:"batch,omitempty"`
	RunsPerSec  float64 `json:"runs_per_sec"`
	P50Millis   float64 `json:"submit_to_complete_p50_ms"`
	P99Millis   float64 `json:"submit_to_complete_p99_ms"`
	SyncsPerRun float64 `json:"journal_events_per_run"`
	// CommitsPerRun is how many synced journal commits (each one
	// fdatasync of a session's journal, or one wait for a shared syncfs)
	// the runs took, per run; file store only.
	CommitsPerRun float64 `json:"synced_commits_per_run,omitempty"`
	// The raw baseline, measured in the same run on the same filesystem:
	// 4 KiB append + fdatasync loops on one file, and on Submitters files
	// at once. RunsPerFsync is RunsPerSec over FsyncPerSec: the figure that
	// reads the same on a faster disk.
	FsyncPerSec         float64 `json:"fdatasync_per_sec"`
	ParallelFsyncPerSec float64 `json:"parallel_fdatasync_per_sec"`
	RunsPerFsync        float64 `json:"runs_per_fdatasync"`
	// Idle sessions: RSS growth after loading them, per session.
	IdleSessions      int     `json:"idle_sessions,omitempty"`
	IdleRSSBytes      int64   `json:"idle_rss_bytes,omitempty"`
	IdleBytesPerSess  float64 `json:"idle_rss_bytes_per_session,omitempty"`
	IdleLoadSeconds   float64 `json:"idle_load_seconds,omitempty"`
	IdleOpenJournals  int     `json:"idle_open_files,omitempty"`
	IdleCreateSeconds float64 `json:"idle_create_seconds,omitempty"`
}

// Runs runs the end-to-end runs benchmark: durable no-op runs through the
// fake provider with zero latency, submitted and completed.
func Runs(ctx context.Context, cfg RunsConfig) (*RunsResult, error) {
	if cfg.Runs <= 0 {
		cfg.Runs = 20000
	}
	if cfg.Sessions <= 0 {
		cfg.Sessions = 1000
	}
	if cfg.Submitters <= 0 {
		cfg.Submitters = 16
	}
	if cfg.Progress == nil {
		cfg.Progress = func(string) {}
	}
	root, err := os.MkdirTemp(cfg.Dir, "belay-bench-runs-")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer os.RemoveAll(root)
	if cfg.Sync == "" {
		cfg.Sync = fsstore.SyncFile
	}
	if cfg.Nodes <= 0 {
		cfg.Nodes = 1
	}
	res := &RunsResult{Runs: cfg.Runs, Sessions: cfg.Sessions, Submitters: cfg.Submitters, Sync: cfg.Sync, Store: "file", Nodes: cfg.Nodes, Batch: cfg.Batch}
	kind, err := daemon.StoreKind(cfg.Store)
	if err != nil {
		return nil, err
	}
	if cfg.Nodes > 1 && kind != "postgres" {
		return nil, fmt.Errorf("%w: bench: --nodes above 1 needs --store postgres://... (the file store has one node)", belay.ErrInvalid)
	}
	if kind == "postgres" {
		res.Store, res.Sync = pgstore.Redact(cfg.Store), ""
	}
	cfg.Progress("measuring the raw fdatasync rate of the filesystem (baseline)")
	if err := fsyncBaseline(filepath.Join(root, "baseline"), cfg.Submitters, res); err != nil {
		return nil, err
	}
	if err := benchRuns(ctx, cfg, filepath.Join(root, "runs"), res); err != nil {
		return nil, err
	}
	if res.FsyncPerSec > 0 {
		res.RunsPerFsync = res.RunsPerSec / res.FsyncPerSec
	}
	if cfg.IdleSessions > 0 && res.Store == "file" {
		if err := benchIdle(ctx, cfg, filepath.Join(root, "idle"), res); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// fsyncBaseline measures the filesystem's fdatasync rate, serial on one
// file and parallel on files files, for a second each.
func fsyncBaseline(dir string, files int, res *RunsResult) error {
	const size, d = 4 << 10, time.Second
	n, took, err := rawBaseline(filepath.Join(dir, "one"), 1, 1, d, size)
	if err != nil {
		return fmt.Errorf("bench: baseline: %w", err)
	}
	res.FsyncPerSec = float64(n) / took.Seconds()
	n, took, err = rawBaseline(filepath.Join(dir, "many"), files, 1, d, size)
	if err != nil {
		return fmt.Errorf("bench: baseline: %w", err)
	}
	res.ParallelFsyncPerSec = float64(n) / took.Seconds()
	return os.RemoveAll(dir)
}

// openRunsStore opens the store the runs bench runs on; commits counts
// the file store's synced commits.
func openRunsStore(ctx context.Context, cfg RunsConfig, dir string, commits *atomic.Int64) (store.Store, error) {
	if pgstore.IsURL(cfg.Store) {
		return pgstore.Open(ctx, cfg.Store, pgstore.Options{Migrate: true, MaxConns: 2 * cfg.Submitters})
	}
	return fsstore.Open(ctx, dir, fsstore.Options{MaxOpen: cfg.Sessions + 64, Sync: cfg.Sync,
		ObserveSync: func(time.Duration) { commits.Add(1) }})
}

func benchRuns(ctx context.Context, cfg RunsConfig, dir string, res *RunsResult) error {
	var commits atomic.Int64
	var (
		mu       sync.Mutex
		submitAt = map[string]time.Time{}
		lat      = make([]float64, 0, cfg.Runs)
		ended    atomic.Int64
		allDone  = make(chan struct{})
		lastEnd  atomic.Int64
	)
	onEnd := func(run belay.Run) {
		now := time.Now()
		mu.Lock()
		if t, ok := submitAt[run.ID]; ok {
			lat = append(lat, float64(now.Sub(t).Microseconds())/1000)
		}
		mu.Unlock()
		lastEnd.Store(now.UnixNano())
		if ended.Add(1) == int64(cfg.Runs) {
			close(allDone)
		}
	}
	// One store and runtime per node, over one database.
	stores := make([]store.Store, cfg.Nodes)
	rts := make([]*brt.Runtime, cfg.Nodes)
	for n := range cfg.Nodes {
		st, err := openRunsStore(ctx, cfg, dir, &commits)
		if err != nil {
			return err
		}
		defer st.Close()
		rt, err := brt.New(brt.Options{
			Store: st, Providers: provider.Registry{"fake": fake.New(fake.Options{})},
			PruneEvery: -1, OnRunEnd: onEnd,
		})
		if err != nil {
			return err
		}
		if err := rt.Start(ctx); err != nil {
			return err
		}
		defer rt.Stop(context.WithoutCancel(ctx))
		stores[n], rts[n] = st, rt
	}
	st := stores[0]

	cfg.Progress(fmt.Sprintf("creating %d sessions", cfg.Sessions))
	sessions := make([]string, cfg.Sessions)
	for i := range sessions {
		sess, err := st.CreateSession(ctx, belay.SessionInput{Provider: "fake"})
		if err != nil {
			return err
		}
		sessions[i] = sess.ID
	}
	beforeSeq := totalSeq(ctx, st, sessions)
	beforeCommits := commits.Load()

	how := "one run per call"
	if cfg.Batch > 0 {
		how = fmt.Sprintf("batches of %d", cfg.Batch)
	}
	cfg.Progress(fmt.Sprintf("submitting %d runs from %d submitters (%s) to %d node(s)", cfg.Runs, cfg.Submitters, how, cfg.Nodes))
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, cfg.Submitters)
	per := max(cfg.Batch, 1)
	for w := 0; w < cfg.Submitters; w++ {
		rt := rts[w%cfg.Nodes]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				from := next.Add(int64(per)) - int64(per)
				if from >= int64(cfg.Runs) {
					return
				}
				n := min(int64(per), int64(cfg.Runs)-from)
				reqs := make([]brt.SubmitRequest, n)
				for k := range reqs {
					reqs[k] = brt.SubmitRequest{Session: sessions[(from+int64(k))%int64(cfg.Sessions)], Prompt: "ok"}
				}
				t := time.Now()
				var runs []belay.Run
				if cfg.Batch > 0 {
					var errs []error
					runs, errs = rt.SubmitBatch(ctx, reqs)
					for _, err := range errs {
						if err != nil {
							errc <- err
							return
						}
					}
				} else {
					run, err := rt.Submit(ctx, reqs[0])
					if err != nil {
						errc <- err
						return
					}
					runs = []belay.Run{run}
				}
				mu.Lock()
				for _, run := range runs {
					submitAt[run.ID] = t
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return err
	}
	select {
	case <-allDone:
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(10 * time.Minute):
		return fmt.Errorf("bench: only %d of %d runs finished", ended.Load(), cfg.Runs)
	}
	elapsed := time.Unix(0, lastEnd.Load()).Sub(start)
	res.RunsPerSec = float64(cfg.Runs) / elapsed.Seconds()
	mu.Lock()
	res.P50Millis = percentile(lat, 0.50)
	res.P99Millis = percentile(lat, 0.99)
	mu.Unlock()
	res.SyncsPerRun = float64(totalSeq(ctx, st, sessions)-beforeSeq) / float64(cfg.Runs)
	res.CommitsPerRun = float64(commits.Load()-beforeCommits) / float64(cfg.Runs)
	return nil
}

func totalSeq(ctx context.Context, st store.Store, sessions []string) uint64 {
	var n uint64
	for _, id := range sessions {
		if s, err := st.Session(ctx, id); err == nil {
			n += s.LastSeq
		}
	}
	return n
}

// benchIdle creates idle sessions (without fsync, to be quick), then
// measures the memory a fresh store takes to hold them.
func benchIdle(ctx context.Context, cfg RunsConfig, dir string, res *RunsResult) error {
	cfg.Progress(fmt.Sprintf("creating %d idle sessions", cfg.IdleSessions))
	t0 := time.Now()
	gen, err := fsstore.Open(ctx, dir, fsstore.Options{FS: vfs.NoSync(vfs.OS)})
	if err != nil {
		return err
	}
	for i := 0; i < cfg.IdleSessions; i++ {
		if _, err := gen.CreateSession(ctx, belay.SessionInput{Provider: "fake", Model: "echo"}); err != nil {
			_ = gen.Close()
			return err
		}
	}
	if err := gen.Close(); err != nil {
		return err
	}
	res.IdleCreateSeconds = time.Since(t0).Seconds()

	cfg.Progress(fmt.Sprintf("loading %d idle sessions", cfg.IdleSessions))
	before := rss()
	t1 := time.Now()
	st, err := fsstore.Open(ctx, dir, fsstore.Options{})
	if err != nil {
		return err
	}
	defer st.Close()
	res.IdleLoadSeconds = time.Since(t1).Seconds()
	debug.FreeOSMemory()
	after := rss()
	list, err := st.Sessions(ctx, belay.SessionFilter{Limit: 1})
	if err != nil || len(list) != 1 {
		return fmt.Errorf("bench: idle sessions not loaded: %v", err)
	}
	runtime.KeepAlive(st)
	res.IdleSessions = cfg.IdleSessions
	res.IdleRSSBytes = after - before
	res.IdleBytesPerSess = float64(after-before) / float64(cfg.IdleSessions)
	res.IdleOpenJournals = openFiles() - 0
	return nil
}

// rss returns the process's resident set size in bytes (Linux), after a GC.
func rss() int64 {
	runtime.GC()
	debug.FreeOSMemory()
	raw, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.Sys)
	}
	f := strings.Fields(string(raw))
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

// openFiles counts the process's open file descriptors (Linux).
func openFiles() int {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(entries)
}
