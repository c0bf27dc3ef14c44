package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/client"
)

// FanoutConfig configures the watch fan-out benchmark.
type FanoutConfig struct {
	// Dir is where the scratch data directory goes.
	Dir string
	// Exe is the belay executable: the daemon runs as its own process, so
	// its descriptors and memory are measured alone.
	Exe string
	// Subscribers follow one session; Posts events are appended to it,
	// one every Interval, and each subscriber times each event.
	Subscribers int
	Posts       int
	Interval    time.Duration
	// Watchers follow Sessions sessions (spread evenly), to measure what
	// a watcher costs the daemon (0 skips this phase).
	Watchers int
	Sessions int
	// Progress, if set, is told what is going on.
	Progress func(string)
}

// FanoutResult is `belay bench watch --json`.
type FanoutResult struct {
	Subscribers int `json:"subscribers"`
	Posts       int `json:"posts"`
	// Deliveries is how many (subscriber, event) pairs arrived: it must be
	// Subscribers x Posts, each exactly once.
	Deliveries int64   `json:"deliveries"`
	P50Millis  float64 `json:"append_to_received_p50_ms"`
	P99Millis  float64 `json:"append_to_received_p99_ms"`
	MaxMillis  float64 `json:"append_to_received_max_ms"`
	// The floor: the same fan-out without belay, in the same run (see
	// fanoutFloor), its frames as long as the daemon's (FrameBytes).
	FloorP50Millis float64 `json:"floor_append_to_received_p50_ms"`
	FloorP99Millis float64 `json:"floor_append_to_received_p99_ms"`
	FloorMaxMillis float64 `json:"floor_append_to_received_max_ms"`
	FrameBytes     int     `json:"frame_bytes"`
	// The watchers phase: the daemon's open descriptors and resident
	// memory with Watchers streams open, per watcher beyond the idle
	// daemon.
	Watchers          int     `json:"watchers,omitempty"`
	Sessions          int     `json:"sessions,omitempty"`
	WatcherFDs        float64 `json:"daemon_fds_per_watcher,omitempty"`
	WatcherRSSBytes   float64 `json:"daemon_rss_bytes_per_watcher,omitempty"`
	DaemonFDs         int     `json:"daemon_fds,omitempty"`
	DaemonRSSBytes    int64   `json:"daemon_rss_bytes,omitempty"`
	WatchersConnected float64 `json:"watchers_connect_seconds,omitempty"`
}

