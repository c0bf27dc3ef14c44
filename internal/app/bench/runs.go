package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/app/daemon"
	"github.com/belayhq/belay/internal/gotune"
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
	// InFlight of the idle sessions (at most all) hold a queued run: the
	// restart measured is one with that much work in flight.
	InFlight int
	// Sync is the store's sync mode (fsstore.SyncLog, SyncFile or SyncFilesystem).
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
	Batch int
	// Paced > 0 runs a second phase after the peak one: the same number
	// of runs offered at Paced times the peak rate measured, open loop
	// (each call at its scheduled moment, whatever the calls before it
	// took; its latency counts from that moment), on the same runtimes
	// and sessions.
	Paced float64
	// DatabaseCPU, when set, returns the database server's CPU time so
	// far (the peer bench's local cluster): the peak phase's share of it
	// is reported per run.
	DatabaseCPU func() (time.Duration, error)
	Progress    func(string)
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
	// CommitsPerRun is how many syncs the runs took, per run: fdatasyncs
	// of the commit log (sync mode log: one serves every session that
	// commits at that moment), of the sessions' journals (file), or waits
	// for a shared syncfs (filesystem); file store only.
	CommitsPerRun float64 `json:"synced_commits_per_run,omitempty"`
	// CPUMicrosPerRun is the CPU time (user and system) this process spent
	// in the peak phase, per run: with the file store, all of belay's
	// work; it reads the same on a busy machine, where runs/s does not.
	CPUMicrosPerRun float64 `json:"cpu_us_per_run"`
	// DatabaseCPUMicrosPerRun is the database server's CPU time in the
	// peak phase, per run (only with RunsConfig.DatabaseCPU).
	DatabaseCPUMicrosPerRun float64 `json:"database_cpu_us_per_run,omitempty"`
	// SyncP50Millis and SyncP99Millis are the latencies of those syncs in
	// the peak phase (PacedSyncP99Millis in the paced one): the part of
	// submit-to-complete that is the disk's; file store only.
	SyncP50Millis      float64 `json:"sync_p50_ms,omitempty"`
	SyncP99Millis      float64 `json:"sync_p99_ms,omitempty"`
	PacedSyncP99Millis float64 `json:"paced_sync_p99_ms,omitempty"`
	// SchedWaitP99Millis (PacedSchedWaitP99Millis in the paced phase) is
	// the p99 of the time this process's goroutines spent runnable, waiting
	// for a P (runtime/metrics /sched/latencies:seconds, at its bucket's
	// upper bound): the part of submit-to-complete that is waiting for a
	// CPU.
	SchedWaitP99Millis      float64 `json:"sched_wait_p99_ms"`
	PacedSchedWaitP99Millis float64 `json:"paced_sched_wait_p99_ms,omitempty"`
	// GOMAXPROCS, CPUs, GOGC and GOMEMLIMIT are what the process ran with
	// (GOGC -1: off; GOMEMLIMIT 0: none).
	GOMAXPROCS int   `json:"gomaxprocs"`
	CPUs       int   `json:"cpus"`
	GOGC       int   `json:"gogc"`
	GOMEMLIMIT int64 `json:"gomemlimit_bytes"`
	// The raw baseline, measured in the same run on the same filesystem:
	// 4 KiB append + fdatasync loops on one file, and on Submitters files
	// at once. RunsPerFsync is RunsPerSec over FsyncPerSec: the figure that
	// reads the same on a faster disk.
	FsyncPerSec         float64 `json:"fdatasync_per_sec"`
	ParallelFsyncPerSec float64 `json:"parallel_fdatasync_per_sec"`
	RunsPerFsync        float64 `json:"runs_per_fdatasync"`
	// Idle sessions: RSS growth after loading them, per session (set
	// when measured: a growth of 0, within a page for a few sessions, is
	// a measurement too).
	IdleSessions     int      `json:"idle_sessions,omitempty"`
	IdleRSSBytes     *int64   `json:"idle_rss_bytes,omitempty"`
	IdleBytesPerSess *float64 `json:"idle_rss_bytes_per_session,omitempty"`
	IdleLoadSeconds  float64  `json:"idle_load_seconds,omitempty"`
	// IdleInFlight is how many of them held a queued run; IdleIndexed how
	// many the load restored from the store index (written by the clean
	// close before it); IdleColdLoadSeconds is the load without the
	// index, every journal opened, as after a crash.
	IdleInFlight        int     `json:"idle_in_flight,omitempty"`
	IdleIndexed         int     `json:"idle_indexed,omitempty"`
	IdleColdLoadSeconds float64 `json:"idle_cold_load_seconds,omitempty"`
	// IdleKillLoadSeconds is the load after a kill whose last index is
	// older than the journals of the sessions with a run in flight
	// (IdleKillOpened sessions opened from their journals).
	IdleKillLoadSeconds float64 `json:"idle_kill_load_seconds,omitempty"`
	IdleKillOpened      int     `json:"idle_kill_opened,omitempty"`
	IdleOpenJournals    int     `json:"idle_open_files,omitempty"`
	IdleCreateSeconds   float64 `json:"idle_create_seconds,omitempty"`
	// The paced phase (Paced > 0): the fraction of the peak and the rate
	// offered, and what came of it.
	Paced           float64 `json:"paced_fraction,omitempty"`
	PacedOffered    float64 `json:"paced_offered_runs_per_sec,omitempty"`
	PacedRunsPerSec float64 `json:"paced_runs_per_sec,omitempty"`
	PacedP50Millis  float64 `json:"paced_submit_to_complete_p50_ms,omitempty"`
	PacedP99Millis  float64 `json:"paced_submit_to_complete_p99_ms,omitempty"`
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
		cfg.Sync = fsstore.SyncLog
	}
	if cfg.Nodes <= 0 {
		cfg.Nodes = 1
	}
	res := &RunsResult{Runs: cfg.Runs, Sessions: cfg.Sessions, Submitters: cfg.Submitters, Sync: cfg.Sync, Store: "file", Nodes: cfg.Nodes, Batch: cfg.Batch,
		CPUs: runtime.NumCPU()}
	rt := gotune.Current()
	res.GOMAXPROCS, res.GOGC = rt.Procs, rt.GCPercent
	if rt.MemLimit != math.MaxInt64 {
		res.GOMEMLIMIT = rt.MemLimit
	}
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

