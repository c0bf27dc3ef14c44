package cli

import "github.com/spf13/cobra"

func newRunsCmd(stdio Stdio) *cobra.Command {
	cmd := &cobra.Command{Use: "runs", Short: "Runs across sessions: list, show", Args: noArgs}
	cmd.AddCommand(newRunsListCmd(stdio), newRunsShowCmd(stdio))
	return cmd
}
