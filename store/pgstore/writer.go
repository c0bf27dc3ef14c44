package pgstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/belayhq/belay"
)

// writerLock is the advisory lock key a daemon holds for as long as it
// runs on a database: one runtime per database until runs are claimed in
// the store (issue 14).
const writerLock int64 = 0x62656c6179_02 // "belay", 2

// WriterOptions configure AcquireWriter.
type WriterOptions struct {
	// TTL paces the checks: the hold is proved every TTL/3, each check
	// given TTL to answer.
	TTL time.Duration
	// OnSuspend is called when the hold can no longer be proved (the
	// database is unreachable, the lock's connection broke): the store
	// has stopped writing. It runs on the lock's goroutine, before the
	// first attempt to take the lock again.
	OnSuspend func(error)
	// OnResume is called when the lock is held again with no other
	// daemon having held it in between: the store writes again.
	OnResume func()
	// OnLost is called, once, when the hold is lost for good: another
	// daemon held the database while this one was cut off from it. The
	// store refuses every write from then on; the daemon must stop.
	OnLost func(error)
}

// WriterLock is a daemon's hold on a database: a session-level advisory
// lock on a dedicated connection. PostgreSQL drops it when that connection
// ends, so the holder proves it every TTL/3. When it cannot, the store
// stops writing at once (writes fail with belay.ErrStoreUnreachable) and
// the holder tries to take the lock again every TTL/3 (at most every
// second); it resumes writing only if the lock is free and its generation
// (belay_writer, incremented by every holder) is still its own: no other
// daemon held the database in between.
type WriterLock struct {
	s      *Store
	name   string
	opts   WriterOptions
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	conn *pgx.Conn
	gen  int64
	lost error
}

// AcquireWriter takes the database's writer lock for name (an
// incarnation, pid and host, shown to a second daemon). It fails with an
// error wrapping belay.ErrStoreLocked that names the holder if another
// daemon has it.
func (s *Store) AcquireWriter(ctx context.Context, name string, opts WriterOptions) (*WriterLock, error) {
	if opts.TTL <= 0 {
		return nil, fmt.Errorf("%w: a writer lock needs a positive ttl", belay.ErrInvalid)
	}
	w := &WriterLock{s: s, name: name, opts: opts, done: make(chan struct{})}
	conn, err := w.connect(ctx)
	if err != nil {
		return nil, err
	}
	ok, err := tryLock(ctx, conn)
	if err != nil {
		_ = conn.Close(ctx)
		return nil, err
	}
	if !ok {
		holder := holderOf(ctx, conn)
		_ = conn.Close(ctx)
		return nil, fmt.Errorf("%w: database %s is used by %s (one belay daemon per database until multi-node claims land)", belay.ErrStoreLocked, s.URL(), holder)
	}
	err = conn.QueryRow(ctx, `INSERT INTO belay_writer (generation, holder) VALUES (1, $1)
		ON CONFLICT (id) DO UPDATE SET generation = belay_writer.generation + 1, holder = excluded.holder, acquired_at = now()
		RETURNING generation`, name).Scan(&w.gen)
	if err != nil {
		_ = conn.Close(ctx)
		return nil, wrapConn(fmt.Errorf("pgstore: record the writer lock: %w", err))
	}
	w.conn = conn
	wctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	go w.watch(wctx)
	return w, nil
}

// connect opens the lock's own connection, named after the holder.
func (w *WriterLock) connect(ctx context.Context) (*pgx.Conn, error) {
	cfg := w.s.pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = truncate("belay daemon "+w.name, 63)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, wrapConn(err)
	}
	return conn, nil
}

func tryLock(ctx context.Context, conn *pgx.Conn) (bool, error) {
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, writerLock).Scan(&ok); err != nil {
		return false, wrapConn(err)
	}
	return ok, nil
}

