// Package daemon is `belay serve`: it owns a data directory through its
// lock, runs the runtime on the embedded store, and serves the HTTP API on
// a unix socket (and, optionally, on TCP with a bearer token).
package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/api"
	"github.com/belayhq/belay/client"
	"github.com/belayhq/belay/internal/app/mcpserver"
	"github.com/belayhq/belay/internal/atomicfile"
	"github.com/belayhq/belay/internal/gotune"
	"github.com/belayhq/belay/internal/ids"
	"github.com/belayhq/belay/internal/vfs"
	"github.com/belayhq/belay/runtime"
)

// Names in the data directory.
const (
	SocketName = "belay.sock"
	TokenName  = "token"
	LogName    = "daemon.log"
)

// Options configure Run.
type Options struct {
	DataDir string
	// Listen is "" or "tcp:HOST:PORT": serve TCP too, with a bearer token.
	Listen  string
	Version string
	Logger  *slog.Logger
	// Store is the store setting: "" (config's [store] url, else the file
	// store), "file:" or "postgres://..." (see StoreKind).
	Store string
	// Ready, if set, is called once the daemon serves.
	Ready func()
	// MaxConns caps the client connections (0: from the open file limit);
	// watchers are capped at half of it.
	MaxConns int
}

// ErrLocked wraps the error of a second daemon on the same data directory.
var ErrLocked = belay.ErrStoreLocked

// Run serves until ctx is done, then stops gracefully: it stops admitting,
// suspends in-flight runs for the next incarnation, and closes the store.
func Run(ctx context.Context, opts Options) (err error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var tcpAddr string
	if opts.Listen != "" {
		addr, ok := strings.CutPrefix(opts.Listen, "tcp:")
		if !ok || addr == "" {
			return invalidf("daemon: --listen %q: want tcp:HOST:PORT", opts.Listen)
		}
		tcpAddr = addr
	}
	dir := opts.DataDir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("daemon: data dir: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("daemon: data dir: %w", err)
	}
	cfg, err := LoadConfig(dir)
	if err != nil {
		return err
	}

	incarnation := ids.New("inc_")
	var metrics *api.Metrics
	// Losing the data dir lock, or no longer being able to prove it is
	// held, stops every write at once (the store fences itself) and ends
	// the daemon: another process may own the directory now.
	lockLost := make(chan error, 1)
	storeURL := opts.Store
	if storeURL == "" {
		storeURL = cfg.Store.URL
	}
	st, closeStore, err := openStore(ctx, storeParams{
		dir: dir, url: storeURL, cfg: cfg, incarnation: incarnation, log: log,
		observeSync: func(d time.Duration) {
			if metrics != nil {
				metrics.ObserveFsync(d)
			}
		},
		lost: func(err error) {
			select {
			case lockLost <- err:
			default:
			}
		},
	})
	if err != nil {
		return err
	}
	// Everything started below is stopped here, in reverse, whatever path
	// Run returns by.
	var cleanup []func()
	defer func() {
		for i := len(cleanup) - 1; i >= 0; i-- {
			cleanup[i]()
		}
	}()
	cleanup = append(cleanup, closeStore)

	cfg.store = st
	providers, err := buildProviders(cfg, dir)
	if err != nil {
		return err
	}
	for _, k := range cfg.md.Undecoded() {
		return fmt.Errorf("config: unknown key %q", k.String())
	}
	ropts := runtime.Options{Store: st, Providers: providers, Incarnation: incarnation, Logger: log}
	cfg.runtimeOptions(&ropts)
	if ropts.Notify, err = notifyTargets(cfg); err != nil {
		return err
	}
	ropts.OnRunEnd = func(run belay.Run) {
		if metrics != nil {
			metrics.RunEnded(run)
		}
	}
	ropts.OnWatchdog = func(t belay.Tier) {
		if metrics != nil {
			metrics.Watchdog(t)
		}
	}
	ropts.OnStall = func(_ string, err error) {
		if metrics != nil {
			metrics.RunStalled(err)
		}
	}
	rt, err := runtime.New(ropts)
	if err != nil {
		return err
	}
	metrics = api.NewMetrics(rt)

	// Listen before anything runs, so that a bad address or a port in use
	// fails the start before any run is reclaimed.
	sock := filepath.Join(dir, SocketName)
	// The lock is ours, so a socket file left there is a dead daemon's.
	if err := os.Remove(sock); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("daemon: remove stale socket: %w", err)
	}
	ul, sockID, err := listenUnix(sock)
	if err != nil {
		return err
	}
	cleanup = append(cleanup, func() {
		_ = ul.Close()
		if err := removeIfSame(sock, sockID); err != nil {
			log.Warn("leave socket", "socket", sock, "err", err)
		}
	})
	var tl net.Listener
	var token string
	if tcpAddr != "" {
		if token, err = ensureToken(dir); err != nil {
			return err
		}
		if tl, err = net.Listen("tcp", tcpAddr); err != nil {
			return fmt.Errorf("daemon: listen %s: %w", tcpAddr, err)
		}
		cleanup = append(cleanup, func() { _ = tl.Close() })
	}

	reapBrowsers(providers, log)
	if err := rt.Start(ctx); err != nil {
		return err
	}
	cleanup = append(cleanup, func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := rt.Stop(stopCtx); err != nil {
			log.Warn("stop runtime", "err", err)
		}
	})

	maxConns, maxWatchers, err := connLimits(opts, log)
	if err != nil {
		return err
	}
	limiter := api.NewConnLimiter(maxConns)
	metrics.Connections(limiter)
	// The MCP servers at /mcp talk to this daemon through its socket, like
	// any client: they keep no state of their own.
	mcpHTTP := mcpserver.NewHTTP(client.New(client.Options{Socket: sock}), opts.Version, log)
	cleanup = append(cleanup, mcpHTTP.Close)
	srv := api.NewServer(api.Options{
		Runtime: rt, Version: opts.Version, DataDir: dir, Logger: log, Metrics: metrics, MaxWatchers: maxWatchers,
		Export:       exporter(st),
		DaemonDoctor: func(ctx context.Context) (any, error) { return Inspect(ctx, dir, st, true) },
		MCP:          mcpHTTP,
	})
	baseCtx, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	serve := func(l net.Listener, h http.Handler) {
		hs := newHTTPServer(h, limiter, baseCtx)
		go func() {
			if err := hs.Serve(limiter.Listener(l)); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("serve", "addr", l.Addr().String(), "err", err)
			}
		}()
		// Closing ends long polls and streams; clients reconnect.
		cleanup = append(cleanup, func() { _ = hs.Close() })
	}
	cleanup = append(cleanup, cancelBase)
	serve(ul, srv.Handler(""))
	gor := gotune.Current()
	log.Info("serving", "socket", sock, "data", dir, "incarnation", incarnation, "pid", os.Getpid(),
		"gomaxprocs", gor.Procs, "gogc", gor.GCPercent, "gomemlimit", gor.MemLimit)
	if tl != nil {
		serve(tl, srv.Handler(token))
		log.Info("serving", "tcp", tl.Addr().String(), "token_file", filepath.Join(dir, TokenName))
	}
	if opts.Ready != nil {
		opts.Ready()
	}
	select {
	case <-ctx.Done():
		log.Info("stopping: no new runs; in-flight runs are handed to the next start")
		return nil
	case err := <-lockLost:
		log.Error("stopped writing and exiting: this daemon can no longer prove it owns its data directory; its runs resume in the daemon that does (or in another node)", "data", dir, "err", err)
		return fmt.Errorf("%w (data directory %s): %w", ErrFenced, dir, err)
	}
}