// syncLog records the file store's syncs: how many, and how long each took.
type syncLog struct {
	n   atomic.Int64
	mu  sync.Mutex
	lat []float64 // ms
}

func (l *syncLog) observe(d time.Duration) {
	l.n.Add(1)
	l.mu.Lock()
	l.lat = append(l.lat, float64(d.Microseconds())/1000)
	l.mu.Unlock()
}

// take returns the latencies recorded since the last take.
func (l *syncLog) take() []float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	lat := l.lat
	l.lat = nil
	return lat
}

// openRunsStore opens the store the runs bench runs on; commits records
// the file store's syncs.
func openRunsStore(ctx context.Context, cfg RunsConfig, dir string, commits *syncLog) (store.Store, error) {
	if pgstore.IsURL(cfg.Store) {
		return pgstore.Open(ctx, cfg.Store, pgstore.Options{Migrate: true, MaxConns: 2 * cfg.Submitters})
	}
	return fsstore.Open(ctx, dir, fsstore.Options{MaxOpen: cfg.Sessions + 64, Sync: cfg.Sync,
		ObserveSync: commits.observe})
}

// runsPhase is one phase of the runs bench: the runs submitted, when each
// was submitted (or scheduled), and their ends.
type runsPhase struct {
	mu       sync.Mutex
	submitAt map[string]time.Time
	endAt    map[string]time.Time // runs that ended before their submit returned
	lat      []float64
	total    int64
	ended    atomic.Int64
	lastEnd  atomic.Int64
	done     chan struct{}
}

func newRunsPhase(n int) *runsPhase {
	return &runsPhase{submitAt: make(map[string]time.Time, n), endAt: map[string]time.Time{}, lat: make([]float64, 0, n), total: int64(n), done: make(chan struct{})}
}

// end records a run's end. A run that ends before its submit returned has
// no submit time yet: its end waits for it (submitted).
func (p *runsPhase) end(run belay.Run) {
	now := time.Now()
	p.mu.Lock()
	if t, ok := p.submitAt[run.ID]; ok {
		p.lat = append(p.lat, float64(now.Sub(t).Microseconds())/1000)
	} else {
		p.endAt[run.ID] = now
	}
	p.mu.Unlock()
	p.lastEnd.Store(now.UnixNano())
	if p.ended.Add(1) == p.total {
		close(p.done)
	}
}

