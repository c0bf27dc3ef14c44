package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Version is set at build time with -ldflags "-X ...cli.Version=v1.2.3".
var Version = "dev"

type versionOptions struct {
	JSON bool
}

type versionInfo struct {
	Version string `json:"version"`
	Commit  string `json:"commit,omitempty"`
	Go      string `json:"go"`
	OS      string `json:"os"`
	Arch    string `json:"arch"`
}

func newVersionCmd(stdio Stdio) *cobra.Command {
	var opts versionOptions
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the belay version",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runVersion(stdio, opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print JSON")
	return cmd
}

func runVersion(stdio Stdio, opts versionOptions) error {
	info := versionInfo{Version: Version, Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				info.Commit = s.Value
			}
		}
	}
	if opts.JSON {
		return writeJSON(stdio.Out, info)
	}
	fmt.Fprintf(stdio.Out, "belay %s (%s %s/%s)\n", info.Version, info.Go, info.OS, info.Arch)
	return nil
}
