package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/belayhq/belay/internal/vfs"
	"github.com/belayhq/belay/journal"
)

// JournalConfig configures the journal benchmark.
type JournalConfig struct {
	// Dir is where scratch journals go; it should be on the filesystem to
	// measure. A temporary directory is made inside it and removed after.
	Dir string
	// Scenarios to run: writers per session and sessions.
	Scenarios []Scenario
	// Duration of each timed phase.
	Duration time.Duration
	// EventSize is the approximate encoded size of one event.
	EventSize int
	// OpenSize is the size of the journal whose open and seek are timed
	// (0 skips those measurements).
	OpenSize int64
	// Progress, if set, is told what is running.
	Progress func(string)
}

// Scenario is a number of sessions each appended to by some writers.
type Scenario struct {
	Writers  int `json:"writers"`
	Sessions int `json:"sessions"`
}

// DefaultScenarios are the two targets of the durable core: 64 writers on
// one session, and 256 sessions with 4 writers each.
var DefaultScenarios = []Scenario{{Writers: 64, Sessions: 1}, {Writers: 4, Sessions: 256}}

// JournalResult is the benchmark's report; its JSON is `belay bench journal
// --json`.
type JournalResult struct {
	EventSize int              `json:"event_size"`
	Duration  string           `json:"duration"`
	Scenarios []ScenarioResult `json:"scenarios"`
	Open      *OpenResult      `json:"open,omitempty"`
}

// ScenarioResult reports one scenario.
type ScenarioResult struct {
	Scenario
	// Sync appends: throughput and latency.
	SyncEventsPerSec float64 `json:"sync_events_per_sec"`
	SyncP50Micros    float64 `json:"sync_p50_us"`
	SyncP99Micros    float64 `json:"sync_p99_us"`
	EventsPerCommit  float64 `json:"events_per_commit"`
	// Raw baseline: plain write + fdatasync loops over the same bytes with
	// the same batch size, one loop per session.
	RawEventsPerSec float64 `json:"raw_events_per_sec"`
	RatioVsRaw      float64 `json:"ratio_vs_raw"`
	// Buffered appends (token deltas), until all are synced.
	BufferedEventsPerSec float64 `json:"buffered_events_per_sec"`
}

// OpenResult reports opening and seeking in large journals.
type OpenResult struct {
	Sizes []OpenSize `json:"sizes"`
}

// OpenSize is one journal size's open and seek times.
type OpenSize struct {
	Bytes  int64  `json:"bytes"`
	Events uint64 `json:"events"`
	// OpenSnapshotMillis is the time to open with a valid snapshot.
	OpenSnapshotMillis float64 `json:"open_snapshot_ms"`
	// OpenScanMillis is the time to open without one (a full scan).
	OpenScanMillis float64 `json:"open_scan_ms"`
	// SeekMicros is the mean time to read one event at a random seq.
	SeekMicros float64 `json:"seek_us"`
}

// Journal runs the journal benchmark.
func Journal(ctx context.Context, cfg JournalConfig) (*JournalResult, error) {
	if cfg.Duration <= 0 {
		cfg.Duration = 3 * time.Second
	}
	if cfg.EventSize < 64 {
		cfg.EventSize = 200
	}
	if len(cfg.Scenarios) == 0 {
		cfg.Scenarios = DefaultScenarios
	}
	if cfg.Progress == nil {
		cfg.Progress = func(string) {}
	}
	root, err := os.MkdirTemp(cfg.Dir, "belay-bench-")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer os.RemoveAll(root)
	res := &JournalResult{EventSize: cfg.EventSize, Duration: cfg.Duration.String()}
	for i, sc := range cfg.Scenarios {
		if sc.Writers < 1 || sc.Sessions < 1 {
			return nil, fmt.Errorf("bench: writers and sessions must be at least 1")
		}
		dir := filepath.Join(root, "s"+strconv.Itoa(i))
		r, err := runScenario(ctx, cfg, sc, dir)
		if err != nil {
			return nil, err
		}
		res.Scenarios = append(res.Scenarios, *r)
		_ = os.RemoveAll(dir)
	}
	if cfg.OpenSize > 0 {
		o, err := measureOpen(ctx, cfg, filepath.Join(root, "open"))
		if err != nil {
			return nil, err
		}
		res.Open = o
	}
	return res, nil
}

// payload returns event data that encodes to about size bytes per line.
func payload(size int) json.RawMessage {
	n := max(size-110, 8) // seq, ts, type and crc take about 110 bytes
	b := make([]byte, 0, n+2)
	b = append(b, '"')
	for i := 0; i < n; i++ {
		b = append(b, 'a'+byte(i%26))
	}
	return append(b, '"')
}