// ErrFenced is why a daemon exits after losing (or no longer being able to
// prove) its hold on its data directory.
var ErrFenced = errors.New("daemon: lost ownership of its store")

// removeIfSame unlinks path only if it still names the file id describes:
// a daemon never removes a socket it did not create (a later daemon's).
func removeIfSame(path string, id fs.FileInfo) error {
	cur, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !os.SameFile(cur, id) {
		return fmt.Errorf("%s now belongs to another process; not removing it", path)
	}
	return os.Remove(path)
}

// listenUnix listens on a socket that only the owner can use. It returns
// the socket file's identity: the listener does not unlink the path when
// closed; the caller removes it only if it is still this file.
func listenUnix(path string) (net.Listener, fs.FileInfo, error) {
	old := umask(0o177)
	l, err := net.Listen("unix", path)
	umask(old)
	if err != nil {
		return nil, nil, fmt.Errorf("daemon: listen %s: %w", path, err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	id, err := os.Lstat(path)
	if err == nil {
		err = os.Chmod(path, 0o600)
	}
	if err != nil {
		l.Close()
		return nil, nil, fmt.Errorf("daemon: socket %s: %w", path, err)
	}
	return l, id, nil
}

// ensureToken returns the TCP bearer token, generating it into a 0600 file
// on first use.
func ensureToken(dir string) (string, error) {
	path := filepath.Join(dir, TokenName)
	raw, err := os.ReadFile(path)
	if err == nil {
		fi, serr := os.Stat(path)
		if serr == nil && fi.Mode().Perm()&0o077 != 0 {
			return "", fmt.Errorf("daemon: %s is readable by others; run: chmod 600 %s", path, path)
		}
		if t := strings.TrimSpace(string(raw)); len(t) >= 32 {
			return t, nil
		}
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	token := hex.EncodeToString(b[:])
	if err := atomicfile.WriteFile(vfs.OS, path, []byte(token+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("daemon: write token: %w", err)
	}
	return token, nil
}

// invalidError is a flag value the daemon cannot take: a
// belay.ErrInvalid, so the command line exits with its usage code.
type invalidError struct{ msg string }

func (e *invalidError) Error() string        { return e.msg }
func (e *invalidError) Is(target error) bool { return target == belay.ErrInvalid }

func invalidf(format string, args ...any) error {
	return &invalidError{msg: fmt.Sprintf(format, args...)}
}
