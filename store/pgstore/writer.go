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

// WriterLock is a daemon's hold on a database: a session-level advisory
// lock on a dedicated connection. PostgreSQL drops it when that connection
// ends, so the holder checks the connection and, once it cannot prove the
// hold, reports the loss and must stop writing.
type WriterLock struct {
	conn   *pgx.Conn
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	lost error
}

// AcquireWriter takes the database's writer lock for name (an
// incarnation, pid and host, shown to a second daemon). It fails with an
// error wrapping belay.ErrStoreLocked that names the holder if another
// daemon has it. Once the hold is lost the store is fenced (Fence): it
// refuses every write. The hold is checked every ttl/3, each check given ttl to
// answer; onLost is called, once, when a check fails: the hold can no
// longer be proved (a check that times out closes the connection, which
// drops the lock, so a slow check is a loss too).
func (s *Store) AcquireWriter(ctx context.Context, name string, ttl time.Duration, onLost func(error)) (*WriterLock, error) {
	cfg := s.pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = truncate("belay daemon "+name, 63)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, wrapConn(err)
	}
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, writerLock).Scan(&ok); err != nil {
		_ = conn.Close(ctx)
		return nil, wrapConn(err)
	}
	if !ok {
		var holder string
		_ = conn.QueryRow(ctx, `SELECT coalesce(a.application_name, '') || ' from ' || coalesce(host(a.client_addr), 'a local socket') ||
			coalesce(' since ' || to_char(a.backend_start AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), '')
			FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
			AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) AND ((l.classid::bigint << 32) | l.objid::bigint) = $1`, writerLock).Scan(&holder)
		_ = conn.Close(ctx)
		if holder == "" {
			holder = "another connection"
		}
		return nil, fmt.Errorf("%w: database %s is used by %s (one belay daemon per database until multi-node claims land)", belay.ErrStoreLocked, s.URL(), holder)
	}
	wctx, cancel := context.WithCancel(context.Background())
	w := &WriterLock{conn: conn, cancel: cancel, done: make(chan struct{})}
	go w.watch(wctx, ttl, func(err error) {
		s.Fence(err)
		if onLost != nil {
			onLost(err)
		}
	})
	return w, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// watch proves the hold every ttl/3: the lock's connection answers and
// the lock is still granted to it.
func (w *WriterLock) watch(ctx context.Context, ttl time.Duration, onLost func(error)) {
	defer close(w.done)
	t := time.NewTicker(ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, ttl)
		var held bool
		err := w.conn.QueryRow(cctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid = pg_backend_pid()
			AND ((classid::bigint << 32) | objid::bigint) = $1)`, writerLock).Scan(&held)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err == nil && !held {
			err = errors.New("the advisory lock is no longer granted")
		}
		if err != nil {
			err = fmt.Errorf("%w: lost the database writer lock: %w", ErrUnreachable, err)
			w.mu.Lock()
			w.lost = err
			w.mu.Unlock()
			if onLost != nil {
				onLost(err)
			}
			return
		}
	}
}

// Lost returns why the hold was lost, or nil.
func (w *WriterLock) Lost() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lost
}

// Release drops the lock and its connection.
func (w *WriterLock) Release() error {
	w.cancel()
	<-w.done
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if w.Lost() == nil {
		_, _ = w.conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, writerLock)
	}
	return w.conn.Close(ctx)
}
