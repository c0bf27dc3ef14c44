package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/belayhq/belay/client"
	"github.com/belayhq/belay/internal/app/daemon"
	"github.com/belayhq/belay/internal/datadir"
	"github.com/belayhq/belay/lock"
	"github.com/belayhq/belay/store"
	"github.com/belayhq/belay/store/fsstore"
	"github.com/belayhq/belay/store/pgstore"
)

// globalOptions are flags every command that talks to a daemon takes.
type globalOptions struct {
	Data string
	JSON bool
}

func (g *globalOptions) dataDir(stdio Stdio) (string, error) {
	return datadir.Resolve(g.Data, stdio.Getenv)
}

// errUnreachable is exit 6; Main adds what to try (unreachableHint).
func errUnreachable(err error) error {
	return &exitError{code: ExitUnreachable, err: err, unreachable: true}
}

// unreachableHint is what to try when no daemon answered: a remote one
// (BELAY_URL) is not started from here; a local one is, unless
// BELAY_NO_AUTOSTART turned that off.
func unreachableHint(getenv func(string) string) string {
	switch {
	case getenv("BELAY_URL") != "":
		return fmt.Sprintf("check that a daemon serves %s (belay serve --listen tcp:HOST:PORT on its machine), or unset BELAY_URL to use the local daemon", getenv("BELAY_URL"))
	case getenv("BELAY_NO_AUTOSTART") == "1":
		return "belay daemon start (or unset BELAY_NO_AUTOSTART)"
	}
	return "belay daemon start"
}

// errOverloaded is exit 6 too: the daemon is alive but refused the request
// at its connection or watcher limit, so it was not processed.
func errOverloaded(err error) error {
	return &exitError{code: ExitUnreachable, err: fmt.Errorf("the belay daemon is overloaded: %w\nTry: the same command again in a few seconds; belay daemon status shows the daemon", err)}
}

// newClient returns a client for the daemon: over TCP if BELAY_URL is set
// (with BELAY_TOKEN, or the data directory's token file), else over the
// data directory's unix socket.
func newClient(stdio Stdio, dir string) *client.Client {
	if u := stdio.Getenv("BELAY_URL"); u != "" {
		// The form belay serve --listen takes is taken here too.
		if addr, ok := strings.CutPrefix(u, "tcp:"); ok {
			u = "http://" + addr
		}
		token := stdio.Getenv("BELAY_TOKEN")
		if token == "" {
			if raw, err := os.ReadFile(filepath.Join(dir, daemon.TokenName)); err == nil {
				token = strings.TrimSpace(string(raw))
			}
		}
		return client.New(client.Options{BaseURL: u, Token: token})
	}
	return client.New(client.Options{Socket: filepath.Join(dir, daemon.SocketName)})
}

// connect returns a client of a daemon that answers, starting one in the
// background if none does (unless BELAY_NO_AUTOSTART=1 or autostart is
// false).
func connect(ctx context.Context, stdio Stdio, g globalOptions, autostart bool) (*client.Client, error) {
	dir, err := g.dataDir(stdio)
	if err != nil {
		return nil, err
	}
	c := newClient(stdio, dir)
	hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = c.Health(hctx)
	timedOut := errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil
	cancel()
	switch {
	case err == nil:
		return c, nil
	case errors.Is(err, client.ErrOverloaded):
		return nil, errOverloaded(err)
	case timedOut:
		// Something answers on the socket but not in time: a hung or
		// saturated daemon. Starting another one would not help.
		return nil, &exitError{code: ExitUnreachable, err: fmt.Errorf("the belay daemon of %s did not answer within 5s (hung or overloaded)\nTry: belay doctor", dir)}
	case !client.IsUnreachable(err):
		return nil, err
	}
	if !autostart || stdio.Getenv("BELAY_NO_AUTOSTART") == "1" || stdio.Getenv("BELAY_URL") != "" {
		return nil, errUnreachable(err)
	}
	if err := startDaemon(ctx, stdio, dir); err != nil {
		return nil, err
	}
	return c, nil
}

