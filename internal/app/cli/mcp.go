package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/app/mcpserver"
)

// mcpOptions are the flags of `belay mcp`.
type mcpOptions struct {
	globalOptions
	Scope      mcpserver.Scope
	Subscriber string
	Verbose    bool
}

func newMCPCmd(stdio Stdio) *cobra.Command {
	var o mcpOptions
	cmd := &cobra.Command{
		Use:   "mcp [--session ID ... | --tag T ... | --all] [--subscriber NAME]",
		Short: "Serve the Model Context Protocol on stdin/stdout, for agents (Claude Code, Codex, any MCP client)",
		Long: `Serve belay to an agent over MCP on stdin/stdout: tools to send prompts,
follow, read, wait for, cancel and diagnose runs, list runs and use inboxes;
resources belay://runs/{id} and belay://sessions/{id} with subscriptions that
wake the agent when a run ends.

The scope says what the agent may act on: the sessions given with --session,
the sessions whose runs carry a --tag (runs sent here carry every tag), or
everything with --all. Without any, the scope is --tag mcp.

The daemon is started if none runs. The same server is on the daemon's
socket (and TCP listener) at /mcp, over streamable HTTP. See docs/mcp.md.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runMCP(cmd.Context(), stdio, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Data, "data", "", dataFlagHelp)
	f.StringArrayVar(&o.Scope.Sessions, "session", nil, "grant this session (repeatable)")
	f.StringArrayVar(&o.Scope.Tags, "tag", nil, "grant the sessions whose runs carry this tag, and tag the runs sent (repeatable)")
	f.BoolVar(&o.Scope.All, "all", false, "grant every session")
	f.StringVar(&o.Subscriber, "subscriber", "", `the name of this server's wake-ups in the daemon (default "mcp:" and the scope)`)
	f.BoolVar(&o.Verbose, "verbose", false, "log status (never prompts or answers) to stderr")
	return cmd
}

func runMCP(ctx context.Context, stdio Stdio, o mcpOptions) error {
	if err := o.Scope.Check(); err != nil {
		return usagef("belay mcp --tag my-project", "%v", err)
	}
	c, err := connect(ctx, stdio, o.globalOptions, true)
	if err != nil {
		return err
	}
	level := slog.LevelWarn
	if o.Verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(stdio.Err, &slog.HandlerOptions{Level: level}))
	if o.Subscriber == "" {
		o.Subscriber = defaultSubscriber(o.Scope)
	}
	srv, err := mcpserver.New(mcpserver.Options{Client: c, Scope: o.Scope, Subscriber: o.Subscriber, Version: Version, Logger: log})
	if err != nil {
		return usagef("belay mcp --tag my-project", "%v", err)
	}
	in := stdio.In
	if in == nil {
		in = eofReader{}
	}
	err = srv.Serve(ctx, &mcp.IOTransport{Reader: io.NopCloser(in), Writer: nopWriteCloser{stdio.Out}})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// defaultSubscriber names the wake-ups of `belay mcp` by its scope and its
// working directory (an agent's project): stable across restarts of the
// server, distinct between agents of different projects that share a scope.
func defaultSubscriber(s mcpserver.Scope) string {
	wd, _ := os.Getwd()
	h := sha256.Sum256([]byte(wd))
	name := "mcp:" + s.String()
	if len(name) > belay.MaxTagLen-9 {
		name = name[:belay.MaxTagLen-9]
	}
	return name + "@" + hex.EncodeToString(h[:4])
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }
