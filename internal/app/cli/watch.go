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
	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/client"
	"github.com/belayhq/belay/internal/ids"
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

// exitFor returns the exit error for a run's status (nil when complete):
// a failure says why and what to do next.
func exitFor(run belay.Run) error {
	switch run.Status {
	case belay.RunComplete:
		return nil
	case belay.RunFailed, belay.RunStranded:
		return &exitError{code: ExitRunFailed, err: errors.New(failureText(run))}
	case belay.RunCancelled:
		return &exitError{code: ExitCancelled, err: fmt.Errorf("run %s was cancelled: %s", run.ID, run.Reason)}
	}
	return stillRunning(run, 0)
}

// stillRunning is exit 5: a local timeout, never a failure (G8).
func stillRunning(run belay.Run, after uint64) error {
	return &exitError{code: ExitStillRunning, err: fmt.Errorf("run %s is still %s; it goes on without you. Follow it again: %s", run.ID, run.Phase, resumeCommand(run.ID, after))}
}

func resumeCommand(run string, after uint64) string {
	cmd := "belay watch " + run
	if after > 0 {
		cmd += fmt.Sprintf(" --after %d", after)
	}
	return cmd
}

type watchOptions struct {
	globalOptions
	After   uint64
	Timeout time.Duration
	// Progress forces the status lines on standard error even when it is
	// not a terminal.
	Progress bool
	// Reconnect bounds how long watch keeps reconnecting to a daemon that
	// does not answer (0: DefaultReconnect).
	Reconnect time.Duration
}

// DefaultReconnect is how long watch waits for an unreachable daemon to
// answer again before it exits 6 with the command that resumes.
const DefaultReconnect = time.Minute

