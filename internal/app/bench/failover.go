package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/client"
	"github.com/belayhq/belay/store/pgstore"
)

// FailoverConfig configures Failover.
type FailoverConfig struct {
	// Bin is the belay executable the nodes run (`belay serve`).
	Bin string
	// Dir holds the nodes' data directories (removed afterwards).
	Dir string
	// Store is the postgres:// URL of a scratch database.
	Store string
	// Nodes is how many nodes serve the database (at least 2).
	Nodes int
	// Runs is how many long runs are sent before each kill.
	Runs int
	// Kills is how many times a node is killed with SIGKILL.
	Kills int
	// LeaseTTL is the nodes' run lease TTL ([runs] lease_ttl).
	LeaseTTL time.Duration
	// Progress, if set, is told what the bench is doing.
	Progress func(string)
}

// FailoverResult is what Failover measured.
type FailoverResult struct {
	Store    string  `json:"store"`
	Nodes    int     `json:"nodes"`
	Kills    int     `json:"kills"`
	LeaseTTL float64 `json:"leaseTTLSeconds"`
	// Moved is how many runs the killed nodes held.
	Moved int `json:"runsMoved"`
	// Failover times, from the SIGKILL to each run's first lease by
	// another node, by the database's clock (the journal's times).
	P50Millis float64 `json:"p50Millis"`
	MaxMillis float64 `json:"maxMillis"`
	// TargetMillis is the lease TTL + 1 s.
	TargetMillis float64 `json:"targetMillis"`
}

// Failover measures failover on PostgreSQL: it starts Nodes `belay serve`
// processes on the database, sends runs that last longer than the bench,
// SIGKILLs the node holding the most of them, and times, from the journal,
// how long each of its runs took to be leased by another node. The killed
// node is restarted before the next kill.
func Failover(ctx context.Context, cfg FailoverConfig) (FailoverResult, error) {
	res := FailoverResult{Store: pgstore.Redact(cfg.Store), Nodes: cfg.Nodes, LeaseTTL: cfg.LeaseTTL.Seconds(), TargetMillis: float64((cfg.LeaseTTL + time.Second).Milliseconds())}
	if !pgstore.IsURL(cfg.Store) {
		return res, fmt.Errorf("%w: bench failover needs --store postgres://USER@HOST/DB (a scratch database)", belay.ErrInvalid)
	}
	if cfg.Nodes < 2 || cfg.Runs < 1 || cfg.Kills < 1 || cfg.LeaseTTL <= 0 {
		return res, fmt.Errorf("%w: bench failover needs at least 2 nodes, 1 run, 1 kill and a positive lease TTL", belay.ErrInvalid)
	}
	progress := cfg.Progress
	if progress == nil {
		progress = func(string) {}
	}
	root, err := os.MkdirTemp(cfg.Dir, "failover-")
	if err != nil {
		return res, fmt.Errorf("bench: %w", err)
	}
	defer os.RemoveAll(root)
	st, err := pgstore.Open(ctx, cfg.Store, pgstore.Options{Migrate: true})
	if err != nil {
		return res, err
	}
	st.Close() // migrated once here, not by the nodes at once
	db, err := pgx.Connect(ctx, cfg.Store)
	if err != nil {
		return res, fmt.Errorf("bench: %w", err)
	}
	defer db.Close(context.Background())

	nodes := make([]*benchNode, cfg.Nodes)
	defer func() {
		for _, n := range nodes {
			if n != nil {
				n.stop()
			}
		}
	}()
	for i := range nodes {
		dir := filepath.Join(root, fmt.Sprintf("node%d", i))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return res, fmt.Errorf("bench: %w", err)
		}
		conf := fmt.Sprintf("[runs]\nlease_ttl = %q\n", cfg.LeaseTTL.String())
		if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(conf), 0o600); err != nil {
			return res, fmt.Errorf("bench: %w", err)
		}
		nodes[i] = &benchNode{bin: cfg.Bin, dir: dir, store: cfg.Store, c: client.New(client.Options{Socket: filepath.Join(dir, "belay.sock")})}
		if err := nodes[i].start(ctx); err != nil {
			return res, err
		}
	}
	progress(fmt.Sprintf("%d nodes serving %s", cfg.Nodes, res.Store))

	var times []time.Duration
	// A run streams one token a second for far longer than the bench.
	script := json.RawMessage(`{"reply":"` + longReply + `","tokens":3600,"rate":1}`)
	for k := range cfg.Kills {
		var sent []string
		for i := range cfg.Runs {
			r, err := nodes[i%len(nodes)].c.CreateRun(ctx, apitype.CreateRunRequest{Provider: "fake", Prompt: "failover", Script: script}, "")
			if err != nil {
				return res, err
			}
			sent = append(sent, r.ID)
		}
		victim, held, err := busiest(ctx, db, nodes, sent, cfg.Runs)
		if err != nil {
			return res, err
		}
		if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			return res, fmt.Errorf("bench: kill: %w", err)
		}
		_ = victim.cmd.Wait() // killed: the error says so
		var at time.Time
		if err := db.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&at); err != nil {
			return res, fmt.Errorf("bench: %w", err)
		}
		got, err := rescued(ctx, db, held, victim.inc, at, 10*cfg.LeaseTTL+30*time.Second)
		if err != nil {
			return res, err
		}
		times = append(times, got...)
		progress(fmt.Sprintf("kill %d: %d runs moved, slowest %v", k+1, len(got), slices.Max(got).Round(time.Millisecond)))
		if err := victim.start(ctx); err != nil {
			return res, err
		}
		for _, id := range sent {
			if _, err := nodes[0].c.CancelRun(ctx, id, "bench done"); err != nil && !errors.Is(err, belay.ErrTerminal) {
				return res, err
			}
		}
	}
	slices.Sort(times)
	res.Kills, res.Moved = cfg.Kills, len(times)
	res.P50Millis = float64(times[len(times)/2].Microseconds()) / 1000
	res.MaxMillis = float64(times[len(times)-1].Microseconds()) / 1000
	return res, nil
}

