package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/api"
	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/provider"
	"github.com/belayhq/belay/provider/fake"
	brt "github.com/belayhq/belay/runtime"
	"github.com/belayhq/belay/store/fsstore"
)

// ListConfig configures the run listing benchmark.
type ListConfig struct {
	// Dir is where the scratch data directory goes.
	Dir string
	// Runs are spread over Sessions; a tenth of them carry each of ten
	// tags, a tenth are failed.
	Runs     int
	Sessions int
	// Requests per query measured.
	Requests int
	Progress func(string)
}

// ListQuery is the timing of one GET /v1/runs query.
type ListQuery struct {
	Name      string  `json:"name"`
	Query     string  `json:"query"`
	Returned  int     `json:"returned"`
	P50Millis float64 `json:"p50_ms"`
	P99Millis float64 `json:"p99_ms"`
}

// ListResult is `belay bench list --json`.
type ListResult struct {
	Runs        int         `json:"runs"`
	Sessions    int         `json:"sessions"`
	FillSeconds float64     `json:"fill_seconds"`
	OpenSeconds float64     `json:"open_seconds"`
	Queries     []ListQuery `json:"queries"`
}

// List fills a store with runs, then times GET /v1/runs over HTTP on
// loopback: the listing reads the store's in-memory state, never a
// journal, so its cost is one pass over the runs and a sort of the page.
func List(ctx context.Context, cfg ListConfig) (*ListResult, error) {
	if cfg.Runs < 1 || cfg.Sessions < 1 || cfg.Sessions > cfg.Runs || cfg.Requests < 1 {
		return nil, fmt.Errorf("%w: bench list needs runs >= sessions >= 1 and requests >= 1", belay.ErrInvalid)
	}
	progress := cfg.Progress
	if progress == nil {
		progress = func(string) {}
	}
	dir, err := os.MkdirTemp(cfg.Dir, "belay-bench-list-")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer os.RemoveAll(dir)
	res := &ListResult{Runs: cfg.Runs, Sessions: cfg.Sessions}
	progress(fmt.Sprintf("creating %d runs in %d sessions", cfg.Runs, cfg.Sessions))
	start := time.Now()
	sessions, err := fillRuns(ctx, filepath.Join(dir, "data"), cfg)
	if err != nil {
		return nil, err
	}
	res.FillSeconds = time.Since(start).Seconds()

	start = time.Now()
	st, err := fsstore.Open(ctx, filepath.Join(dir, "data"), fsstore.Options{Purpose: "bench"})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	res.OpenSeconds = time.Since(start).Seconds()
	rt, err := brt.New(brt.Options{Store: st, Providers: provider.Registry{"fake": fake.New(fake.Options{})}, PruneEvery: -1})
	if err != nil {
		return nil, err
	}
	// The API on a loopback port, as a client of the daemon meets it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: api.NewServer(api.Options{Runtime: rt, Version: "bench"}).Handler(""), ReadHeaderTimeout: time.Minute}
	go func() { _ = srv.Serve(ln) }() // Serve returns when srv is closed
	defer srv.Close()
	base := "http://" + ln.Addr().String()

	get := func(q string) (apitype.RunPage, time.Duration, error) {
		t0 := time.Now()
		resp, err := http.Get(base + "/v1/runs?" + q)
		if err != nil {
			return apitype.RunPage{}, 0, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			return apitype.RunPage{}, 0, fmt.Errorf("bench: GET /v1/runs?%s: %s", q, b)
		}
		var p apitype.RunPage
		err = json.NewDecoder(resp.Body).Decode(&p)
		return p, time.Since(t0), err
	}
	// The cursor halfway down the list, for a deep page.
	var mid string
	for walked := 0; walked < cfg.Runs/2; {
		p, _, err := get("sort=oldest&limit=1000&cursor=" + mid)
		if err != nil {
			return nil, err
		}
		walked += len(p.Runs)
		if mid = p.NextCursor; mid == "" {
			break
		}
	}
	queries := []ListQuery{
		{Name: "newest page", Query: "limit=100"},
		{Name: "by tag (1/10)", Query: "tag=t3&limit=100"},
		{Name: "failed only", Query: "failed=true&limit=100"},
		{Name: "one session", Query: "session=" + sessions[len(sessions)/2]},
		{Name: "deep page by cursor", Query: "sort=oldest&limit=100&cursor=" + mid},
		{Name: "last change first", Query: "sort=updated&limit=100"},
	}
	for i := range queries {
		q := &queries[i]
		progress("timing " + q.Name)
		lat := make([]time.Duration, 0, cfg.Requests)
		for range cfg.Requests {
			p, d, err := get(q.Query)
			if err != nil {
				return nil, err
			}
			q.Returned = len(p.Runs)
			lat = append(lat, d)
		}
		sort.Slice(lat, func(a, b int) bool { return lat[a] < lat[b] })
		q.P50Millis = ms(lat[len(lat)/2])
		q.P99Millis = ms(lat[min(len(lat)*99/100, len(lat)-1)])
	}
	res.Queries = queries
	return res, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// fillRuns creates the runs (a tenth failed) with the shared syncfs, many
// sessions at once, and returns the session ids.
func fillRuns(ctx context.Context, dir string, cfg ListConfig) ([]string, error) {
	st, err := fsstore.Open(ctx, dir, fsstore.Options{Purpose: "bench", Sync: fsstore.SyncFilesystem})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	sessions := make([]string, cfg.Sessions)
	for i := range sessions {
		s, err := st.CreateSession(ctx, belay.SessionInput{Provider: "fake"})
		if err != nil {
			return nil, err
		}
		sessions[i] = s.ID
	}
	const workers = 64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < cfg.Runs; i += workers {
				r, _, err := st.CreateRun(ctx, belay.RunInput{
					Session: sessions[i%cfg.Sessions], Provider: "fake",
					Tags: []string{fmt.Sprintf("t%d", i%10)}, Meta: map[string]string{"i": fmt.Sprint(i)},
				})
				if err == nil && i%10 == 7 {
					var l belay.Run
					if l, err = st.AcquireRunLease(ctx, r.ID, "bench", time.Minute, 0); err == nil {
						_, err = st.UpdateRun(ctx, r.ID, l.Epoch, belay.RunUpdate{Phase: belay.PhaseFailed, Error: &belay.RunError{Class: belay.ClassTransient, Message: "bench"}})
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return sessions, <-errs
}