func newWatchCmd(stdio Stdio) *cobra.Command {
	var opts watchOptions
	cmd := &cobra.Command{
		Use:   "watch SESSION|RUN",
		Short: "Stream a run's (or a session's) output live, surviving daemon restarts",
		Long: `Streams the answer of a run (until it ends) or of a session (until
interrupted). Standard output carries only the answer text (or, with
--json, the events as JSON lines), so "belay watch RUN > answer.txt" gets
exactly the answer. Status lines (phase, tool calls, "last activity 3s
ago") go to standard error when it is a terminal, or with --progress.
If the daemon restarts, watch reconnects and resumes after the last event
it showed: nothing is missed or shown twice. If the daemon does not answer
for --reconnect, watch exits 6 with the command that resumes. A --timeout
that passes before the run's end exits 5: the run goes on (watching a
session: while it has a run queued or running).`,
		Args: exactArgs(1, "belay watch run_..."),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			id := args[0]
			isRun, isSession := ids.Check(ids.Run, id) == nil, ids.Check(ids.Session, id) == nil
			if !isRun && !isSession {
				return usagef("belay sessions list", "%q is neither a run id (run_...) nor a session id (ses_...)", id)
			}
			c, err := connect(ctx, stdio, opts.globalOptions, true)
			if err != nil {
				return err
			}
			if isSession {
				return watchSession(ctx, stdio, c, id, opts)
			}
			run, err := c.Run(ctx, id)
			if err != nil {
				return apiError(err)
			}
			return watchRun(ctx, stdio, c, run.Run, opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Data, "data", "", dataFlagHelp)
	f.BoolVar(&opts.JSON, "json", false, "print the events as JSON lines")
	f.Uint64Var(&opts.After, "after", 0, "start after this seq")
	f.DurationVar(&opts.Timeout, "timeout", 0, "stop watching after this long (exit 5 if the run goes on)")
	f.BoolVar(&opts.Progress, "progress", false, "status lines on standard error even when it is not a terminal")
	f.DurationVar(&opts.Reconnect, "reconnect", DefaultReconnect, "how long to keep reconnecting to a daemon that does not answer (then exit 6)")
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

// updateOf reads the data of a run.updated event.
func updateOf(ev belay.Event) belay.RunUpdatedData {
	var d belay.RunUpdatedData
	_ = json.Unmarshal(ev.Data, &d) // for display only: an update that does not decode shows no phase
	return d
}

// phaseOf reads the phase a run.updated event moves to.
func phaseOf(ev belay.Event) belay.RunPhase { return updateOf(ev).Phase }

// printer renders events for people: the answer text alone to stdout,
// status lines to stderr (when progress is on).
type printer struct {
	mu       sync.Mutex // the liveness ticker reads phase and lastActivity
	stdio    Stdio
	json     bool
	progress bool
	// inline: stdout and stderr are the same terminal, so a status line
	// lands in the middle of the answer on screen. The answer's last,
	// unfinished word is held back until it ends, and a status line
	// starts on its own line: no word of the answer is split.
	inline       bool
	pending      string // held back (inline)
	midLine      bool   // the terminal's cursor is after answer text (inline)
	wrote        bool   // any answer text was written
	endsNL       bool   // the answer written so far ends with a newline
	phase        belay.RunPhase
	lastActivity time.Time
}

func newPrinter(stdio Stdio, asJSON, progress bool) *printer {
	out, errTTY := isTTY(stdio.Out), isTTY(stdio.Err)
	return &printer{
		stdio: stdio, json: asJSON,
		progress: !asJSON && (progress || errTTY),
		inline:   !asJSON && out && errTTY,
	}
}

func (p *printer) event(ev belay.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.json {
		_ = json.NewEncoder(p.stdio.Out).Encode(ev)
		return
	}
	switch ev.Type {
	case belay.EventRunText:
		var d belay.TextData
		_ = json.Unmarshal(ev.Data, &d)
		p.text(d.Text)
		p.lastActivity = ev.TS
	case belay.EventRunToolCall:
		var d belay.ToolCall
		_ = json.Unmarshal(ev.Data, &d)
		p.status(fmt.Sprintf("tool %s%s", d.Name, map[bool]string{true: " (side effects)"}[d.SideEffect]))
		p.lastActivity = ev.TS
	case belay.EventRunToolResult:
		var d belay.ToolResult
		_ = json.Unmarshal(ev.Data, &d)
		res := "ok"
		if d.IsError {
			res = "error " + string(d.Class)
		}
		p.status("tool result: " + res)
		p.lastActivity = ev.TS
	case belay.EventRunAnswer:
		var d belay.AnswerData
		_ = json.Unmarshal(ev.Data, &d)
		if d.Offset == 0 {
			// The deltas above were the answer as it streamed; the final
			// answer replaces them as the run's answer.
			p.status(fmt.Sprintf("final answer taken (%s, %d bytes): belay read %s prints it", d.Source, d.Size, ev.Run))
		}
		p.lastActivity = ev.TS
	case belay.EventRunRecovery:
		var d belay.RecoveryData
		_ = json.Unmarshal(ev.Data, &d)
		p.status("recovery: " + d.Decision + ": " + d.Reason)
	case belay.EventRunWatchdog:
		p.status("no progress: the watchdog fired")
	case belay.EventRunUpdated:
		if ph := phaseOf(ev); ph != "" && ph != p.phase {
			p.phase = ph
			if ph == belay.PhaseFinishing || ph.Status().Terminal() {
				// The turn's text has ended: its last word is whole.
				p.write(p.pending)
				p.pending = ""
			}
			p.status(string(ph))
		}
	}
}

// text writes answer text to stdout. p.mu is held.
func (p *printer) text(t string) {
	if p.inline {
		t = p.pending + t
		cut := strings.LastIndexAny(t, " \t\n") + 1
		t, p.pending = t[:cut], t[cut:]
	}
	p.write(t)
}

func (p *printer) write(t string) {
	if t == "" {
		return
	}
	fmt.Fprint(p.stdio.Out, t)
	p.wrote, p.endsNL = true, strings.HasSuffix(t, "\n")
	p.midLine = !p.endsNL
}

// status writes a status line to stderr. p.mu is held.
func (p *printer) status(s string) {
	if !p.progress {
		return
	}
	if p.inline && p.midLine {
		fmt.Fprintln(p.stdio.Err)
		p.midLine = false
	}
	line := "· " + s
	if !p.lastActivity.IsZero() {
		line += fmt.Sprintf(" · last activity %s ago", time.Since(p.lastActivity).Round(time.Second))
	}
	fmt.Fprintln(p.stdio.Err, line)
}

// statusf is status for callers outside event.
func (p *printer) statusf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.status(fmt.Sprintf(format, args...))
}

// finish writes what was held back; on a terminal it ends the answer's
// last line (unless a status line already did), so the prompt does not
// follow it. A file or pipe gets the
// answer exactly.
func (p *printer) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.write(p.pending)
	p.pending = ""
	if p.wrote && p.midLine && isTTY(p.stdio.Out) {
		fmt.Fprintln(p.stdio.Out)
		p.midLine = false
	}
}

// ticker prints a liveness line every interval until stop is closed.
func (p *printer) ticker(stop <-chan struct{}, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			p.mu.Lock()
			p.status(string(p.phase))
			p.mu.Unlock()
		}
	}
}

func isTTY(w any) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// follow is the client's Follow with watch's reconnect bound and status.
func follow(ctx context.Context, c *client.Client, p *printer, session string, after uint64, opts watchOptions, fn func(belay.Event) error) error {
	reconnect := opts.Reconnect
	if reconnect <= 0 {
		reconnect = DefaultReconnect
	}
	return c.Follow(ctx, session, after, client.FollowOptions{
		MaxOutage: reconnect,
		OnDisconnect: func(err error, seq uint64) {
			p.statusf("connection to the daemon lost; reconnecting after seq %d", seq)
		},
	}, fn)
}

