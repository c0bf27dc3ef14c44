package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/belayhq/belay/api"
)

// connLimits raises the soft limit on open files to the hard limit and
// returns the connection and watcher caps below it: opts.MaxConns if set,
// else derived from the limit (api.ConnLimits).
func connLimits(opts Options, log *slog.Logger) (conns, watchers int, err error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, 0, fmt.Errorf("daemon: open file limit: %w", err)
	}
	if rl.Cur < rl.Max {
		raised := rl
		raised.Cur = rl.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err != nil {
			log.Warn("cannot raise the open file limit", "soft", rl.Cur, "hard", rl.Max, "err", err)
		} else {
			rl = raised
		}
	}
	conns, watchers = api.ConnLimits(rl.Cur)
	if opts.MaxConns > 0 {
		if uint64(opts.MaxConns) >= rl.Cur {
			return 0, 0, invalidf("daemon: --max-conns %d is not below the open file limit %d", opts.MaxConns, rl.Cur)
		}
		conns, watchers = opts.MaxConns, max(opts.MaxConns/2, 1)
	}
	log.Info("connection limits", "open_files", rl.Cur, "max_conns", conns, "max_watchers", watchers)
	return conns, watchers, nil
}

// newHTTPServer returns the server of one listener: slow and idle clients
// are timed out, and the limiter keeps the connections within its cap.
func newHTTPServer(h http.Handler, lim *api.ConnLimiter, base context.Context) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       api.DefaultIdleTimeout,
		ConnState:         lim.ConnState,
		BaseContext:       func(net.Listener) context.Context { return base },
	}
}