const longReply = "failover bench"

// busiest waits until every sent run is running and returns the node
// holding the most of them, with their ids.
func busiest(ctx context.Context, db *pgx.Conn, nodes []*benchNode, sent []string, n int) (*benchNode, []string, error) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		rows, err := db.Query(ctx, `SELECT id, lease_owner FROM belay_runs WHERE id = ANY($1) AND status = 'running'`, sent)
		if err != nil {
			return nil, nil, fmt.Errorf("bench: %w", err)
		}
		held := map[string][]string{}
		count := 0
		for rows.Next() {
			var id, owner string
			if err := rows.Scan(&id, &owner); err != nil {
				rows.Close()
				return nil, nil, fmt.Errorf("bench: %w", err)
			}
			held[owner] = append(held[owner], id)
			count++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, nil, fmt.Errorf("bench: %w", err)
		}
		if count == n {
			var best *benchNode
			for _, nd := range nodes {
				if best == nil || len(held[nd.inc]) > len(held[best.inc]) {
					best = nd
				}
			}
			if len(held[best.inc]) > 0 {
				return best, held[best.inc], nil
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
}

// rescued waits until each of ids was leased by an owner other than dead
// and returns, per run, the time from at to that lease by the journal.
func rescued(ctx context.Context, db *pgx.Conn, ids []string, dead string, at time.Time, limit time.Duration) ([]time.Duration, error) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	give := time.After(limit)
	for {
		rows, err := db.Query(ctx, `SELECT DISTINCT ON (run) ts FROM belay_events
			WHERE run = ANY($1) AND type = $2 AND ts > $3 AND data->>'owner' <> $4 ORDER BY run, seq`, ids, belay.EventRunLeased, at, dead)
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		ts, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		if len(ts) == len(ids) {
			out := make([]time.Duration, len(ts))
			for i, t := range ts {
				out[i] = t.Sub(at)
			}
			return out, nil
		}
		select {
		case <-tick.C:
		case <-give:
			return nil, fmt.Errorf("bench: %d of %d runs of the killed node were not resumed elsewhere within %v", len(ids)-len(ts), len(ids), limit)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// benchNode is one `belay serve` child of the failover bench.
type benchNode struct {
	bin, dir, store string
	c               *client.Client
	cmd             *exec.Cmd
	inc             string
}

func (n *benchNode) start(ctx context.Context) error {
	logf, err := os.OpenFile(filepath.Join(n.dir, "serve.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(n.bin, "serve", "--data", n.dir, "--store", n.store)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("bench: start a node: %w", err)
	}
	n.cmd = cmd
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	give := time.After(60 * time.Second)
	for {
		if h, err := n.c.Health(ctx); err == nil && h.PID == cmd.Process.Pid {
			n.inc = h.Incarnation
			return nil
		}
		select {
		case <-tick.C:
		case <-give:
			n.stop()
			return fmt.Errorf("bench: the node in %s did not start (see %s)", n.dir, filepath.Join(n.dir, "serve.log"))
		case <-ctx.Done():
			n.stop()
			return ctx.Err()
		}
	}
}

// stop ends the node gracefully (SIGTERM), or kills it after 30 s.
func (n *benchNode) stop() {
	if n.cmd == nil || n.cmd.ProcessState != nil {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = n.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = n.cmd.Process.Kill()
		<-done
	}
}
