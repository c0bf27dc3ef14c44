package cli

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/internal/ids"
)

func newSessionsCmd(stdio Stdio) *cobra.Command {
	cmd := &cobra.Command{Use: "sessions", Short: "List, show, diagnose, prune, delete and export sessions", Args: noArgs}
	cmd.AddCommand(newSessionsListCmd(stdio), newSessionsShowCmd(stdio), newSessionsDoctorCmd(stdio),
		newSessionsPruneCmd(stdio), newSessionsDeleteCmd(stdio), newSessionsExportCmd(stdio))
	return cmd
}

func sessionArg(args []string) error {
	if err := ids.Check(ids.Session, args[0]); err != nil {
		return usagef("belay sessions list", "%v", err)
	}
	return nil
}

func newSessionsListCmd(stdio Stdio) *cobra.Command {
	var g globalOptions
	var f belay.SessionFilter
	var state string
	cmd := &cobra.Command{
		Use: "list", Short: "List sessions, newest first (works with the daemon down)", Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.State = belay.SessionState(state)
			if state != "" && !f.State.Valid() {
				return usagef("belay sessions list --state active", "--state %q is not idle, active or quarantined", state)
			}
			if f.Limit < 0 {
				return usagef("belay sessions list --limit 20", "--limit must be 0 (no cap) or more")
			}
			src, err := openSource(cmd.Context(), stdio, g)
			if err != nil {
				return err
			}
			defer src.close()
			list, err := src.sessions(cmd.Context(), f)
			if err != nil {
				return err
			}
			if g.JSON {
				if list == nil {
					list = []belay.Session{}
				}
				return writeJSON(stdio.Out, map[string]any{"sessions": list})
			}
			w := tabwriter.NewWriter(stdio.Out, 2, 4, 2, ' ', 0)
			fmt.Fprintln(w, "SESSION\tPROVIDER\tMODEL\tSTATE\tUPDATED\tEVENTS")
			for _, s := range list {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\n", s.ID, s.Provider, s.Model, s.State, ago(s.UpdatedAt), s.LastSeq)
			}
			return w.Flush()
		},
	}
	cmd.Flags().StringVar(&g.Data, "data", "", dataFlagHelp)
	cmd.Flags().BoolVar(&g.JSON, "json", false, "print JSON")
	cmd.Flags().StringVar(&state, "state", "", "only sessions in this state: idle, active or quarantined")
	cmd.Flags().StringVar(&f.Provider, "provider", "", "only sessions of this provider")
	cmd.Flags().IntVar(&f.Limit, "limit", 0, "at most this many")
	return cmd
}