// watchRun streams one run until it ends, the timeout passes, or ctx ends.
func watchRun(ctx context.Context, stdio Stdio, c *client.Client, run belay.Run, opts watchOptions) error {
	after := opts.After
	if after == 0 && run.InputSeq > 0 {
		after = run.InputSeq - 1
	}
	if run.Status.Terminal() && after >= run.InputSeq && !endAhead(ctx, c, run, after) {
		// A finished run followed from past its end: nothing will come.
		return exitFor(run)
	}
	wctx := ctx
	if opts.Timeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, opts.Timeout)
		defer cancel()
	}
	p := newPrinter(stdio, opts.JSON, opts.Progress)
	p.lastActivity = run.UpdatedAt
	last := after
	stop := make(chan struct{})
	defer close(stop)
	if p.progress {
		go p.ticker(stop, 10*time.Second)
	}
	ended := false
	err := follow(wctx, c, p, run.Session, after, opts, func(ev belay.Event) error {
		last = ev.Seq
		if ev.Run != run.ID {
			return nil
		}
		p.event(ev)
		if ev.Type != belay.EventRunUpdated {
			return nil
		}
		if u := updateOf(ev); u.Phase.Status().Terminal() {
			// The end event says all the exit needs: no call to a daemon
			// that may be gone a moment later.
			run.Phase, run.Status, run.Error, run.Reason = u.Phase, u.Phase.Status(), u.Error, u.Reason
			ended = true
			return client.ErrStop
		}
		return nil
	})
	p.finish()
	switch {
	case ended:
		p.statusf("%s (run %s)", run.Status, run.ID)
		if run.Status == belay.RunComplete && !opts.JSON && p.progress {
			fmt.Fprintf(stdio.Err, "Read it again: belay read %s\n", run.ID)
		}
		return exitFor(run)
	case err == nil:
		return exitFor(run)
	case wctx.Err() != nil && ctx.Err() == nil:
		if cur, rerr := c.Run(ctx, run.ID); rerr == nil {
			run = cur.Run
		}
		if run.Status.Terminal() {
			return exitFor(run)
		}
		return stillRunning(run, last)
	case client.IsUnreachable(err):
		return &exitError{code: ExitUnreachable, unreachable: true, err: fmt.Errorf("%w; the run goes on without you.\nResume: %s", err, resumeCommand(run.ID, last))}
	}
	return apiError(err)
}

// endAhead reports whether the run's terminal update comes after seq.
func endAhead(ctx context.Context, c *client.Client, run belay.Run, after uint64) bool {
	for {
		page, err := c.Events(ctx, run.Session, after, 1000, 0)
		if err != nil || len(page.Events) == 0 {
			return false
		}
		for _, ev := range page.Events {
			if ev.Run == run.ID && ev.Type == belay.EventRunUpdated && phaseOf(ev).Status().Terminal() {
				return true
			}
			after = ev.Seq
		}
	}
}

// watchSession streams a session's events until ctx or the timeout ends.
func watchSession(ctx context.Context, stdio Stdio, c *client.Client, session string, opts watchOptions) error {
	wctx := ctx
	if opts.Timeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, opts.Timeout)
		defer cancel()
	}
	p := newPrinter(stdio, opts.JSON, opts.Progress)
	run := ""
	last := opts.After
	err := follow(wctx, c, p, session, opts.After, opts, func(ev belay.Event) error {
		last = ev.Seq
		if ev.Run != "" && ev.Run != run {
			run = ev.Run
			p.statusf("run %s", run)
		}
		p.event(ev)
		return nil
	})
	p.finish()
	switch {
	case wctx.Err() != nil && ctx.Err() == nil:
		// The timeout: exit 5 when the session still has a run to
		// come or going on (it goes on without us), else 0.
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		sess, serr := c.Session(sctx, session)
		cancel()
		if client.IsUnreachable(serr) {
			// Whether a run goes on cannot be told: not "done" (0).
			return &exitError{code: ExitUnreachable, unreachable: true, err: fmt.Errorf("%w.\nResume: %s", serr, resumeCommand(session, last))}
		}
		if serr == nil && sess.State == belay.SessionActive {
			return &exitError{code: ExitStillRunning, err: fmt.Errorf("session %s still has a run queued or running; it goes on without you. Follow it again: %s", session, resumeCommand(session, last))}
		}
		return nil
	case client.IsUnreachable(err):
		return &exitError{code: ExitUnreachable, unreachable: true, err: fmt.Errorf("%w.\nResume: %s", err, resumeCommand(session, last))}
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
	var run apitype.Run
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
		if run.Status == belay.RunComplete {
			fmt.Fprintf(stdio.Err, "Read it: belay read %s\n", run.ID)
		}
	}
	if !run.Status.Terminal() {
		return stillRunning(run.Run, 0)
	}
	return exitFor(run.Run)
}
