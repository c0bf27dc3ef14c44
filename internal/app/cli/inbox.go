package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/internal/ids"
)

func newInboxCmd(stdio Stdio) *cobra.Command {
	cmd := &cobra.Command{Use: "inbox", Short: "Post, lease (poll) and settle (ack) inbox deliveries", Args: noArgs}
	cmd.AddCommand(newInboxPostCmd(stdio), newInboxPollCmd(stdio), newInboxAckCmd(stdio))
	return cmd
}

func newInboxPostCmd(stdio Stdio) *cobra.Command {
	var g globalOptions
	var req apitype.PostRequest
	var data, dataFile string
	cmd := &cobra.Command{
		Use:   "post SESSION --type TYPE [--key K] [--priority N] [--data JSON | --data-file F]",
		Short: "Post an item to a session's inbox (a repeat of the same key and type is dropped)",
		Args:  exactArgs(1, "belay inbox post ses_... --type ui.click"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := sessionArg(args); err != nil {
				return err
			}
			if req.Type == "" {
				return usagef("belay inbox post ses_... --type ui.click", "--type is required")
			}
			switch {
			case data != "" && dataFile != "":
				return usagef("belay inbox post ... --data '{}'", "give --data or --data-file, not both")
			case dataFile != "":
				b, err := os.ReadFile(dataFile)
				if err != nil {
					return err
				}
				data = string(b)
			}
			if data != "" {
				if !json.Valid([]byte(data)) {
					return usagef(`belay inbox post ... --data '{"choice":"yes"}'`, "--data is not JSON")
				}
				req.Data = json.RawMessage(data)
			}
			c, err := connect(cmd.Context(), stdio, g, true)
			if err != nil {
				return err
			}
			d, err := c.Post(cmd.Context(), args[0], req)
			if err != nil {
				return apiError(err)
			}
			if g.JSON {
				return writeJSON(stdio.Out, d)
			}
			fmt.Fprintf(stdio.Out, "%s %s %s\n", d.ID, d.Type, d.Status)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&g.Data, "data-dir", "", dataFlagHelp+" (--data is the payload here)")
	f.BoolVar(&g.JSON, "json", false, "print JSON")
	f.StringVar(&req.Type, "type", "", "item type, e.g. ui.accept")
	f.StringVar(&req.Key, "key", "", "idempotency key: a repeat of (key, type) is dropped")
	f.IntVar(&req.Priority, "priority", 0, "priority class (higher is delivered first)")
	f.StringVar(&data, "data", "", "JSON payload")
	f.StringVar(&dataFile, "data-file", "", "read the JSON payload from a file")
	return cmd
}

func newInboxPollCmd(stdio Stdio) *cobra.Command {
	var g globalOptions
	var session, owner, to string
	var ttl, wait time.Duration
	var maxItems int
	cmd := &cobra.Command{
		Use:   "poll [--session SESSION | --to NAME]",
		Short: "Lease deliverable items (priority, then order), waiting up to --wait; settle each with inbox ack",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if session != "" && ids.Check(ids.Session, session) != nil {
				return usagef("belay inbox poll --session ses_...", "--session %q is not a session id", session)
			}
			if to != "" && session != "" {
				return usagef("belay inbox poll --to mcp:tag:mcp", "--to covers every session: give --session or --to, not both")
			}
			switch {
			case ttl <= 0:
				return usagef("belay inbox poll --ttl 5m", "--ttl must be positive: it is how long the items are yours before they are delivered again")
			case wait < 0:
				return usagef("belay inbox poll --wait 30s", "--wait must not be negative")
			case maxItems < 1:
				return usagef("belay inbox poll --max 10", "--max must be at least 1")
			}
			if owner == "" {
				host, _ := os.Hostname()
				owner = fmt.Sprintf("cli:%s:%d", host, os.Getpid())
			}
			c, err := connect(cmd.Context(), stdio, g, true)
			if err != nil {
				return err
			}
			ds, err := c.Lease(cmd.Context(), apitype.LeaseRequest{Session: session, To: to, Owner: owner, TTL: apitype.Duration(ttl), Max: maxItems, Wait: apitype.Duration(wait)})
			if err != nil {
				return apiError(err)
			}
			if g.JSON {
				if ds == nil {
					ds = []belay.Delivery{}
				}
				return writeJSON(stdio.Out, apitype.DeliveryList{Deliveries: ds})
			}
			for _, d := range ds {
				fmt.Fprintf(stdio.Out, "%s %s epoch %d session %s %s\n", d.ID, d.Type, d.Epoch, d.Session, string(d.Data))
			}
			if len(ds) == 0 {
				fmt.Fprintln(stdio.Err, "belay: nothing to deliver")
			} else {
				fmt.Fprintf(stdio.Err, "Settle each: belay inbox ack DELIVERY --epoch N (within %s)\n", ttl)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&g.Data, "data", "", dataFlagHelp)
	f.BoolVar(&g.JSON, "json", false, "print JSON")
	f.StringVar(&session, "session", "", "only this session's inbox (default: every session)")
	f.StringVar(&owner, "owner", "", "who leases (default cli:HOST:PID)")
	f.StringVar(&to, "to", "", "lease the items addressed to NAME instead (an MCP server's wake-ups: mcp:...)")
	f.DurationVar(&ttl, "ttl", time.Minute, "lease duration: unacked items are redelivered after it")
	f.DurationVar(&wait, "wait", 0, "wait up to this long for an item (at most 60s)")
	f.IntVar(&maxItems, "max", 1, "lease at most this many")
	return cmd
}

func newInboxAckCmd(stdio Stdio) *cobra.Command {
	var g globalOptions
	var req apitype.SettleRequest
	var asError, release bool
	var retry time.Duration
	cmd := &cobra.Command{
		Use:   "ack DELIVERY --epoch N [--error | --release | --retry DELAY] [--result R]",
		Short: "Settle a leased item: done (default), error, release (redeliver now) or retry (later)",
		Args:  exactArgs(1, "belay inbox ack dlv_... --epoch 1"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := ids.Check(ids.Delivery, args[0]); err != nil {
				return usagef("belay inbox ack dlv_... --epoch 1", "%v", err)
			}
			if !cmd.Flags().Changed("epoch") {
				return usagef("belay inbox ack dlv_... --epoch 1", "--epoch is required: it is printed by inbox poll")
			}
			n := 0
			req.Kind = belay.SettleDone
			if asError {
				n, req.Kind = n+1, belay.SettleError
			}
			if release {
				n, req.Kind = n+1, belay.SettleRelease
			}
			if cmd.Flags().Changed("retry") {
				n, req.Kind, req.Delay = n+1, belay.SettleRetry, apitype.Duration(retry)
			}
			if n > 1 {
				return usagef("belay inbox ack dlv_... --epoch 1 --error", "give at most one of --error, --release and --retry")
			}
			c, err := connect(cmd.Context(), stdio, g, true)
			if err != nil {
				return err
			}
			d, err := c.Settle(cmd.Context(), args[0], req)
			if err != nil {
				return apiError(err)
			}
			if g.JSON {
				return writeJSON(stdio.Out, d)
			}
			fmt.Fprintf(stdio.Out, "%s %s\n", d.ID, d.Status)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&g.Data, "data", "", dataFlagHelp)
	f.BoolVar(&g.JSON, "json", false, "print JSON")
	f.Uint64Var(&req.Epoch, "epoch", 0, "the lease epoch printed by inbox poll")
	f.StringVar(&req.Result, "result", "", "a short result to record")
	f.BoolVar(&asError, "error", false, "settle as failed for good")
	f.BoolVar(&release, "release", false, "hand it back for redelivery now")
	f.DurationVar(&retry, "retry", 0, "hand it back for redelivery after this delay")
	return cmd
}
