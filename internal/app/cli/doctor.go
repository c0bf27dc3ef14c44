package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/belayhq/belay/internal/app/daemon"
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
				offlineNote(stdio, st)
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
			sock := fileWord(rep.Socket, "no socket (no daemon listens)")
			if rep.Socket.Exists && !rep.Daemon.Running {
				sock = "present, but no daemon answers on it (the next start replaces it)"
			}
			fmt.Fprintf(stdio.Out, "socket %s %s\n", rep.Socket.Path, sock)
			fmt.Fprintf(stdio.Out, "config %s %s\n", rep.Config.Path, fileWord(rep.Config, "none (defaults)"))
			if rep.Store != "" && rep.Store != "file" {
				fmt.Fprintf(stdio.Out, "store  %s\n", rep.Store)
			}
			if rep.SessionsUnknown {
				fmt.Fprintln(stdio.Out, "sessions unknown (the store did not answer)")
			} else {
				fmt.Fprintf(stdio.Out, "sessions %s\n", countsText(rep.Sessions))
			}
			if rep.Store != "" && rep.Store != "file" {
				// The daemons serving the database, by their owner records;
				// the records of dead ones are counted, not listed (every
				// crash leaves one).
				gone := 0
				for _, n := range rep.Nodes {
					if !n.Live {
						gone++
						continue
					}
					fmt.Fprintf(stdio.Out, "node   %s live, heartbeat %s, since %s\n", n.ID,
						n.Heartbeat.UTC().Format(time.RFC3339), n.Since.UTC().Format(time.RFC3339))
				}
				if gone > 0 {
					fmt.Fprintf(stdio.Out, "nodes  %d gone (their runs are rescued by the live nodes)\n", gone)
				}
			}
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

// fileWord says what state a data directory file is in.
func fileWord(f daemon.FileState, missing string) string {
	switch {
	case !f.Exists:
		return missing
	case !f.OK:
		return "has a problem (mode " + f.Mode + "; see below)"
	}
	return "ok (mode " + f.Mode + ")"
}

// countsText prints session counts by state: "2 idle, 1 active", or
// "none".
func countsText(m map[string]int) string {
	var parts []string
	for _, st := range []string{"active", "idle", "quarantined"} {
		if n := m[st]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, st))
		}
	}
	for st, n := range m {
		if st != "active" && st != "idle" && st != "quarantined" && n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, st))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