func openAll(dir string, n int) ([]*journal.Journal, error) {
	js := make([]*journal.Journal, n)
	for i := range js {
		d := filepath.Join(dir, strconv.Itoa(i))
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
		j, err := journal.Open(d, journal.Options{})
		if err != nil {
			return nil, err
		}
		js[i] = j
	}
	return js, nil
}

func closeAll(js []*journal.Journal) {
	for _, j := range js {
		if j != nil {
			_ = j.Close()
		}
	}
}

func runScenario(ctx context.Context, cfg JournalConfig, sc Scenario, dir string) (*ScenarioResult, error) {
	res := &ScenarioResult{Scenario: sc}
	data := payload(cfg.EventSize)

	// Sync appends, interleaved with the raw baseline in rounds so that
	// both see the same state of the disk.
	cfg.Progress(fmt.Sprintf("sync appends vs raw fdatasync: %d sessions x %d writers for %s each", sc.Sessions, sc.Writers, cfg.Duration))
	js, err := openAll(filepath.Join(dir, "sync"), sc.Sessions)
	if err != nil {
		closeAll(js)
		return nil, fmt.Errorf("bench: %w", err)
	}
	const rounds = 3
	var (
		lat              []float64
		n, rawN          int64
		elapsed, rawTime time.Duration
	)
	for r := 0; r < rounds; r++ {
		l, k, el, err := drive(ctx, js, sc.Writers, cfg.Duration/rounds, journal.Sync, data)
		if err != nil {
			closeAll(js)
			return nil, err
		}
		lat, n, elapsed = append(lat, l...), n+k, elapsed+el
		var commits, events uint64
		for _, j := range js {
			st := j.Stats()
			commits, events = commits+st.Commits, events+st.Events
		}
		if commits > 0 {
			res.EventsPerCommit = float64(events) / float64(commits)
		}
		// The raw baseline with the batch size the journal achieved.
		k, el, err = rawBaseline(filepath.Join(dir, "raw"), sc.Sessions, max(1, int(res.EventsPerCommit+0.5)), cfg.Duration/rounds, cfg.EventSize)
		if err != nil {
			closeAll(js)
			return nil, err
		}
		rawN, rawTime = rawN+k, rawTime+el
	}
	closeAll(js)
	res.SyncEventsPerSec = float64(n) / elapsed.Seconds()
	res.SyncP50Micros = percentile(lat, 0.50)
	res.SyncP99Micros = percentile(lat, 0.99)
	res.RawEventsPerSec = float64(rawN) / rawTime.Seconds()
	if res.RawEventsPerSec > 0 {
		res.RatioVsRaw = res.SyncEventsPerSec / res.RawEventsPerSec
	}

	// Buffered appends.
	cfg.Progress(fmt.Sprintf("buffered appends: %d sessions x %d writers for %s", sc.Sessions, sc.Writers, cfg.Duration))
	js, err = openAll(filepath.Join(dir, "buffered"), sc.Sessions)
	if err != nil {
		closeAll(js)
		return nil, fmt.Errorf("bench: %w", err)
	}
	start := time.Now()
	_, n, _, err = drive(ctx, js, sc.Writers, cfg.Duration, journal.Buffered, data)
	if err == nil {
		for _, j := range js {
			// Count the time until everything appended is synced.
			if werr := waitSynced(ctx, j); werr != nil {
				err = werr
			}
		}
	}
	elapsed = time.Since(start)
	closeAll(js)
	if err != nil {
		return nil, err
	}
	res.BufferedEventsPerSec = float64(n) / elapsed.Seconds()
	return res, nil
}

// waitSynced waits until every event appended so far is synced, by
// appending one Sync event behind them.
func waitSynced(ctx context.Context, j *journal.Journal) error {
	_, err := j.Append(ctx, journal.Sync, journal.Event{Type: "bench.fence"})
	return err
}

// drive runs writers per journal appending for d and returns per-append
// latencies (µs), the number of events and the elapsed time.
func drive(ctx context.Context, js []*journal.Journal, writers int, d time.Duration, dur journal.Durability, data json.RawMessage) ([]float64, int64, time.Duration, error) {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		lat   []float64
		count atomic.Int64
		first error
	)
	deadline := time.Now().Add(d)
	start := time.Now()
	for _, j := range js {
		for w := 0; w < writers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var mine []float64
				ev := journal.Event{Type: "bench.event", Data: data}
				for time.Now().Before(deadline) && ctx.Err() == nil {
					t0 := time.Now()
					if _, err := j.Append(ctx, dur, ev); err != nil {
						mu.Lock()
						if first == nil {
							first = err
						}
						mu.Unlock()
						return
					}
					if dur == journal.Sync {
						mine = append(mine, float64(time.Since(t0).Microseconds()))
					}
					count.Add(1)
				}
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return lat, count.Load(), time.Since(start), first
}