// startDaemon starts `belay serve` detached (its own session, output to
// <data>/daemon.log) and waits until it answers.
func startDaemon(ctx context.Context, stdio Stdio, dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	// A config the daemon would refuse is said as itself, not as an
	// unreachable daemon.
	if err := daemon.CheckConfig(dir); err != nil {
		return fmt.Errorf("%w\nNo daemon can start until this is fixed; then: belay daemon start", err)
	}
	exe, err := selfExecutable()
	if err != nil {
		return fmt.Errorf("cannot find the belay executable to start the daemon: %w", err)
	}
	logf, err := os.OpenFile(filepath.Join(dir, daemon.LogName), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	logStart, _ := logf.Seek(0, io.SeekEnd)
	cmd := exec.Command(exe, "serve", "--data", dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Env = os.Environ()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the daemon: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	c := client.New(client.Options{Socket: filepath.Join(dir, daemon.SocketName)})
	deadline := time.Now().Add(15 * time.Second)
	var exitErr error
	exitCode := ExitError
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			// It exited: most likely another daemon (started by another
			// command at the same moment) holds the lock; wait for that one
			// while it is alive.
			exitErr = fmt.Errorf("%v", err)
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				switch ee.ExitCode() {
				case ExitUnreachable:
					exitCode = ExitUnreachable // its store did not answer
				case ExitUsage:
					exitCode = ExitUsage // it refused its settings (a store URL the database refused, say)
				}
			}
			exited = nil
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if _, err := c.Health(ctx); err == nil {
			// Name the daemon that actually runs: with racing autostarts
			// it may be another command's.
			pid := cmd.Process.Pid
			if st, err := lock.Inspect(filepath.Join(dir, fsstore.LockName), lock.Options{}); err == nil && st.Holder != nil && !st.Stale {
				pid = st.Holder.PID
			}
			if pid == cmd.Process.Pid {
				fmt.Fprintf(stdio.Err, "belay: started the daemon (pid %d, log %s)\n", pid, filepath.Join(dir, daemon.LogName))
			} else {
				fmt.Fprintf(stdio.Err, "belay: using the daemon another command started (pid %d)\n", pid)
			}
			return nil
		}
		if exitErr != nil {
			st, err := lock.Inspect(filepath.Join(dir, fsstore.LockName), lock.Options{})
			if err == nil && st.Reason == lock.ReasonHung {
				// A live daemon owns the directory but does not answer: it
				// is never replaced; the person decides.
				return &exitError{code: ExitUnreachable, err: fmt.Errorf("the daemon that owns %s does not answer: %s\nTry: %s", dir, st.Detail, hungHint(st))}
			}
			if err != nil || st.Holder == nil || st.Stale {
				logPath := filepath.Join(dir, daemon.LogName)
				if why := lastLogLine(logPath, logStart); why != "" {
					return &exitError{code: exitCode, err: fmt.Errorf("the daemon exited at start: %s\n(see %s)", why, logPath)}
				}
				return &exitError{code: exitCode, err: fmt.Errorf("the daemon exited at start (%v); see %s", exitErr, logPath)}
			}
		}
	}
	return errUnreachable(errors.New("the daemon did not answer within 15s; see " + filepath.Join(dir, daemon.LogName)))
}

// lastLogLine returns the last line the daemon wrote to its log after
// offset, without the "belay: " prefix.
func lastLogLine(path string, offset int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return ""
	}
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" && !strings.HasPrefix(l, "Try:") {
			return strings.TrimPrefix(l, "belay: ")
		}
	}
	return ""
}

// hungHint is what to do about a live daemon that does not heartbeat: it
// is never replaced, so a person resumes it (if stopped) or stops it.
func hungHint(st lock.Status) string {
	if st.Stopped {
		return st.Action + " (resume it), or belay daemon stop"
	}
	return "belay daemon stop"
}

// openOffline opens the store a daemon of the data directory would open,
// for commands that fall back to it when no daemon answers: the data
// directory's files read-only, or the PostgreSQL database that
// $BELAY_STORE or config.toml's [store] url names (read through, not
// migrated). A config the daemon would refuse leaves the files.
func openOffline(ctx context.Context, stdio Stdio, g globalOptions) (store.Store, error) {
	dir, err := g.dataDir(stdio)
	if err != nil {
		return nil, err
	}
	if url, err := resolveStore(stdio, "", &g); err == nil {
		if kind, _ := daemon.StoreKind(url); kind == "postgres" {
			st, err := pgstore.Open(ctx, url, pgstore.Options{MaxConns: 2})
			if err != nil {
				return nil, err // not a typed nil in the interface
			}
			return st, nil
		}
	}
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("no data directory at %s: nothing to read", dir)
	}
	st, err := fsstore.Open(ctx, dir, fsstore.Options{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	return st, nil
}

// offlineNote says where a command without a daemon read from.
func offlineNote(stdio Stdio, st store.Store) {
	if ps, ok := st.(*pgstore.Store); ok && ps != nil {
		fmt.Fprintf(stdio.Err, "belay: the daemon is not running; read from the database %s\n", ps.URL())
		return
	}
	fmt.Fprintln(stdio.Err, "belay: the daemon is not running; read from the files (read-only)")
}

// selfExecutable returns the path this program was started as (so that a
// daemon started from a wrapper or a link runs the same way), falling back
// to the resolved executable.
func selfExecutable() (string, error) {
	if arg0 := os.Args[0]; arg0 != "" {
		if strings.ContainsRune(arg0, filepath.Separator) {
			if p, err := filepath.Abs(arg0); err == nil {
				if _, err := os.Stat(p); err == nil {
					return p, nil
				}
			}
		} else if p, err := exec.LookPath(arg0); err == nil {
			return p, nil
		}
	}
	return os.Executable()
}
