package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/belayhq/belay/internal/testpg"
)

// benchFloor runs the same work as bare SQL on a fresh database, as a
// reference for what PostgreSQL itself costs per job with this submit
// pattern: each job one INSERT in its own transaction by the same
// submitters, and one worker that marks up to -workers available jobs
// running in one statement (FOR UPDATE SKIP LOCKED), then marks them
// completed in one more, polling every millisecond when it finds none. No
// engine, payload, lease times, journal, change feed or retries: not a
// queue anyone should run. It is not an upper bound for every queue (its
// rate is set by the submitters' commit round trips, with CPU to spare),
// and its latencies (a 1 ms poll) are not comparable with River's (a
// 100 ms fetch cooldown); its CPU per job is what the database and a
// client need at least for one durable row per job, submitted so.
func benchFloor(ctx context.Context, pg *testpg.Cluster, cfg config) (Result, error) {
	progress("floor: %d jobs through bare SQL", cfg.Jobs)
	claim := max(cfg.Workers, 1)
	db, err := pg.CreateDatabase(ctx)
	if err != nil {
		return Result{}, err
	}
	pcfg, err := pgxpool.ParseConfig(pg.URL(db))
	if err != nil {
		return Result{}, err
	}
	pcfg.MaxConns = int32(cfg.Submitters + 4)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return Result{}, err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE floor_job (
	id bigserial PRIMARY KEY,
	state smallint NOT NULL DEFAULT 0,
	created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	finalized_at timestamptz
);
CREATE INDEX floor_job_available ON floor_job (id) WHERE state = 0`); err != nil {
		return Result{}, err
	}

	db0, err := pg.CPU()
	if err != nil {
		return Result{}, err
	}
	client0 := processCPU()
	start := time.Now()
	var (
		next      atomic.Int64
		submitted atomic.Int64
		wg        sync.WaitGroup
	)
	errc := make(chan error, cfg.Submitters+1)
	for w := 0; w < cfg.Submitters; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(cfg.Jobs) {
				if _, err := pool.Exec(ctx, `INSERT INTO floor_job DEFAULT VALUES`); err != nil {
					errc <- err
					return
				}
				submitted.Add(1)
			}
		}()
	}
	wctx, stopWorker := context.WithCancel(ctx)
	workerDone := make(chan struct{})
	defer func() {
		stopWorker()
		<-workerDone
	}()
	var lastDone time.Time
	go func() {
		defer close(workerDone)
		done := 0
		ids := make([]int64, 0, claim)
		for done < cfg.Jobs {
			ids = ids[:0]
			rows, err := pool.Query(wctx, `UPDATE floor_job j SET state = 1
FROM (SELECT id FROM floor_job WHERE state = 0 ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED) c
WHERE j.id = c.id RETURNING j.id`, claim)
			if err == nil {
				for rows.Next() {
					var id int64
					if err = rows.Scan(&id); err != nil {
						break
					}
					ids = append(ids, id)
				}
				rows.Close()
				if err == nil {
					err = rows.Err()
				}
			}
			if err != nil {
				errc <- fmt.Errorf("claim: %w", err)
				return
			}
			if len(ids) == 0 {
				// Nothing available: wait a little, as a queue's fetch
				// poll would (the submitters are still inserting).
				select {
				case <-wctx.Done():
					errc <- wctx.Err()
					return
				case <-time.After(time.Millisecond):
				}
				continue
			}
			if _, err := pool.Exec(wctx, `UPDATE floor_job SET state = 2, finalized_at = clock_timestamp() WHERE id = ANY($1)`, ids); err != nil {
				errc <- fmt.Errorf("complete: %w", err)
				return
			}
			done += len(ids)
		}
		lastDone = time.Now()
	}()
	wg.Wait()
	select {
	case <-workerDone:
	case err := <-errc:
		return Result{}, err
	case <-ctx.Done():
		return Result{}, ctx.Err()
	case <-time.After(10 * time.Minute):
		return Result{}, errors.New("floor jobs did not complete within 10 minutes")
	}
	select {
	case err := <-errc:
		return Result{}, err
	default:
	}
	elapsed := lastDone.Sub(start)
	clientCPU := processCPU() - client0
	dbCPU, err := pg.CPU()
	if err != nil {
		return Result{}, err
	}
	// The table is the truth: every job completed, once.
	var completed int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM floor_job WHERE state = 2`).Scan(&completed); err != nil {
		return Result{}, err
	}
	if completed != cfg.Jobs || submitted.Load() != int64(cfg.Jobs) {
		return Result{}, fmt.Errorf("floor: %d of %d jobs completed (%d submitted)", completed, cfg.Jobs, submitted.Load())
	}
	rows, err := pool.Query(ctx, `SELECT extract(epoch FROM finalized_at - created_at) * 1000 FROM floor_job`)
	if err != nil {
		return Result{}, err
	}
	lat := make([]float64, 0, cfg.Jobs)
	for rows.Next() {
		var ms float64
		if err := rows.Scan(&ms); err != nil {
			rows.Close()
			return Result{}, err
		}
		lat = append(lat, ms)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return Result{}, err
	}
	sort.Float64s(lat)
	return Result{Name: "floor", Jobs: cfg.Jobs, PerSec: float64(cfg.Jobs) / elapsed.Seconds(), P50Millis: pct(lat, 0.5), P99Millis: pct(lat, 0.99),
		ClientMicros:   float64(clientCPU.Microseconds()) / float64(cfg.Jobs),
		DatabaseMicros: float64((dbCPU - db0).Microseconds()) / float64(cfg.Jobs),
		Note:           fmt.Sprintf("bare SQL: INSERT per job, claim and complete up to %d per statement, 1 ms poll; no engine, journal or leases", claim)}, nil
}