func newSessionsShowCmd(stdio Stdio) *cobra.Command {
	var g globalOptions
	cmd := &cobra.Command{
		Use: "show SESSION", Short: "Show a session and its runs (works with the daemon down)", Args: exactArgs(1, "belay sessions show ses_..."),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := sessionArg(args); err != nil {
				return err
			}
			src, err := openSource(cmd.Context(), stdio, g)
			if err != nil {
				return err
			}
			defer src.close()
			sess, err := src.session(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			runs, err := src.runs(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if g.JSON {
				if runs == nil {
					runs = []belay.Run{}
				}
				return writeJSON(stdio.Out, map[string]any{"session": sess, "runs": runs})
			}
			fmt.Fprintf(stdio.Out, "session %s\nprovider %s %s\nstate %s\nupdated %s\nevents %d\n", sess.ID, sess.Provider, sess.Model, sess.State, stampOrUnknown(sess.UpdatedAt), sess.LastSeq)
			if sess.Problem != "" {
				fmt.Fprintf(stdio.Out, "problem %s\n", sess.Problem)
			}
			w := tabwriter.NewWriter(stdio.Out, 2, 4, 2, ' ', 0)
			fmt.Fprintln(w, "\nRUN\tSTATUS\tPHASE\tATTEMPT\tCREATED\tREASON")
			for _, r := range runs {
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\n", r.ID, r.Status, r.Phase, r.Attempt, stampOrUnknown(r.CreatedAt), oneLine(r.Reason, 80))
			}
			if err := w.Flush(); err != nil {
				return err
			}
			for _, r := range runs {
				if r.Status == belay.RunFailed || r.Status == belay.RunStranded {
					fmt.Fprintf(stdio.Out, "\n%s\n", failureText(r))
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&g.Data, "data", "", dataFlagHelp)
	cmd.Flags().BoolVar(&g.JSON, "json", false, "print JSON")
	return cmd
}

func newSessionsDoctorCmd(stdio Stdio) *cobra.Command {
	var g globalOptions
	cmd := &cobra.Command{
		Use:   "doctor SESSION",
		Short: "Diagnose a session: what happened and exactly what to do next (read-only; works with the daemon down)",
		Args:  exactArgs(1, "belay sessions doctor ses_..."),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := sessionArg(args); err != nil {
				return err
			}
			src, err := openSource(cmd.Context(), stdio, g)
			if err != nil {
				return err
			}
			defer src.close()
			rep, err := src.doctor(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			addSeedFacts(stdio, g, rep.Browser)
			if g.JSON {
				return writeJSON(stdio.Out, rep)
			}
			printDoctor(stdio, rep)
			return nil
		},
	}
	cmd.Flags().StringVar(&g.Data, "data", "", dataFlagHelp)
	cmd.Flags().BoolVar(&g.JSON, "json", false, `print the report ({"nextAction","reason","command",...})`)
	return cmd
}

func printDoctor(stdio Stdio, rep apitype.DoctorReport) {
	fmt.Fprintf(stdio.Out, "session %s (%s", rep.Session, rep.Provider)
	if rep.Model != "" {
		fmt.Fprintf(stdio.Out, " %s", rep.Model)
	}
	fmt.Fprintf(stdio.Out, "): %s\n", rep.State)
	if rep.ActiveRun != nil {
		fmt.Fprintf(stdio.Out, "active run %s: %s/%s\n", rep.ActiveRun.ID, rep.ActiveRun.Status, rep.ActiveRun.Phase)
	}
	if rep.LastActivityAgeSeconds != nil {
		fmt.Fprintf(stdio.Out, "last activity %ds ago\n", *rep.LastActivityAgeSeconds)
	}
	printBrowserDoctor(stdio, rep.Browser)
	for _, d := range rep.Diagnostics {
		fmt.Fprintf(stdio.Out, "%s: %s\n", d.Severity, d.Message)
	}
	fmt.Fprintf(stdio.Out, "\nnext: %s: %s\n", rep.NextAction, rep.Reason)
	if rep.Command != "" {
		fmt.Fprintf(stdio.Out, "run:  %s\n", rep.Command)
	}
}

func newSessionsPruneCmd(stdio Stdio) *cobra.Command {
	var g globalOptions
	var dry bool
	cmd := &cobra.Command{
		Use:   "prune",
		Short: "Delete finished sessions past the retention policy (complete 14 days, failed 30 days)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := connect(cmd.Context(), stdio, g, true)
			if err != nil {
				return err
			}
			rep, err := c.Prune(cmd.Context(), dry)
			if err != nil {
				return apiError(err)
			}
			if g.JSON {
				return writeJSON(stdio.Out, rep)
			}
			verb := "pruned"
			if dry {
				verb = "would prune"
			}
			for _, p := range rep.Pruned {
				fmt.Fprintf(stdio.Out, "%s %s (%s, %s)\n", verb, p.ID, p.Rule, sizeString(p.Bytes))
			}
			fmt.Fprintf(stdio.Out, "%s %s, kept %d\n", verb, counted(len(rep.Pruned), "session"), rep.Kept)
			return nil
		},
	}
	cmd.Flags().StringVar(&g.Data, "data", "", dataFlagHelp)
	cmd.Flags().BoolVar(&g.JSON, "json", false, "print JSON")
	cmd.Flags().BoolVar(&dry, "dry-run", false, "say what would be pruned, delete nothing")
	return cmd
}

// counted is "1 session", "2 sessions".
func counted(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// ago says how long ago t was, or "-" when it is not known.
func ago(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := time.Since(t)
	if d < 0 {
		d = 0
	}
	return d.Round(time.Second).String() + " ago"
}

func stampOrUnknown(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Format(time.RFC3339)
}