// Fanout measures live streams: Subscribers SSE clients on one session,
// the time from an event's append (its journal timestamp) to its arrival
// at each of them; then Watchers clients across Sessions sessions, and
// what they cost the daemon in descriptors and memory.
func Fanout(ctx context.Context, cfg FanoutConfig) (*FanoutResult, error) {
	if cfg.Subscribers <= 0 {
		cfg.Subscribers = 1000
	}
	if cfg.Posts <= 0 {
		cfg.Posts = 100
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 20 * time.Millisecond
	}
	if cfg.Sessions <= 0 {
		cfg.Sessions = 100
	}
	if cfg.Progress == nil {
		cfg.Progress = func(string) {}
	}
	if cfg.Exe == "" {
		return nil, errors.New("bench: watch needs the belay executable")
	}
	// This process holds a connection per stream.
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < lim.Max {
		lim.Cur = lim.Max
		_ = unix.Setrlimit(unix.RLIMIT_NOFILE, &lim)
	}
	need := max(cfg.Subscribers, cfg.Watchers) + 64
	if lim.Cur > 0 && uint64(need) > lim.Cur {
		return nil, fmt.Errorf("bench: %d streams need %d open files, the limit is %d", max(cfg.Subscribers, cfg.Watchers), need, lim.Cur)
	}
	root, err := os.MkdirTemp(cfg.Dir, "belay-bench-watch-")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer os.RemoveAll(root)
	data := filepath.Join(root, "data")
	// Streams get half of the daemon's connections: room for them all.
	conns := 2*max(cfg.Subscribers, cfg.Watchers) + 64
	cfg.Progress("starting a daemon")
	daemon, err := startBenchDaemon(ctx, cfg.Exe, data, "--max-conns", strconv.Itoa(conns))
	if err != nil {
		return nil, err
	}
	defer daemon.stop()
	c := client.New(client.Options{Socket: filepath.Join(data, "belay.sock")})

	res := &FanoutResult{Subscribers: cfg.Subscribers, Posts: cfg.Posts}
	if err := fanoutLatency(ctx, c, cfg, res); err != nil {
		return nil, err
	}
	cfg.Progress(fmt.Sprintf("the same fan-out over bare unix sockets (the floor): %d streams, %d events of %d bytes", cfg.Subscribers, cfg.Posts, res.FrameBytes))
	floor, err := fanoutFloor(ctx, root, cfg, res.FrameBytes)
	if err != nil {
		return nil, err
	}
	if len(floor) != cfg.Subscribers*cfg.Posts {
		return nil, fmt.Errorf("bench: floor: %d deliveries, want %d", len(floor), cfg.Subscribers*cfg.Posts)
	}
	res.FloorP50Millis, res.FloorP99Millis, res.FloorMaxMillis = latencyPercentiles(floor)
	if cfg.Watchers > 0 {
		if err := fanoutWatchers(ctx, c, daemon.cmd.Process.Pid, cfg, res); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// fanoutLatency runs the one-session phase.
func fanoutLatency(ctx context.Context, c *client.Client, cfg FanoutConfig, res *FanoutResult) error {
	sess, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Provider: "fake"}, "")
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	// A first post that every subscriber must see proves they are all
	// streaming before the timed posts begin.
	if _, err := c.Post(ctx, sess.ID, apitype.PostRequest{Type: "bench.ready", Key: "ready"}); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	lat := make([][]time.Duration, cfg.Subscribers)
	var ready, got, frameBytes atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, cfg.Subscribers)
	cfg.Progress(fmt.Sprintf("%d subscribers on one session", cfg.Subscribers))
	for i := range cfg.Subscribers {
		wg.Go(func() {
			seen := map[string]bool{}
			err := c.Stream(sctx, sess.ID, 0, func(ev belay.Event) error {
				now := time.Now()
				if ev.Type != belay.EventDeliveryPosted {
					return nil
				}
				if strings.Contains(string(ev.Data), `"bench.ready"`) {
					ready.Add(1)
					return nil
				}
				if !strings.Contains(string(ev.Data), `"bench.post"`) {
					return nil
				}
				key := strconv.FormatUint(ev.Seq, 10)
				if seen[key] {
					return fmt.Errorf("subscriber %d saw seq %s twice", i, key)
				}
				seen[key] = true
				lat[i] = append(lat[i], now.Sub(ev.TS))
				if frameBytes.Load() == 0 {
					// The daemon's frame for it: "id: ...\nevent: ...\ndata: <JSON>\n\n".
					if data, err := json.Marshal(ev); err == nil {
						frameBytes.Store(int64(len(fmt.Sprintf("id: %d\nevent: %s\ndata: %s\n\n", ev.Seq, ev.Type, data))))
					}
				}
				if got.Add(1); len(lat[i]) == cfg.Posts {
					return client.ErrStop
				}
				return nil
			})
			if err != nil && !errors.Is(err, client.ErrStop) && sctx.Err() == nil {
				errs <- fmt.Errorf("subscriber %d: %w", i, err)
			}
		})
	}
	deadline := time.Now().Add(2 * time.Minute)
	for ready.Load() < int64(cfg.Subscribers) {
		if time.Now().After(deadline) {
			stop()
			wg.Wait()
			return fmt.Errorf("bench: only %d of %d subscribers connected", ready.Load(), cfg.Subscribers)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cfg.Progress(fmt.Sprintf("%d events, one every %s", cfg.Posts, cfg.Interval))
	t := time.NewTicker(cfg.Interval)
	for n := range cfg.Posts {
		<-t.C
		if _, err := c.Post(ctx, sess.ID, apitype.PostRequest{Type: "bench.post", Key: strconv.Itoa(n)}); err != nil {
			t.Stop()
			stop()
			wg.Wait()
			return fmt.Errorf("bench: post: %w", err)
		}
	}
	t.Stop()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		stop()
		<-done
		return fmt.Errorf("bench: %d of %d deliveries arrived", got.Load(), int64(cfg.Subscribers*cfg.Posts))
	}
	close(errs)
	if err := <-errs; err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	res.Deliveries = int64(len(all))
	if len(all) != cfg.Subscribers*cfg.Posts {
		return fmt.Errorf("bench: %d deliveries, want %d", len(all), cfg.Subscribers*cfg.Posts)
	}
	res.P50Millis, res.P99Millis, res.MaxMillis = latencyPercentiles(all)
	res.FrameBytes = int(frameBytes.Load())
	return nil
}

