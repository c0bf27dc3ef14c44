package cli

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/client"
	"github.com/belayhq/belay/internal/ids"
)

func newRunsCmd(stdio Stdio) *cobra.Command {
	cmd := &cobra.Command{Use: "runs", Short: "Runs across sessions: list, show, retry", Args: noArgs}
	cmd.AddCommand(newRunsListCmd(stdio), newRunsShowCmd(stdio), newRunsRetryCmd(stdio))
	return cmd
}

type retryOptions struct {
	globalOptions
	AllowSideEffects bool
	IdempotencyKey   string
	Policy           string
	Watch, Wait      bool
	Timeout          time.Duration
	Deadline         deadlineFlag
}

// retryResult is `belay runs retry --json`.
type retryResult struct {
	sendResult
	Retries   string   `json:"retries"`
	MayRepeat []string `json:"mayRepeat"`
}

func newRunsRetryCmd(stdio Stdio) *cobra.Command {
	var opts retryOptions
	cmd := &cobra.Command{
		Use:   "retry RUN",
		Short: "Send a finished run's input again, as a new run in the same session",
		Long: `Creates a new run with the same prompt, script and options as RUN (which
must have ended: failed, stranded, cancelled or complete), in the same
session. It is refused when a side-effecting tool call of RUN settled or
may have, since a retry could run it again; --allow-side-effects retries
anyway and lists what may repeat. The retry is idempotent: its key is
retry-RUN unless --idempotency-key is given, so running the command twice
makes one new run. The new run has the time RUN had from its creation to
its deadline, from now, unless --deadline says otherwise.`,
		Args: exactArgs(1, "belay runs retry run_..."),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			if err := ids.Check(ids.Run, id); err != nil {
				return usagef("belay runs retry run_...", "%v", err)
			}
			switch {
			case opts.Watch && opts.Wait:
				return usagef("belay runs retry "+id+" --wait", "give --watch or --wait, not both")
			case !belay.Policy(opts.Policy).Valid():
				return usagef("belay runs retry "+id+" --policy enqueue", "--policy %q is not enqueue, reject, interrupt or replace", opts.Policy)
			}
			ctx := cmd.Context()
			c, err := connect(ctx, stdio, opts.globalOptions, true)
			if err != nil {
				return err
			}
			res, err := c.RetryRun(ctx, id, apitype.RetryRequest{AllowSideEffects: opts.AllowSideEffects, Policy: belay.Policy(opts.Policy), Deadline: apitype.Duration(opts.Deadline.d)}, opts.IdempotencyKey)
			if err != nil {
				var ce *client.Error
				if errors.As(err, &ce) && ce.Code == apitype.CodeSideEffects {
					return fmt.Errorf("%s\nTo retry anyway (they may run again): belay runs retry %s --allow-side-effects", ce.Message, id)
				}
				return apiError(err)
			}
			if len(res.MayRepeat) > 0 && !opts.JSON {
				fmt.Fprintf(stdio.Err, "belay: side-effecting tools of %s that may run again: %s\n", id, strings.Join(res.MayRepeat, ", "))
			}
			switch {
			case opts.Wait:
				return waitRun(ctx, stdio, c, res.ID, opts.Timeout, opts.JSON)
			case opts.Watch:
				return watchRun(ctx, stdio, c, res.Run.Run, watchOptions{globalOptions: opts.globalOptions, Timeout: opts.Timeout})
			}
			if opts.JSON {
				tools := res.MayRepeat
				if tools == nil {
					tools = []string{}
				}
				return writeJSON(stdio.Out, retryResult{
					sendResult: sendResult{Session: res.Session, Run: res.ID, Status: string(res.Status), Phase: string(res.Phase)},
					Retries:    id, MayRepeat: tools,
				})
			}
			fmt.Fprintf(stdio.Out, "%s %s %s\n", res.ID, res.Session, res.Status)
			fmt.Fprintf(stdio.Err, "Follow it: belay watch %s   Read it: belay read %s\n", res.ID, res.ID)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Data, "data", "", dataFlagHelp)
	f.BoolVar(&opts.JSON, "json", false, `print {"session","run","status","phase","retries","mayRepeat"}`)
	f.BoolVar(&opts.AllowSideEffects, "allow-side-effects", false, "retry even though side-effecting tool calls settled (they may run again)")
	f.StringVar(&opts.IdempotencyKey, "idempotency-key", "", "idempotency key of the retry (default retry-RUN)")
	f.StringVar(&opts.Policy, "policy", "enqueue", "if the session is busy: enqueue, reject, interrupt or replace")
	f.Var(&opts.Deadline, "deadline", "absolute deadline for the new run: a duration (90m) or an RFC 3339 time (default: as long as RUN had)")
	f.BoolVar(&opts.Watch, "watch", false, "stream the new run's output")
	f.BoolVar(&opts.Wait, "wait", false, "wait for the new run to end")
	f.DurationVar(&opts.Timeout, "timeout", 0, "with --watch/--wait: stop following after this long (exit 5; the run goes on)")
	return cmd
}