// rawBaseline writes batches of encoded-size lines with one fdatasync per
// batch, one loop per file, for d, and returns the lines written and the
// time taken.
func rawBaseline(dir string, files, batch int, d time.Duration, size int) (int64, time.Duration, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, 0, err
	}
	line := make([]byte, size)
	for i := range line {
		line[i] = 'r'
	}
	line[size-1] = '\n'
	buf := make([]byte, 0, batch*size)
	for i := 0; i < batch; i++ {
		buf = append(buf, line...)
	}
	var (
		wg    sync.WaitGroup
		count atomic.Int64
		errMu sync.Mutex
		first error
	)
	deadline := time.Now().Add(d)
	start := time.Now()
	for i := 0; i < files; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, err := vfs.OS.OpenFile(filepath.Join(dir, strconv.Itoa(i)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
			if err == nil {
				for time.Now().Before(deadline) {
					if _, err = f.Write(buf); err != nil {
						break
					}
					if err = f.Sync(); err != nil { // fdatasync, as the journal
						break
					}
					count.Add(int64(batch))
				}
				_ = f.Close()
			}
			if err != nil {
				errMu.Lock()
				first = err
				errMu.Unlock()
			}
		}()
	}
	wg.Wait()
	return count.Load(), time.Since(start), first
}

func percentile(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	i := int(float64(len(v)-1) * p)
	return v[i]
}

// measureOpen builds journals of OpenSize/10 and OpenSize and times opens
// and seeks in each.
func measureOpen(ctx context.Context, cfg JournalConfig, dir string) (*OpenResult, error) {
	res := &OpenResult{}
	for _, size := range []int64{cfg.OpenSize / 10, cfg.OpenSize} {
		d := filepath.Join(dir, strconv.FormatInt(size, 10))
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
		cfg.Progress(fmt.Sprintf("building a %s journal", humanBytes(size)))
		events, bytes, err := buildJournal(ctx, d, size, payload(cfg.EventSize))
		if err != nil {
			return nil, err
		}
		cfg.Progress(fmt.Sprintf("timing open and seek in %s", humanBytes(bytes)))
		os := OpenSize{Bytes: bytes, Events: events}
		if os.OpenSnapshotMillis, err = timeOpen(d, 5); err != nil {
			return nil, err
		}
		if os.SeekMicros, err = timeSeek(d, events, 2000); err != nil {
			return nil, err
		}
		// Without the snapshot: a full scan.
		if err := removeSnapshot(d); err != nil {
			return nil, err
		}
		if os.OpenScanMillis, err = timeOpen(d, 1); err != nil {
			return nil, err
		}
		res.Sizes = append(res.Sizes, os)
		_ = removeAllJournal(d)
	}
	return res, nil
}

func buildJournal(ctx context.Context, dir string, size int64, data json.RawMessage) (uint64, int64, error) {
	j, err := journal.Open(dir, journal.Options{BufferedDelay: 50 * time.Millisecond})
	if err != nil {
		return 0, 0, err
	}
	batch := make([]journal.Event, 4096)
	for i := range batch {
		batch[i] = journal.Event{Type: "bench.event", Data: data}
	}
	for {
		if _, err := j.Append(ctx, journal.Sync, batch...); err != nil {
			_ = j.Close()
			return 0, 0, err
		}
		if j.Size() >= size {
			break
		}
	}
	last := j.LastSeq()
	if err := j.WriteSnapshot([]byte(`{"bench":true}`), last); err != nil {
		_ = j.Close()
		return 0, 0, err
	}
	n := j.Size()
	return last, n, j.Close()
}

func timeOpen(dir string, rounds int) (float64, error) {
	best := time.Duration(1<<63 - 1)
	for i := 0; i < rounds; i++ {
		t0 := time.Now()
		j, err := journal.Open(dir, journal.Options{})
		took := time.Since(t0)
		if err != nil {
			return 0, err
		}
		_ = j.Close()
		best = min(best, took)
	}
	return float64(best.Microseconds()) / 1000, nil
}

func timeSeek(dir string, events uint64, n int) (float64, error) {
	j, err := journal.Open(dir, journal.Options{})
	if err != nil {
		return 0, err
	}
	defer j.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	t0 := time.Now()
	for i := 0; i < n; i++ {
		after := rng.Uint64N(events)
		evs, err := j.Read(after, 1)
		if err != nil {
			return 0, err
		}
		if len(evs) != 1 || evs[0].Seq != after+1 {
			return 0, fmt.Errorf("bench: seek to %d returned the wrong event", after+1)
		}
	}
	return float64(time.Since(t0).Microseconds()) / float64(n), nil
}

func removeSnapshot(dir string) error { return os.Remove(filepath.Join(dir, journal.SnapshotName)) }

func removeAllJournal(dir string) error { return os.RemoveAll(dir) }

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d B", n)
}
