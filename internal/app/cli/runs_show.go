package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/ids"
	"github.com/belayhq/belay/provider"
)

// runReport is `belay runs show RUN --json`: a run and what happened in
// each of its attempts. It holds no prompt or answer text.
type runReport struct {
	Run        belay.Run        `json:"run"`
	Attempts   []attemptReport  `json:"attempts"`
	Recoveries []recoveryReport `json:"recoveries"`
	Watchdog   []watchdogReport `json:"watchdog"`
	Suspended  []noteReport     `json:"suspended"`
	// Wakeups are the MCP wake-ups of the run: who was to be notified of
	// its end, and whether and when they were.
	Wakeups []wakeReport `json:"wakeups"`
}

type wakeReport struct {
	To        string               `json:"to"`
	Status    belay.DeliveryStatus `json:"status"`
	Attempts  int                  `json:"attempts"`
	Result    string               `json:"result,omitempty"`
	SettledAt time.Time            `json:"settledAt,omitzero"`
}

type attemptReport struct {
	Attempt   int          `json:"attempt"`
	Resume    bool         `json:"resume"`
	StartedAt time.Time    `json:"startedAt"`
	EndedAt   time.Time    `json:"endedAt,omitzero"`
	Seconds   float64      `json:"seconds,omitempty"`
	Errors    []errReport  `json:"errors"`
	Tools     []toolReport `json:"toolCalls"`
}

type errReport struct {
	At time.Time `json:"at"`
	belay.ErrorData
}

type toolReport struct {
	ID         string           `json:"id"`
	Tool       string           `json:"tool"`
	SideEffect bool             `json:"sideEffect"`
	At         time.Time        `json:"at"`
	Settled    bool             `json:"settled"`
	SettledAt  time.Time        `json:"settledAt,omitzero"`
	IsError    bool             `json:"isError,omitempty"`
	Class      belay.ErrorClass `json:"class,omitempty"`
}

type recoveryReport struct {
	At time.Time `json:"at"`
	belay.RecoveryData
}

type watchdogReport struct {
	At time.Time `json:"at"`
	belay.WatchdogData
}

type noteReport struct {
	At time.Time `json:"at"`
	belay.SuspendedData
}

func newRunsShowCmd(stdio Stdio) *cobra.Command {
	var g globalOptions
	cmd := &cobra.Command{
		Use:   "show RUN",
		Short: "Show a run: every attempt with its errors (class, message), timing, tool calls and their settlement, recoveries (works with the daemon down)",
		Args:  exactArgs(1, "belay runs show run_..."),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := ids.Check(ids.Run, args[0]); err != nil {
				return usagef("belay runs list", "%v", err)
			}
			src, err := openSource(cmd.Context(), stdio, g)
			if err != nil {
				return err
			}
			defer src.close()
			rep, err := showRun(cmd.Context(), src, args[0])
			if err != nil {
				return err
			}
			if g.JSON {
				return writeJSON(stdio.Out, rep)
			}
			printRunReport(stdio, rep)
			return nil
		},
	}
	cmd.Flags().StringVar(&g.Data, "data", "", dataFlagHelp)
	cmd.Flags().BoolVar(&g.JSON, "json", false, "print JSON")
	return cmd
}

// showRun folds a run's journal events into its report.
func showRun(ctx context.Context, src source, id string) (runReport, error) {
	run, err := src.run(ctx, id)
	if err != nil {
		return runReport{}, err
	}
	rep := runReport{Run: run, Attempts: []attemptReport{}, Recoveries: []recoveryReport{}, Watchdog: []watchdogReport{}, Suspended: []noteReport{}, Wakeups: []wakeReport{}}
	ds, err := src.inbox(ctx, run.Session)
	if err != nil {
		return rep, err
	}
	for _, d := range ds {
		if d.To != "" && d.AfterRun == id {
			rep.Wakeups = append(rep.Wakeups, wakeReport{To: d.To, Status: d.Status, Attempts: d.Attempts, Result: d.Result, SettledAt: d.SettledAt})
		}
	}
	after := run.InputSeq
	if after > 0 {
		after--
	}
	cur := func() *attemptReport {
		if len(rep.Attempts) == 0 {
			rep.Attempts = append(rep.Attempts, attemptReport{Errors: []errReport{}, Tools: []toolReport{}})
		}
		return &rep.Attempts[len(rep.Attempts)-1]
	}
	end := func(at time.Time) {
		if a := cur(); a.EndedAt.IsZero() && !a.StartedAt.IsZero() {
			a.EndedAt, a.Seconds = at, at.Sub(a.StartedAt).Seconds()
		}
	}
	for done := false; !done; {
		evs, err := src.events(ctx, run.Session, after, 1000)
		if err != nil {
			return rep, err
		}
		if len(evs) == 0 {
			break
		}
		for _, e := range evs {
			after = e.Seq
			if e.Run != id {
				continue
			}
			switch e.Type {
			case belay.EventRunUpdated:
				var u struct {
					Phase belay.RunPhase    `json:"phase"`
					Data  belay.AttemptData `json:"data"`
				}
				_ = json.Unmarshal(e.Data, &u)
				if u.Data.Attempt > 0 {
					if len(rep.Attempts) > 0 {
						end(e.TS)
					}
					rep.Attempts = append(rep.Attempts, attemptReport{Attempt: u.Data.Attempt, Resume: u.Data.Resume, StartedAt: e.TS, Errors: []errReport{}, Tools: []toolReport{}})
				}
				if u.Phase.Status().Terminal() {
					end(e.TS)
					done = true
				}
			case belay.EventRunError:
				var d belay.ErrorData
				_ = json.Unmarshal(e.Data, &d)
				a := cur()
				a.Errors = append(a.Errors, errReport{At: e.TS, ErrorData: d})
			case belay.EventRunToolCall:
				var c provider.Call
				_ = json.Unmarshal(e.Data, &c)
				a := cur()
				a.Tools = append(a.Tools, toolReport{ID: c.ID, Tool: c.Name, SideEffect: c.SideEffect, At: e.TS})
			case belay.EventRunToolResult:
				var r provider.Result
				_ = json.Unmarshal(e.Data, &r)
				a := cur()
				for i := range a.Tools {
					if t := &a.Tools[i]; t.ID == r.CallID && !t.Settled {
						t.Settled, t.SettledAt, t.IsError, t.Class = true, e.TS, r.IsError, r.Class
						break
					}
				}
			case belay.EventRunRecovery:
				var d recoveryReport
				_ = json.Unmarshal(e.Data, &d)
				d.At = e.TS
				rep.Recoveries = append(rep.Recoveries, d)
			case belay.EventRunWatchdog:
				var d watchdogReport
				_ = json.Unmarshal(e.Data, &d)
				d.At = e.TS
				rep.Watchdog = append(rep.Watchdog, d)
			case belay.EventRunSuspended:
				var d noteReport
				_ = json.Unmarshal(e.Data, &d)
				d.At = e.TS
				rep.Suspended = append(rep.Suspended, d)
			}
			if done {
				break
			}
		}
	}
	return rep, nil
}

