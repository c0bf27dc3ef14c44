package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/ids"
)

// readResult is `belay read RUN --json`.
type readResult struct {
	Run     string          `json:"run"`
	Session string          `json:"session"`
	Status  belay.RunStatus `json:"status"`
	Prompt  string          `json:"prompt"`
	Answer  string          `json:"answer"`
}

func newReadCmd(stdio Stdio) *cobra.Command {
	var g globalOptions
	var artifacts bool
	cmd := &cobra.Command{
		Use:   "read RUN|SESSION",
		Short: "Print a run's answer, or a session's transcript (works with the daemon down)",
		Args:  exactArgs(1, "belay read run_..."),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			id := args[0]
			isRun, isSession := ids.Check(ids.Run, id) == nil, ids.Check(ids.Session, id) == nil
			if !isRun && !isSession {
				return usagef("belay sessions list", "%q is neither a run id (run_...) nor a session id (ses_...)", id)
			}
			src, err := openSource(ctx, stdio, g)
			if err != nil {
				return err
			}
			defer src.close()
			if isRun {
				run, err := src.run(ctx, id)
				if err != nil {
					return err
				}
				if artifacts {
					return printArtifacts(stdio, g, run)
				}
				if err := readRun(ctx, stdio, src, run, g.JSON); err != nil {
					return err
				}
				if g.JSON {
					return nil
				}
				if !run.Status.Terminal() {
					fmt.Fprintf(stdio.Err, "belay: run %s is still %s; this is the answer so far\n", run.ID, run.Phase)
				} else if run.Status != belay.RunComplete {
					fmt.Fprintf(stdio.Err, "belay: %s\n", failureText(run))
				}
				return nil
			}
			sess, err := src.session(ctx, id)
			if err != nil {
				return err
			}
			runs, err := src.runs(ctx, id)
			if err != nil {
				return err
			}
			if err := readSession(ctx, stdio, src, id, runs, g.JSON); err != nil {
				return err
			}
			if sess.State == belay.SessionQuarantined {
				// A journal that cannot be read at all gives no runs and
				// no read error: what came (perhaps nothing) is not the
				// whole session.
				what := "what came above is what could be read of it"
				if len(runs) == 0 {
					what = "nothing of it could be read"
				}
				return &exitError{code: ExitError, err: fmt.Errorf("session %s is quarantined (%s): %s\nTry: belay sessions doctor %s", id, sess.Problem, what, id)}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&g.Data, "data", "", dataFlagHelp)
	cmd.Flags().BoolVar(&g.JSON, "json", false, "print JSON")
	cmd.Flags().BoolVar(&artifacts, "artifacts", false, "list the files the run downloaded (browser runs), with size and sha256")
	return cmd
}

func newCancelCmd(stdio Stdio) *cobra.Command {
	var g globalOptions
	var reason string
	cmd := &cobra.Command{
		Use:   "cancel RUN",
		Short: "Cancel a run: a queued one is dropped, a running one is stopped",
		Args:  exactArgs(1, "belay cancel run_..."),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := ids.Check(ids.Run, args[0]); err != nil {
				return usagef("belay cancel run_...", "%v", err)
			}
			c, err := connect(cmd.Context(), stdio, g, true)
			if err != nil {
				return err
			}
			run, err := c.CancelRun(cmd.Context(), args[0], reason)
			if err != nil {
				return apiError(err)
			}
			if g.JSON {
				return writeJSON(stdio.Out, waitResult{Run: run.ID, Session: run.Session, Status: run.Status, Phase: run.Phase, Error: run.Error, Reason: run.Reason})
			}
			fmt.Fprintf(stdio.Out, "%s %s\n", run.ID, run.Status)
			return nil
		},
	}
	cmd.Flags().StringVar(&g.Data, "data", "", dataFlagHelp)
	cmd.Flags().BoolVar(&g.JSON, "json", false, "print JSON")
	cmd.Flags().StringVar(&reason, "reason", "", "why (journaled with the run)")
	return cmd
}
