package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/api"
	"github.com/belayhq/belay/client"
	"github.com/belayhq/belay/internal/ids"
	brt "github.com/belayhq/belay/runtime"
)

// apiError maps client errors onto exit codes.
func apiError(err error) error {
	if client.IsUnreachable(err) {
		return errUnreachable(err)
	}
	if errors.Is(err, client.ErrOverloaded) {
		return errOverloaded(err)
	}
	return err
}

// exitFor returns the exit error for a run's status (nil when complete).
func exitFor(run belay.Run) error {
	switch run.Status {
	case belay.RunComplete:
		return nil
	case belay.RunFailed, belay.RunStranded:
		msg := fmt.Sprintf("run %s %s", run.ID, run.Status)
		if run.Error != nil {
			msg += " (" + string(run.Error.Class) + ")"
		}
		if run.Reason != "" {
			msg += ": " + run.Reason
		}
		if run.Status == belay.RunStranded {
			msg += "\nTry: belay sessions doctor " + run.Session
		}
		return &exitError{code: ExitRunFailed, err: errors.New(msg)}
	case belay.RunCancelled:
		return &exitError{code: ExitCancelled, err: fmt.Errorf("run %s was cancelled: %s", run.ID, run.Reason)}
	}
	return stillRunning(run, 0)
}

// stillRunning is exit 5: a local timeout, never a failure (G8).
func stillRunning(run belay.Run, after uint64) error {
	hint := "belay watch " + run.ID
	if after > 0 {
		hint += fmt.Sprintf(" --after %d", after)
	}
	return &exitError{code: ExitStillRunning, err: fmt.Errorf("run %s is still %s; it goes on without you. Follow it again: %s", run.ID, run.Phase, hint)}
}

type watchOptions struct {
	globalOptions
	After   uint64
	Timeout time.Duration
}

func newWatchCmd(stdio Stdio) *cobra.Command {
	var opts watchOptions
	cmd := &cobra.Command{
		Use:   "watch SESSION|RUN",
		Short: "Stream a run's (or a session's) output live, surviving daemon restarts",
		Long: `Streams the output of a run (until it ends) or of a session (until
interrupted), with a status line on standard error giving the phase and the
time since the last activity. If the daemon restarts, watch reconnects and
resumes after the last event it showed: nothing is missed or shown twice.
A --timeout that passes before the run's end exits 5: the run goes on.`,
		Args: exactArgs(1, "belay watch run_..."),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := connect(ctx, stdio, opts.globalOptions, true)
			if err != nil {
				return err
			}
			id := args[0]
			switch {
			case ids.Check(ids.Run, id) == nil:
				run, err := c.Run(ctx, id)
				if err != nil {
					return apiError(err)
				}
				return watchRun(ctx, stdio, c, run.Run, opts.After, opts.Timeout, opts.JSON)
			case ids.Check(ids.Session, id) == nil:
				return watchSession(ctx, stdio, c, id, opts.After, opts.Timeout, opts.JSON)
			}
			return usagef("belay sessions list", "%q is neither a run id (run_...) nor a session id (ses_...)", id)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Data, "data", "", dataFlagHelp)
	f.BoolVar(&opts.JSON, "json", false, "print the events as JSON lines")
	f.Uint64Var(&opts.After, "after", 0, "start after this seq")
	f.DurationVar(&opts.Timeout, "timeout", 0, "stop watching after this long (exit 5 if the run goes on)")
	return cmd
}

// exactArgs requires n positional arguments.
func exactArgs(n int, hint string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef(hint, "%s takes %d argument(s), got %d", cmd.CommandPath(), n, len(args))
		}
		return nil
	}
}

// phaseOf reads the phase a run.updated event moves to.
func phaseOf(ev belay.Event) belay.RunPhase {
	var d struct {
		Phase belay.RunPhase `json:"phase"`
	}
	_ = json.Unmarshal(ev.Data, &d)
	return d.Phase
}

// printer renders events for people: text to stdout, the rest to stderr.
type printer struct {
	mu           sync.Mutex // the liveness ticker reads phase and lastActivity
	stdio        Stdio
	json         bool
	tty          bool
	phase        belay.RunPhase
	lastActivity time.Time
	midLine      bool
}