// latencyPercentiles sorts lat and returns its p50, p99 and max in
// milliseconds.
func latencyPercentiles(lat []time.Duration) (p50, p99, most float64) {
	if len(lat) == 0 {
		return 0, 0, 0
	}
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	return ms(lat[len(lat)/2]), ms(lat[len(lat)*99/100]), ms(lat[len(lat)-1])
}

// fanoutWatchers opens cfg.Watchers streams across cfg.Sessions sessions
// and measures the daemon with them open.
func fanoutWatchers(ctx context.Context, c *client.Client, pid int, cfg FanoutConfig, res *FanoutResult) error {
	cfg.Progress(fmt.Sprintf("creating %d sessions", cfg.Sessions))
	ids := make([]string, cfg.Sessions)
	for i := range ids {
		s, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Provider: "fake"}, "")
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		ids[i] = s.ID
	}
	fds0, rss0, err := daemonUsage(pid)
	if err != nil {
		return err
	}
	cfg.Progress(fmt.Sprintf("%d watchers across %d sessions", cfg.Watchers, cfg.Sessions))
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	var open atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i := range cfg.Watchers {
		sid := ids[i%len(ids)]
		wg.Go(func() {
			first := true
			_ = c.Stream(wctx, sid, 0, func(belay.Event) error {
				if first {
					first = false
					open.Add(1)
				}
				return nil
			})
		})
	}
	deadline := time.Now().Add(3 * time.Minute)
	for open.Load() < int64(cfg.Watchers) {
		if time.Now().After(deadline) {
			stop()
			wg.Wait()
			return fmt.Errorf("bench: only %d of %d watchers connected", open.Load(), cfg.Watchers)
		}
		time.Sleep(20 * time.Millisecond)
	}
	res.WatchersConnected = time.Since(start).Seconds()
	fds1, rss1, err := daemonUsage(pid)
	stop()
	wg.Wait()
	if err != nil {
		return err
	}
	res.Watchers, res.Sessions = cfg.Watchers, cfg.Sessions
	res.DaemonFDs, res.DaemonRSSBytes = fds1, rss1
	res.WatcherFDs = float64(fds1-fds0) / float64(cfg.Watchers)
	res.WatcherRSSBytes = float64(rss1-rss0) / float64(cfg.Watchers)
	return nil
}

// daemonUsage returns a process's open descriptors and resident memory.
func daemonUsage(pid int) (int, int64, error) {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, 0, fmt.Errorf("bench: daemon descriptors: %w", err)
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/statm", pid))
	if err != nil {
		return 0, 0, fmt.Errorf("bench: daemon memory: %w", err)
	}
	f := strings.Fields(string(raw))
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return len(fds), pages * int64(os.Getpagesize()), nil
}
