package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/lock"
	"github.com/belayhq/belay/store"
	"github.com/belayhq/belay/store/fsstore"
	"github.com/belayhq/belay/store/pgstore"
)

// FileStore is the store setting of the embedded file store in the data
// directory, the default.
const FileStore = "file:"

// StoreKind names what a store setting selects: "file" or "postgres". It
// refuses anything else with a message naming the accepted forms.
func StoreKind(url string) (string, error) {
	switch {
	case url == "" || url == FileStore:
		return "file", nil
	case pgstore.IsURL(url):
		return "postgres", nil
	case strings.HasPrefix(url, "file:"):
		return "", fmt.Errorf("%w: store %q: the file store lives in the data directory; use --data DIR with --store file:", belay.ErrInvalid, url)
	}
	return "", fmt.Errorf("%w: store %q is not file: or postgres://USER@HOST/DB", belay.ErrInvalid, url)
}

// storeParams is what opening a store needs from the daemon.
type storeParams struct {
	dir         string
	url         string
	cfg         *Config
	incarnation string
	log         *slog.Logger
	observeSync func(time.Duration)
	// lost is told when the daemon can no longer prove it holds its data
	// dir lock; the daemon then stops.
	lost func(error)
}

// openStore opens the store the setting names and returns it with the
// function that closes it and everything it holds.
//
// On the file store the data dir lock makes the daemon the only process
// writing its sessions (fsstore takes it). On PostgreSQL the sessions live
// in the database and several daemons (nodes) may serve it at once: every
// decision that must hold across them is one store operation (claims under
// the caps, rescue, owner records, fenced leases, notification claims),
// judged by the database's clock. The daemon still takes the data dir
// lock, which guards only the local directory (socket, token, config;
// `belay daemon status` reads it). A database that does not answer makes
// the daemon degraded (health, writes refused), not stopped; it resumes
// by itself when the database answers again, and each run whose lease it
// cannot renew stops its side effects before the lease expires (the
// runtime fences it), so another node may rescue it.
func openStore(ctx context.Context, p storeParams) (store.Store, func(), error) {
	kind, err := StoreKind(p.url)
	if err != nil {
		return nil, nil, err
	}
	if kind == "file" {
		st, err := fsstore.Open(ctx, p.dir, fsstore.Options{
			Purpose: "daemon", Incarnation: p.incarnation, Sync: p.cfg.Store.Sync,
			LockTTL: time.Duration(p.cfg.Store.LockTTL), ObserveSync: p.observeSync, OnLockLost: p.lost,
		})
		if err != nil {
			if errors.Is(err, belay.ErrStoreLocked) {
				return nil, nil, fmt.Errorf("another belay daemon owns %s: %w", p.dir, err)
			}
			return nil, nil, err
		}
		if rep := st.Replayed(); rep.Repaired > 0 {
			p.log.Warn("session journals repaired from the commit log (the machine stopped before they were written back)",
				"journals", rep.Repaired, "records", rep.Records, "segments", rep.Segments, "took", rep.Took)
		}
		ld := st.Loaded()
		if ld.Err != nil {
			p.log.Warn("the store index was not used: every session was loaded from its journal", "err", ld.Err)
		}
		p.log.Info("sessions loaded", "sessions", ld.FromIndex+ld.Opened, "from_index", ld.FromIndex, "from_journal", ld.Opened, "took", ld.Took)
		return st, func() {
			if err := st.Close(); err != nil {
				p.log.Error("closing the store", "err", err)
			}
		}, nil
	}
	if p.cfg.Store.Sync != "" {
		return nil, nil, fmt.Errorf("config: [store] sync applies to the file store only, not to %s", pgstore.Redact(p.url))
	}
	ttl := time.Duration(p.cfg.Store.LockTTL)
	if ttl <= 0 {
		ttl = 15 * time.Second
	}
	var undo []func()
	cleanup := func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	dl := lock.New(filepath.Join(p.dir, fsstore.LockName), lock.Options{TTL: ttl, Incarnation: p.incarnation, Purpose: "daemon"})
	if err := dl.TryAcquire(ctx); err != nil {
		if errors.Is(err, lock.ErrHeld) {
			return nil, nil, fmt.Errorf("another belay daemon owns %s: %w: %v", p.dir, belay.ErrStoreLocked, err)
		}
		return nil, nil, fmt.Errorf("daemon: lock %s: %w", p.dir, err)
	}
	// The data directory's lock guards the socket, token and config here;
	// its loss ends the daemon too, and says which lock it was.
	hb, err := dl.StartHeartbeat(context.WithoutCancel(ctx), lock.HeartbeatOptions{OnLost: func(err error) {
		p.lost(fmt.Errorf("the lock of data directory %s: %w", p.dir, err))
	}})
	if err != nil {
		_ = dl.Release()
		return nil, nil, fmt.Errorf("daemon: heartbeat %s: %w", p.dir, err)
	}
	undo = append(undo, func() {
		_ = hb.Stop(context.Background())
		if dl.Fenced() == nil {
			_ = dl.Release()
		}
	})
	migrate := p.cfg.Store.Migrate == nil || *p.cfg.Store.Migrate
	st, err := pgstore.Open(ctx, p.url, pgstore.Options{Migrate: migrate})
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	undo = append(undo, func() { _ = st.Close() })
	if entries, err := os.ReadDir(filepath.Join(p.dir, fsstore.SessionsName)); err == nil && len(entries) > 0 {
		p.log.Warn("the file store's sessions in this data directory are not served while the store is PostgreSQL",
			"sessions_dir", filepath.Join(p.dir, fsstore.SessionsName), "store", st.URL())
	}
	return st, cleanup, nil
}
