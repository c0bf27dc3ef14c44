package cli

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/internal/ids"
)

// runsListOptions are the flags of `belay runs list`.
type runsListOptions struct {
	globalOptions
	Query  apitype.RunQuery
	Status string
	Since  string
	All    bool
}

func newRunsListCmd(stdio Stdio) *cobra.Command {
	var o runsListOptions
	cmd := &cobra.Command{
		Use:   "list [--status S] [--provider P] [--session ID] [--tag T] [--since 24h] [--failed] [--sort newest|oldest|updated] [--limit N] [--cursor C | --all]",
		Short: "List runs across sessions, newest first, a page at a time (works with the daemon down)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runRunsList(cmd.Context(), stdio, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Data, "data", "", dataFlagHelp)
	f.BoolVar(&o.JSON, "json", false, `print {"runs":[...],"nextCursor"}`)
	f.StringVar(&o.Status, "status", "", "only runs in this status: queued, running, complete, failed, cancelled, stranded")
	f.StringVar(&o.Query.Provider, "provider", "", "only runs of this provider")
	f.StringVar(&o.Query.Session, "session", "", "only runs of this session")
	f.StringVar(&o.Query.Tag, "tag", "", "only runs with this tag (belay send --tag)")
	f.StringVar(&o.Since, "since", "", "only runs created since: a duration back (24h) or an RFC 3339 time")
	f.BoolVar(&o.Query.Failed, "failed", false, "only failed and stranded runs")
	f.StringVar(&o.Query.Sort, "sort", apitype.SortNewest, "order: newest, oldest or updated (last change first)")
	f.IntVar(&o.Query.Limit, "limit", 50, fmt.Sprintf("runs per page (1-%d)", apitype.MaxRunsLimit))
	f.StringVar(&o.Query.Cursor, "cursor", "", "the page after this cursor (printed after a page)")
	f.BoolVar(&o.All, "all", false, "every page")
	return cmd
}

func runRunsList(ctx context.Context, stdio Stdio, o runsListOptions) error {
	q := o.Query
	q.Status = belay.RunStatus(o.Status)
	const hint = "belay runs list --failed --since 24h"
	switch {
	case q.Status != "" && !q.Status.Valid():
		return usagef(hint, "--status %q is not queued, running, complete, failed, cancelled or stranded", o.Status)
	case q.Session != "" && ids.Check(ids.Session, q.Session) != nil:
		return usagef(hint, "--session %q is not a session id", q.Session)
	case q.Tag != "" && belay.CheckTags([]string{q.Tag}, nil) != nil:
		return usagef(hint, "--tag %q: want 1-%d of letters, digits and ._:/@-", q.Tag, belay.MaxTagLen)
	case q.Limit < 1 || q.Limit > apitype.MaxRunsLimit:
		return usagef(hint, "--limit is 1-%d", apitype.MaxRunsLimit)
	case q.Sort != apitype.SortNewest && q.Sort != apitype.SortOldest && q.Sort != apitype.SortUpdated:
		return usagef(hint, "--sort %q is not newest, oldest or updated", q.Sort)
	case o.All && q.Cursor != "":
		return usagef(hint, "give --all or --cursor, not both")
	}
	if o.Since != "" {
		if d, err := time.ParseDuration(o.Since); err == nil && d >= 0 {
			q.Since = time.Now().Add(-d)
		} else if t, err := time.Parse(time.RFC3339Nano, o.Since); err == nil {
			q.Since = t
		} else {
			return usagef(hint, "--since %q: want a duration such as 24h or an RFC 3339 time", o.Since)
		}
	}
	src, err := openSource(ctx, stdio, o.globalOptions)
	if err != nil {
		return err
	}
	defer src.close()
	var all []apitype.Run
	var next string
	for {
		page, err := src.listRuns(ctx, q)
		if err != nil {
			return err
		}
		all, next = append(all, page.Runs...), page.NextCursor
		if !o.All || next == "" {
			break
		}
		q.Cursor = next
	}
	if o.JSON {
		if all == nil {
			all = []apitype.Run{}
		}
		return writeJSON(stdio.Out, apitype.RunPage{Runs: all, NextCursor: next})
	}
	w := tabwriter.NewWriter(stdio.Out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "RUN\tSESSION\tPROVIDER\tSTATUS\tCREATED\tTAGS")
	for _, r := range all {
		status := string(r.Status)
		if r.Error != nil && r.Status.Terminal() {
			status += " (" + string(r.Error.Class) + ")"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s ago\t%s\n", r.ID, r.Session, r.Provider, status, time.Since(r.CreatedAt).Round(time.Second), strings.Join(r.Tags, ","))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if next != "" {
		fmt.Fprintf(stdio.Err, "More: belay runs list ... --cursor %s  (or --all)\n", next)
	}
	return nil
}
