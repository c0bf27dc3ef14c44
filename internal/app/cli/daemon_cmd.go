package cli

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/client"
	"github.com/belayhq/belay/internal/proc"
	"github.com/belayhq/belay/lock"
	"github.com/belayhq/belay/store/fsstore"
)

func newDaemonCmd(stdio Stdio) *cobra.Command {
	cmd := &cobra.Command{Use: "daemon", Short: "Start, stop or check the background daemon", Args: noArgs}
	cmd.AddCommand(newDaemonStartCmd(stdio), newDaemonStopCmd(stdio), newDaemonStatusCmd(stdio))
	return cmd
}

// daemonStatus is `belay daemon status --json`.
type daemonStatus struct {
	Running     bool       `json:"running"`
	DataDir     string     `json:"dataDir"`
	PID         int        `json:"pid,omitempty"`
	Incarnation string     `json:"incarnation,omitempty"`
	Version     string     `json:"version,omitempty"`
	StartedAt   *time.Time `json:"startedAt,omitempty"`
	Active      int        `json:"active"`
	Queued      int        `json:"queued"`
	// Status is the daemon's health when it runs: "ok", or "degraded"
	// (it answers but cannot write) with the Problems.
	Status   string       `json:"status,omitempty"`
	Problems []string     `json:"problems,omitempty"`
	Lock     *lock.Status `json:"lock,omitempty"`
}

// daemonStopResult is `belay daemon stop --json`.
type daemonStopResult struct {
	WasRunning bool   `json:"wasRunning"`
	Stopped    bool   `json:"stopped"`
	PID        int    `json:"pid,omitempty"`
	DataDir    string `json:"dataDir"`
}

func newDaemonStartCmd(stdio Stdio) *cobra.Command {
	var g globalOptions
	cmd := &cobra.Command{
		Use: "start", Short: "Start the daemon in the background (no-op if it runs)", Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// An explicit start ignores BELAY_NO_AUTOSTART.
			dir, err := g.dataDir(stdio)
			if err != nil {
				return err
			}
			if st, err := readDaemonStatus(cmd.Context(), stdio, g); err == nil && !st.Running {
				if err := startDaemon(cmd.Context(), stdio, dir); err != nil {
					return err
				}
			}
			return printDaemonStatus(cmd.Context(), stdio, g)
		},
	}
	cmd.Flags().StringVar(&g.Data, "data", "", dataFlagHelp)
	cmd.Flags().BoolVar(&g.JSON, "json", false, "print JSON")
	return cmd
}

func newDaemonStatusCmd(stdio Stdio) *cobra.Command {
	var g globalOptions
	cmd := &cobra.Command{
		Use: "status", Short: "Say whether the daemon runs, and what it does", Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return printDaemonStatus(cmd.Context(), stdio, g) },
	}
	cmd.Flags().StringVar(&g.Data, "data", "", dataFlagHelp)
	cmd.Flags().BoolVar(&g.JSON, "json", false, "print JSON")
	return cmd
}

func readDaemonStatus(ctx context.Context, stdio Stdio, g globalOptions) (daemonStatus, error) {
	dir, err := g.dataDir(stdio)
	if err != nil {
		return daemonStatus{}, err
	}
	st := daemonStatus{DataDir: dir}
	if ls, err := lock.Inspect(filepath.Join(dir, fsstore.LockName), lock.Options{}); err == nil && ls.Holder != nil {
		st.Lock = &ls
	}
	hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	h, err := newClient(stdio, dir).Health(hctx)
	if err != nil {
		if client.IsUnreachable(err) {
			return st, nil
		}
		return st, err
	}
	st.Running, st.PID, st.Incarnation, st.Version = true, h.PID, h.Incarnation, h.Version
	st.StartedAt, st.Active, st.Queued = &h.StartedAt, h.Active, h.Queued
	st.Status, st.Problems = h.Status, h.Problems
	return st, nil
}