func benchRuns(ctx context.Context, cfg RunsConfig, dir string, res *RunsResult) error {
	var commits syncLog
	var cur atomic.Pointer[runsPhase]
	onEnd := func(run belay.Run) {
		if p := cur.Load(); p != nil {
			p.end(run)
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
	beforeCommits := commits.n.Load()
	commits.take()

	how := "one run per call"
	if cfg.Batch > 0 {
		how = fmt.Sprintf("batches of %d", cfg.Batch)
	}
	cfg.Progress(fmt.Sprintf("submitting %d runs from %d submitters (%s) to %d node(s)", cfg.Runs, cfg.Submitters, how, cfg.Nodes))
	p := newRunsPhase(cfg.Runs)
	cur.Store(p)
	var db0 time.Duration
	if cfg.DatabaseCPU != nil {
		var err error
		if db0, err = cfg.DatabaseCPU(); err != nil {
			return err
		}
	}
	cpu0 := cpuSeconds()
	sched := readSchedWait()
	rate, p50, p99, err := submitPhase(ctx, cfg, rts, sessions, p, 0)
	if err != nil {
		return err
	}
	res.SchedWaitP99Millis = sched.p99Since()
	res.CPUMicrosPerRun = (cpuSeconds() - cpu0) * 1e6 / float64(cfg.Runs)
	if cfg.DatabaseCPU != nil {
		db, err := cfg.DatabaseCPU()
		if err != nil {
			return err
		}
		res.DatabaseCPUMicrosPerRun = float64((db - db0).Microseconds()) / float64(cfg.Runs)
	}
	res.RunsPerSec, res.P50Millis, res.P99Millis = rate, p50, p99
	res.SyncsPerRun = float64(totalSeq(ctx, st, sessions)-beforeSeq) / float64(cfg.Runs)
	res.CommitsPerRun = float64(commits.n.Load()-beforeCommits) / float64(cfg.Runs)
	lat := commits.take()
	res.SyncP50Millis, res.SyncP99Millis = percentile(lat, 0.50), percentile(lat, 0.99)

	if cfg.Paced > 0 {
		offered := cfg.Paced * res.RunsPerSec
		cfg.Progress(fmt.Sprintf("offering %d more runs at %.0f runs/s (%.0f%% of the peak), open loop", cfg.Runs, offered, 100*cfg.Paced))
		p := newRunsPhase(cfg.Runs)
		cur.Store(p)
		sched := readSchedWait()
		rate, p50, p99, err := submitPhase(ctx, cfg, rts, sessions, p, offered)
		if err != nil {
			return err
		}
		res.PacedSchedWaitP99Millis = sched.p99Since()
		res.Paced, res.PacedOffered = cfg.Paced, offered
		res.PacedSyncP99Millis = percentile(commits.take(), 0.99)
		res.PacedRunsPerSec, res.PacedP50Millis, res.PacedP99Millis = rate, p50, p99
	}
	return nil
}

// submitted records when runs were submitted (or scheduled to be).
func (p *runsPhase) submitted(runs []belay.Run, t time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, run := range runs {
		if e, ok := p.endAt[run.ID]; ok {
			p.lat = append(p.lat, float64(e.Sub(t).Microseconds())/1000)
			delete(p.endAt, run.ID)
			continue
		}
		p.submitAt[run.ID] = t
	}
}

// submitPhase submits cfg.Runs runs from cfg.Submitters submitters and
// waits for their ends (recorded in p). With offered > 0 each call is
// scheduled at start + (its first run's index) / offered and its runs'
// latency counts from that moment (so a submit that falls behind the
// schedule shows in the latency: no coordinated omission); else the
// submitters go as fast as they can and latency counts from each call.
func submitPhase(ctx context.Context, cfg RunsConfig, rts []*brt.Runtime, sessions []string, p *runsPhase, offered float64) (rate, p50, p99 float64, err error) {
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
				if offered > 0 {
					t = start.Add(time.Duration(float64(from) / offered * float64(time.Second)))
					select {
					case <-time.After(time.Until(t)):
					case <-ctx.Done():
						errc <- ctx.Err()
						return
					}
				}
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
				p.submitted(runs, t)
			}
		}()
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return 0, 0, 0, err
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		return 0, 0, 0, ctx.Err()
	case <-time.After(10 * time.Minute):
		return 0, 0, 0, fmt.Errorf("bench: only %d of %d runs finished", p.ended.Load(), cfg.Runs)
	}
	elapsed := time.Unix(0, p.lastEnd.Load()).Sub(start)
	p.mu.Lock()
	defer p.mu.Unlock()
	return float64(cfg.Runs) / elapsed.Seconds(), percentile(p.lat, 0.50), percentile(p.lat, 0.99), nil
}

// schedWait is a reading of the runtime's scheduler latency histogram:
// how long goroutines waited, runnable, for a P.
type schedWait struct{ h *metrics.Float64Histogram }

const schedLatencies = "/sched/latencies:seconds"

func readSchedWait() schedWait {
	s := []metrics.Sample{{Name: schedLatencies}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return schedWait{}
	}
	return schedWait{s[0].Value.Float64Histogram()}
}