func (p *printer) event(ev belay.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.json {
		_ = json.NewEncoder(p.stdio.Out).Encode(ev)
		return
	}
	switch ev.Type {
	case brt.EventText:
		var d struct{ Text string }
		_ = json.Unmarshal(ev.Data, &d)
		fmt.Fprint(p.stdio.Out, d.Text)
		p.midLine = !strings.HasSuffix(d.Text, "\n")
		p.lastActivity = ev.TS
	case brt.EventToolCall:
		var d struct {
			Name       string
			SideEffect bool
		}
		_ = json.Unmarshal(ev.Data, &d)
		p.status(fmt.Sprintf("tool %s%s", d.Name, map[bool]string{true: " (side effects)"}[d.SideEffect]))
		p.lastActivity = ev.TS
	case brt.EventToolResult:
		var d struct {
			IsError bool
			Class   string
		}
		_ = json.Unmarshal(ev.Data, &d)
		res := "ok"
		if d.IsError {
			res = "error " + d.Class
		}
		p.status("tool result: " + res)
		p.lastActivity = ev.TS
	case brt.EventRecovery:
		var d struct{ Decision, Reason string }
		_ = json.Unmarshal(ev.Data, &d)
		p.status("recovery: " + d.Decision + ": " + d.Reason)
	case brt.EventWatchdog:
		p.status("no progress: the watchdog fired")
	case "run.updated":
		if ph := phaseOf(ev); ph != "" && ph != p.phase {
			p.phase = ph
			p.status(string(ph))
		}
	}
}

// status writes a status line to stderr.
func (p *printer) status(s string) {
	if p.json {
		return
	}
	if p.midLine {
		fmt.Fprintln(p.stdio.Out)
		p.midLine = false
	}
	line := "· " + s
	if !p.lastActivity.IsZero() {
		line += fmt.Sprintf(" · last activity %s ago", time.Since(p.lastActivity).Round(time.Second))
	}
	fmt.Fprintln(p.stdio.Err, line)
}

func isTTY(w any) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// watchRun streams one run until it ends, the timeout passes, or ctx ends.
func watchRun(ctx context.Context, stdio Stdio, c *client.Client, run belay.Run, after uint64, timeout time.Duration, asJSON bool) error {
	if after == 0 && run.InputSeq > 0 {
		after = run.InputSeq - 1
	}
	if run.Status.Terminal() && after >= run.InputSeq && !endAhead(ctx, c, run, after) {
		// A finished run followed from past its end: nothing will come.
		return exitFor(run)
	}
	wctx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	p := &printer{stdio: stdio, json: asJSON, tty: isTTY(stdio.Err), lastActivity: run.UpdatedAt}
	last := after
	stop := make(chan struct{})
	defer close(stop)
	if p.tty && !asJSON {
		go func() { // liveness between events
			t := time.NewTicker(10 * time.Second)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					p.mu.Lock()
					fmt.Fprintf(stdio.Err, "· %s · last activity %s ago\n", p.phase, time.Since(p.lastActivity).Round(time.Second))
					p.mu.Unlock()
				}
			}
		}()
	}
	err := c.Follow(wctx, run.Session, after, client.FollowOptions{
		OnDisconnect: func(err error, seq uint64) {
			if !asJSON {
				fmt.Fprintf(stdio.Err, "· connection to the daemon lost; reconnecting after seq %d\n", seq)
			}
		},
	}, func(ev belay.Event) error {
		last = ev.Seq
		if ev.Run != run.ID {
			return nil
		}
		p.event(ev)
		if ev.Type == "run.updated" && phaseOf(ev).Status().Terminal() {
			return client.ErrStop
		}
		return nil
	})
	if p.midLine {
		fmt.Fprintln(stdio.Out)
	}
	if err != nil {
		if wctx.Err() != nil && ctx.Err() == nil {
			cur, rerr := c.Run(ctx, run.ID)
			if rerr == nil {
				run = cur.Run
			}
			if run.Status.Terminal() {
				return exitFor(run)
			}
			return stillRunning(run, last)
		}
		return apiError(err)
	}
	final, err := c.Run(ctx, run.ID)
	if err != nil {
		return apiError(err)
	}
	if !asJSON {
		fmt.Fprintf(stdio.Err, "· %s (run %s)\n", final.Status, final.ID)
	}
	return exitFor(final.Run)
}