// holderOf names the connection that holds the writer lock.
func holderOf(ctx context.Context, conn *pgx.Conn) string {
	var holder string
	_ = conn.QueryRow(ctx, `SELECT coalesce(a.application_name, '') || ' from ' || coalesce(host(a.client_addr), 'a local socket') ||
		coalesce(' since ' || to_char(a.backend_start AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), '')
		FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
		AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) AND ((l.classid::bigint << 32) | l.objid::bigint) = $1`, writerLock).Scan(&holder)
	if holder == "" {
		holder = "another connection"
	}
	return holder
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// watch proves the hold every TTL/3; when a proof fails it suspends the
// store's writes and takes the lock again.
func (w *WriterLock) watch(ctx context.Context) {
	defer close(w.done)
	ttl := w.opts.TTL
	for {
		if !sleep(ctx, ttl/3) {
			return
		}
		err := w.prove(ctx)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			continue
		}
		err = w.s.suspend(err)
		w.closeConn()
		if f := w.opts.OnSuspend; f != nil {
			f(err)
		}
		for {
			resumed, lost := w.retake(ctx)
			if ctx.Err() != nil {
				return
			}
			if lost != nil {
				w.mu.Lock()
				w.lost = lost
				w.mu.Unlock()
				w.s.Fence(lost)
				if f := w.opts.OnLost; f != nil {
					f(lost)
				}
				return
			}
			if resumed {
				w.s.resume()
				if f := w.opts.OnResume; f != nil {
					f()
				}
				break
			}
			if !sleep(ctx, min(ttl/3, time.Second)) {
				return
			}
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// prove checks that the lock's connection answers within TTL and that
// the lock is still granted to it. A check that times out closes the
// connection, which drops the lock, so a slow check is a failed one.
func (w *WriterLock) prove(ctx context.Context) error {
	w.mu.Lock()
	conn := w.conn
	w.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, w.opts.TTL)
	defer cancel()
	var held bool
	err := conn.QueryRow(cctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid = pg_backend_pid()
		AND ((classid::bigint << 32) | objid::bigint) = $1)`, writerLock).Scan(&held)
	if err == nil && !held {
		err = errors.New("the advisory lock is no longer granted")
	}
	return err
}

// retake tries to take the lock again after a failed proof. It reports
// resumed when the lock is held again and no other daemon held it in
// between; lost when another daemon holds it now or held it meanwhile
// (the hold is gone for good); neither while the database cannot be
// reached.
func (w *WriterLock) retake(ctx context.Context) (resumed bool, lost error) {
	cctx, cancel := context.WithTimeout(ctx, w.opts.TTL)
	defer cancel()
	conn, err := w.connect(cctx)
	if err != nil {
		return false, nil
	}
	ok, err := tryLock(cctx, conn)
	if err != nil {
		_ = conn.Close(context.Background())
		return false, nil
	}
	if !ok {
		holder := holderOf(cctx, conn)
		_ = conn.Close(context.Background())
		return false, fmt.Errorf("%w: database %s was taken by %s while this daemon was cut off from it", belay.ErrStoreLocked, w.s.URL(), holder)
	}
	var gen int64
	var holder string
	err = conn.QueryRow(cctx, `SELECT generation, holder || ' at ' || to_char(acquired_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') FROM belay_writer`).Scan(&gen, &holder)
	if err != nil {
		_ = conn.Close(context.Background())
		return false, nil
	}
	if gen != w.gen {
		_, _ = conn.Exec(cctx, `SELECT pg_advisory_unlock($1)`, writerLock)
		_ = conn.Close(context.Background())
		return false, fmt.Errorf("%w: database %s was used by %s while this daemon was cut off from it", belay.ErrStoreLocked, w.s.URL(), holder)
	}
	w.mu.Lock()
	w.conn = conn
	w.mu.Unlock()
	return true, nil
}

func (w *WriterLock) closeConn() {
	w.mu.Lock()
	conn := w.conn
	w.conn = nil
	w.mu.Unlock()
	if conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = conn.Close(ctx)
		cancel()
	}
}

// Lost returns why the hold was lost for good, or nil.
func (w *WriterLock) Lost() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lost
}

// Release drops the lock and its connection.
func (w *WriterLock) Release() error {
	w.cancel()
	<-w.done
	w.mu.Lock()
	conn := w.conn
	w.conn = nil
	w.mu.Unlock()
	if conn == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, writerLock)
	return conn.Close(ctx)
}