// p99Since returns the p99 of the waits since w was read, in
// milliseconds, at the upper bound of its bucket (the lower bound for the
// last, unbounded bucket; 0 if the runtime does not report it).
func (w schedWait) p99Since() float64 {
	now := readSchedWait()
	if w.h == nil || now.h == nil || len(now.h.Counts) != len(w.h.Counts) {
		return 0
	}
	counts := make([]uint64, len(now.h.Counts))
	var total uint64
	for i := range counts {
		counts[i] = now.h.Counts[i] - w.h.Counts[i]
		total += counts[i]
	}
	var seen uint64
	for i, c := range counts {
		seen += c
		if total > 0 && float64(seen) >= 0.99*float64(total) {
			upper := now.h.Buckets[i+1]
			if math.IsInf(upper, 1) {
				upper = now.h.Buckets[i]
			}
			return upper * 1e3
		}
	}
	return 0
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
	inFlight := min(cfg.InFlight, cfg.IdleSessions)
	var busy []string // the sessions with a run in flight
	for i := 0; i < cfg.IdleSessions; i++ {
		in := belay.SessionInput{Provider: "fake", Model: "echo"}
		if i < inFlight {
			in.FirstRun = &belay.RunInput{Input: json.RawMessage(`{"prompt":"idle"}`)}
		}
		sess, err := gen.CreateSession(ctx, in)
		if err != nil {
			_ = gen.Close()
			return err
		}
		if i < inFlight {
			busy = append(busy, sess.ID)
		}
	}
	if err := gen.Close(); err != nil {
		return err
	}
	res.IdleCreateSeconds = time.Since(t0).Seconds()

	// As a restart after a clean stop: from the store index.
	cfg.Progress(fmt.Sprintf("loading %d idle sessions (%d runs in flight)", cfg.IdleSessions, inFlight))
	before := rss()
	took, loaded, err := timedLoad(ctx, dir, inFlight, func(*fsstore.Store) {
		debug.FreeOSMemory()
		after := rss()
		grew, per := after-before, float64(after-before)/float64(cfg.IdleSessions)
		res.IdleRSSBytes, res.IdleBytesPerSess = &grew, &per
		res.IdleOpenJournals = openFiles()
	})
	if err != nil {
		return err
	}
	res.IdleSessions, res.IdleInFlight = cfg.IdleSessions, inFlight
	res.IdleLoadSeconds, res.IdleIndexed = took, loaded.FromIndex

	// As a restart after a kill: the sessions with a run in flight were
	// written to after the last index was (a live one, minutes old).
	cfg.Progress(fmt.Sprintf("loading %d idle sessions after a kill, %d of them changed since the store index", cfg.IdleSessions, len(busy)))
	old, err := os.ReadFile(filepath.Join(dir, fsstore.IndexName))
	if err != nil {
		return err
	}
	st, err := fsstore.Open(ctx, dir, fsstore.Options{})
	if err != nil {
		return err
	}
	for _, id := range busy {
		if _, err := st.Append(ctx, id, belay.Buffered, belay.Event{Type: "bench.note"}); err != nil {
			_ = st.Close()
			return err
		}
	}
	if err := st.Close(); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, fsstore.IndexName), old, 0o600); err != nil {
		return err
	}
	if res.IdleKillLoadSeconds, loaded, err = timedLoad(ctx, dir, inFlight, nil); err != nil {
		return err
	}
	res.IdleKillOpened = loaded.Opened

	// As a restart after a crash: no index, every journal opened.
	cfg.Progress(fmt.Sprintf("loading %d idle sessions without the store index", cfg.IdleSessions))
	if err := fsstore.RemoveIndex(dir); err != nil {
		return err
	}
	res.IdleColdLoadSeconds, _, err = timedLoad(ctx, dir, inFlight, nil)
	return err
}

// timedLoad opens the store in dir as a restart would and returns how long
// that took and how it loaded the sessions; with the store open, it calls
// during (if set), then checks the load (checkIdleLoad) and closes it.
func timedLoad(ctx context.Context, dir string, inFlight int, during func(*fsstore.Store)) (float64, fsstore.IndexStats, error) {
	t := time.Now()
	st, err := fsstore.Open(ctx, dir, fsstore.Options{})
	if err != nil {
		return 0, fsstore.IndexStats{}, err
	}
	took := time.Since(t).Seconds()
	if during != nil {
		during(st)
	}
	err = checkIdleLoad(ctx, st, inFlight)
	return took, st.Loaded(), errors.Join(err, st.Close())
}

// checkIdleLoad checks that a loaded store holds the idle sessions' runs
// in flight, queued for the scheduler.
func checkIdleLoad(ctx context.Context, st *fsstore.Store, inFlight int) error {
	list, err := st.Sessions(ctx, belay.SessionFilter{Limit: 1})
	if err != nil || len(list) != 1 {
		return fmt.Errorf("bench: idle sessions not loaded: %v", err)
	}
	c, err := st.Counts(ctx)
	if err != nil {
		return err
	}
	if c.Queued != inFlight {
		return fmt.Errorf("bench: %d runs queued after the load, not %d", c.Queued, inFlight)
	}
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
