package cli

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/belayhq/belay/internal/daemon"
)

func newDoctorCmd(stdio Stdio) *cobra.Command {
	var g globalOptions
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check the daemon, the store and the locks, and say what to do next (read-only)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			var rep daemon.Report
			if c, err := connect(ctx, stdio, g, false); err == nil {
				raw, err := c.DaemonDoctor(ctx)
				if err != nil {
					return apiError(err)
				}
				if err := json.Unmarshal(raw, &rep); err != nil {
					return err
				}
			} else {
				dir, derr := g.dataDir(stdio)
				if derr != nil {
					return derr
				}
				st, oerr := openOffline(ctx, stdio, g)
				if oerr == nil {
					defer st.Close()
					rep, err = daemon.Inspect(ctx, dir, st, false)
				} else {
					rep, err = daemon.Inspect(ctx, dir, nil, false)
				}
				if err != nil {
					return err
				}
				offlineNote(stdio)
			}
			if g.JSON {
				return writeJSON(stdio.Out, rep)
			}
			state := "not running"
			if rep.Daemon.Running {
				state = "running"
			}
			fmt.Fprintf(stdio.Out, "data   %s\ndaemon %s\n", rep.DataDir, state)
			if l := rep.Lock; l != nil && l.Holder != nil {
				fmt.Fprintf(stdio.Out, "lock   pid %d on %s (%s), %s\n", l.Holder.PID, l.Holder.Host, l.Holder.Purpose, l.Reason)
			}
			fmt.Fprintf(stdio.Out, "socket %s %s\n", rep.Socket.Path, map[bool]string{true: "ok", false: "open to others"}[rep.Socket.OK])
			fmt.Fprintf(stdio.Out, "sessions %v\n", rep.Sessions)
			for _, q := range rep.Quarantined {
				fmt.Fprintf(stdio.Out, "quarantined %s: %s at offset %d\n", q.Session, q.Journal, q.Offset)
			}
			for _, p := range rep.Problems {
				fmt.Fprintf(stdio.Out, "problem: %s\n", p)
			}
			fmt.Fprintf(stdio.Out, "\nnext: %s\n", rep.NextAction)
			if rep.Command != "" {
				fmt.Fprintf(stdio.Out, "run:  %s\n", rep.Command)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&g.Data, "data", "", dataFlagHelp)
	cmd.Flags().BoolVar(&g.JSON, "json", false, "print JSON")
	return cmd
}