func printDaemonStatus(ctx context.Context, stdio Stdio, g globalOptions) error {
	st, err := readDaemonStatus(ctx, stdio, g)
	if err != nil {
		return err
	}
	if g.JSON {
		if err := writeJSON(stdio.Out, st); err != nil {
			return err
		}
	} else if st.Running {
		queued := fmt.Sprintf("%d queued runs", st.Queued)
		if st.Queued < 0 {
			queued = "queued runs unknown (the store did not answer)"
		}
		fmt.Fprintf(stdio.Out, "daemon running: pid %d, %d active, %s, data %s (up %s)\n",
			st.PID, st.Active, queued, st.DataDir, time.Since(*st.StartedAt).Round(time.Second))
		for _, p := range st.Problems {
			fmt.Fprintf(stdio.Out, "degraded: %s\n", p)
		}
	} else {
		fmt.Fprintf(stdio.Out, "daemon not running (data %s)\n", st.DataDir)
		if st.Lock != nil && st.Lock.Holder != nil {
			fmt.Fprintf(stdio.Out, "lock: held by pid %d on %s, %s (%s)\n", st.Lock.Holder.PID, st.Lock.Holder.Host, st.Lock.Reason, verdictWord(st.Lock.Stale))
		}
	}
	if !st.Running && st.Lock != nil && st.Lock.Reason == lock.ReasonHung {
		return &exitError{code: ExitUnreachable, err: fmt.Errorf("the daemon that owns %s does not answer: %s\nTry: %s", st.DataDir, st.Lock.Detail, hungHint(*st.Lock))}
	}
	if !st.Running {
		return &exitError{code: ExitUnreachable, err: errors.New("the daemon is not running\nTry: belay daemon start")}
	}
	if st.Status == apitype.HealthDegraded {
		return &exitError{code: ExitUnreachable, err: errors.New("the daemon runs but is degraded: it accepts no writes until its store answers, and resumes by itself then\nTry: belay doctor")}
	}
	return nil
}

func verdictWord(stale bool) string {
	if stale {
		return "stale: the next start takes it over"
	}
	return "live: never taken over"
}

func newDaemonStopCmd(stdio Stdio) *cobra.Command {
	var g globalOptions
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "stop",
		Short: "Stop the daemon gracefully (runs in flight resume at the next start)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if stdio.Getenv("BELAY_URL") != "" {
				return usagef("unset BELAY_URL", "daemon stop only stops the local daemon of the data directory; unset BELAY_URL")
			}
			st, err := readDaemonStatus(cmd.Context(), stdio, g)
			if err != nil {
				return err
			}
			done := func(stopped bool, pid int) error {
				if g.JSON {
					return writeJSON(stdio.Out, daemonStopResult{WasRunning: stopped, Stopped: stopped, PID: pid, DataDir: st.DataDir})
				}
				if stopped {
					fmt.Fprintf(stdio.Out, "daemon stopped (pid %d)\n", pid)
				} else {
					fmt.Fprintln(stdio.Out, "daemon not running")
				}
				return nil
			}
			hung := !st.Running && st.Lock != nil && st.Lock.Reason == lock.ReasonHung && st.Lock.Local
			if !st.Running && !hung {
				return done(false, 0)
			}
			if hung {
				// A live daemon that owns the directory but does not answer
				// (stopped or wedged): it is never replaced, so stopping it
				// is how a person frees the directory. A stopped process
				// handles SIGTERM only once continued.
				st.PID = st.Lock.Holder.PID
				fmt.Fprintf(stdio.Err, "belay: the daemon (pid %d) does not answer: %s; stopping it\n", st.PID, st.Lock.Detail)
				if err := syscall.Kill(st.PID, syscall.SIGCONT); err != nil {
					return fmt.Errorf("signal daemon pid %d: %w", st.PID, err)
				}
			} else if st.Lock == nil || st.Lock.Holder == nil || st.Lock.Stale || st.Lock.Holder.PID != st.PID {
				// Only ever signal the process that holds this data directory.
				return fmt.Errorf("the daemon answering (pid %d) does not hold the lock of %s; not signalling it", st.PID, st.DataDir)
			}
			if err := syscall.Kill(st.PID, syscall.SIGTERM); err != nil {
				return fmt.Errorf("signal daemon pid %d: %w", st.PID, err)
			}
			deadline := time.Now().Add(timeout)
			for time.Now().Before(deadline) {
				if alive, _ := proc.Alive(st.PID); !alive {
					return done(true, st.PID)
				}
				time.Sleep(50 * time.Millisecond)
			}
			return fmt.Errorf("the daemon (pid %d) did not stop within %s", st.PID, timeout)
		},
	}
	cmd.Flags().StringVar(&g.Data, "data", "", dataFlagHelp)
	cmd.Flags().DurationVar(&timeout, "timeout", 40*time.Second, "how long to wait for the daemon to exit")
	cmd.Flags().BoolVar(&g.JSON, "json", false, `print {"wasRunning","stopped","pid","dataDir"}`)
	return cmd
}