func printRunReport(stdio Stdio, rep runReport) {
	r := rep.Run
	out := stdio.Out
	fmt.Fprintf(out, "run       %s\nsession   %s\nprovider  %s %s\nstatus    %s (%s)\n", r.ID, r.Session, r.Provider, r.Model, r.Status, r.Phase)
	if r.Error != nil {
		fmt.Fprintf(out, "error     %s: %s\n", r.Error.Class, r.Error.Message)
	}
	if r.Reason != "" {
		fmt.Fprintf(out, "reason    %s\n", r.Reason)
	}
	if len(r.Tags) > 0 {
		fmt.Fprintf(out, "tags      %s\n", strings.Join(r.Tags, ", "))
	}
	for k, v := range r.Meta {
		fmt.Fprintf(out, "meta      %s=%s\n", k, v)
	}
	fmt.Fprintf(out, "created   %s\n", r.CreatedAt.Local().Format(time.DateTime))
	if !r.EndedAt.IsZero() {
		fmt.Fprintf(out, "ended     %s (%s after creation)\n", r.EndedAt.Local().Format(time.DateTime), r.EndedAt.Sub(r.CreatedAt).Round(time.Millisecond))
	}
	for _, a := range rep.Attempts {
		how := "fresh"
		if a.Resume {
			how = "resumed"
		}
		fmt.Fprintf(out, "\nattempt %d (%s) started %s", a.Attempt, how, a.StartedAt.Local().Format(time.TimeOnly))
		if !a.EndedAt.IsZero() {
			fmt.Fprintf(out, ", %.1fs", a.Seconds)
		}
		fmt.Fprintln(out)
		for _, e := range a.Errors {
			// A message may already start with its class ("auth: ...").
			fmt.Fprintf(out, "  error %s: %s\n", e.Class, strings.TrimPrefix(e.Message, string(e.Class)+": "))
		}
		for _, t := range a.Tools {
			state := "NOT SETTLED"
			if t.Settled {
				state = "settled"
				if t.IsError {
					state += " with an error " + string(t.Class)
				}
			}
			effect := "no side effect"
			if t.SideEffect {
				effect = "side effect"
			}
			fmt.Fprintf(out, "  tool %s %s (%s): %s\n", t.Tool, t.ID, effect, state)
		}
	}
	for _, rc := range rep.Recoveries {
		fmt.Fprintf(out, "recovery  %s after attempt %d: %s\n", rc.Decision, rc.Attempt, rc.Reason)
	}
	for _, w := range rep.Watchdog {
		fmt.Fprintf(out, "watchdog  %s tier after %.0fs idle\n", w.Tier, w.IdleSeconds)
	}
	for _, s := range rep.Suspended {
		fmt.Fprintf(out, "suspended %s\n", s.Reason)
	}
	for _, w := range rep.Wakeups {
		switch {
		case w.Status == belay.DeliveryDone:
			fmt.Fprintf(out, "wake-up   %s: %s\n", w.To, w.Result)
		case w.Status == belay.DeliveryError:
			fmt.Fprintf(out, "wake-up   %s: MISSED: %s\n", w.To, w.Result)
		case r.Status.Terminal():
			fmt.Fprintf(out, "wake-up   %s: not delivered yet (%d attempts)\n", w.To, w.Attempts)
		default:
			fmt.Fprintf(out, "wake-up   %s: when the run ends\n", w.To)
		}
	}
}
