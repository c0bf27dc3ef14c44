package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newSessionsDeleteCmd(stdio Stdio) *cobra.Command {
	var g globalOptions
	var force bool
	cmd := &cobra.Command{
		Use:   "delete SESSION",
		Short: "Delete one session now, whatever its age",
		Long: `Deletes a session and its files. A session with a queued or running run is
refused (cancel it first), and one with an unsettled inbox delivery unless
--force, except when its journal is damaged, missing or empty: then nothing
can run in it and deleting it is the way out that doctor names.`,
		Args: exactArgs(1, "belay sessions delete ses_..."),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := connect(cmd.Context(), stdio, g, true)
			if err != nil {
				return err
			}
			if err := c.DeleteSession(cmd.Context(), args[0], force); err != nil {
				return apiError(err)
			}
			if g.JSON {
				return writeJSON(stdio.Out, map[string]any{"deleted": args[0]})
			}
			fmt.Fprintf(stdio.Out, "deleted %s\n", args[0])
			return nil
		},
	}
	cmd.Flags().StringVar(&g.Data, "data", "", dataFlagHelp)
	cmd.Flags().BoolVar(&g.JSON, "json", false, "print JSON")
	cmd.Flags().BoolVar(&force, "force", false, "delete even with unsettled inbox deliveries")
	return cmd
}