// endAhead reports whether the run's terminal update comes after seq.
func endAhead(ctx context.Context, c *client.Client, run belay.Run, after uint64) bool {
	for {
		page, err := c.Events(ctx, run.Session, after, 1000, 0)
		if err != nil || len(page.Events) == 0 {
			return false
		}
		for _, ev := range page.Events {
			if ev.Run == run.ID && ev.Type == "run.updated" && phaseOf(ev).Status().Terminal() {
				return true
			}
			after = ev.Seq
		}
	}
}

// watchSession streams a session's events until ctx or the timeout ends.
func watchSession(ctx context.Context, stdio Stdio, c *client.Client, session string, after uint64, timeout time.Duration, asJSON bool) error {
	wctx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	p := &printer{stdio: stdio, json: asJSON}
	run := ""
	err := c.Follow(wctx, session, after, client.FollowOptions{
		OnDisconnect: func(err error, seq uint64) {
			if !asJSON {
				fmt.Fprintf(stdio.Err, "· connection to the daemon lost; reconnecting after seq %d\n", seq)
			}
		},
	}, func(ev belay.Event) error {
		if ev.Run != "" && ev.Run != run && !asJSON {
			run = ev.Run
			p.status("run " + run)
		}
		p.event(ev)
		return nil
	})
	if p.midLine {
		fmt.Fprintln(stdio.Out)
	}
	if wctx.Err() != nil && ctx.Err() == nil {
		return nil
	}
	return apiError(err)
}

type waitOptions struct {
	globalOptions
	Timeout time.Duration
}

// waitResult is `belay wait --json`.
type waitResult struct {
	Run     string          `json:"run"`
	Session string          `json:"session"`
	Status  belay.RunStatus `json:"status"`
	Phase   belay.RunPhase  `json:"phase"`
	Error   *belay.RunError `json:"error"`
	Reason  string          `json:"reason,omitempty"`
}

func newWaitCmd(stdio Stdio) *cobra.Command {
	var opts waitOptions
	cmd := &cobra.Command{
		Use:   "wait RUN",
		Short: "Wait for a run to end; exit 0 complete, 3 failed or stranded, 4 cancelled, 5 still running at --timeout",
		Args:  exactArgs(1, "belay wait run_..."),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := ids.Check(ids.Run, args[0]); err != nil {
				return usagef("belay wait run_...", "%v", err)
			}
			c, err := connect(cmd.Context(), stdio, opts.globalOptions, true)
			if err != nil {
				return err
			}
			return waitRun(cmd.Context(), stdio, c, args[0], opts.Timeout, opts.JSON)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Data, "data", "", dataFlagHelp)
	f.BoolVar(&opts.JSON, "json", false, `print {"run","status","error":{"class",...}}`)
	f.DurationVar(&opts.Timeout, "timeout", 0, "give up waiting after this long (exit 5; the run goes on)")
	return cmd
}

// waitRun waits for a run's end, riding out daemon restarts.
func waitRun(ctx context.Context, stdio Stdio, c *client.Client, id string, timeout time.Duration, asJSON bool) error {
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	var run api.Run
	backoff := 50 * time.Millisecond
	for {
		step := 50 * time.Second
		if !deadline.IsZero() {
			step = min(step, time.Until(deadline))
		}
		r, err := c.WaitRun(ctx, id, max(step, 0))
		switch {
		case err == nil:
			run, backoff = r, 50*time.Millisecond
		case client.IsUnreachable(err) && (deadline.IsZero() || time.Now().Before(deadline)):
			// The daemon restarts: wait for it.
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
			continue
		default:
			return apiError(err)
		}
		if run.Status.Terminal() || (!deadline.IsZero() && !time.Now().Before(deadline)) {
			break
		}
	}
	if asJSON {
		if err := writeJSON(stdio.Out, waitResult{Run: run.ID, Session: run.Session, Status: run.Status, Phase: run.Phase, Error: run.Error, Reason: run.Reason}); err != nil {
			return err
		}
	} else if run.Status.Terminal() {
		fmt.Fprintf(stdio.Out, "%s %s\n", run.ID, run.Status)
	}
	if !run.Status.Terminal() {
		return stillRunning(run.Run, 0)
	}
	return exitFor(run.Run)
}
