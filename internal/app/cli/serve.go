package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/app/daemon"
)

type serveOptions struct {
	globalOptions
	Listen    string
	Store     string
	LogFormat string
	LogLevel  string
	MaxConns  int
}

func newServeCmd(stdio Stdio) *cobra.Command {
	var opts serveOptions
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the belay daemon in the foreground",
		Long: `Runs the daemon: it owns the data directory (a second daemon on the same
directory exits naming the holder), executes runs, and serves the HTTP API
on <data>/belay.sock (mode 0600, directory 0700). With --listen
tcp:127.0.0.1:PORT it also serves TCP, requiring the bearer token in
<data>/token (generated, mode 0600).

--store postgres://USER@HOST/DB (or $BELAY_STORE, or [store] url in
config.toml) keeps sessions in PostgreSQL instead of the data directory
(see docs/postgres.md); the data directory still holds the socket, token
and config.

SIGTERM or SIGINT stops it gracefully: no new runs are admitted and runs in
flight are handed to the next start, which resumes them. A second signal
forces the exit.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runServe(cmd.Context(), stdio, opts) },
	}
	f := cmd.Flags()
	f.StringVar(&opts.Data, "data", "", dataFlagHelp)
	f.StringVar(&opts.Listen, "listen", "", "also listen on TCP: tcp:HOST:PORT (requires the bearer token)")
	f.StringVar(&opts.Store, "store", "", storeFlagHelp)
	f.StringVar(&opts.LogFormat, "log-format", "text", "log format: text or json")
	f.StringVar(&opts.LogLevel, "log-level", "info", "log level: debug, info, warn, error")
	f.IntVar(&opts.MaxConns, "max-conns", 0, "cap on client connections (default: half the open file limit, at most 16384); streams and long polls get half")
	return cmd
}

const dataFlagHelp = "data directory (default $BELAY_HOME, $XDG_STATE_HOME/belay, ~/.local/state/belay)"

func runServe(ctx context.Context, stdio Stdio, opts serveOptions) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(opts.LogLevel)); err != nil {
		return usagef("belay serve --log-level info", "--log-level %q is not debug, info, warn or error", opts.LogLevel)
	}
	var h slog.Handler
	switch opts.LogFormat {
	case "text":
		h = slog.NewTextHandler(stdio.Err, &slog.HandlerOptions{Level: level})
	case "json":
		h = slog.NewJSONHandler(stdio.Err, &slog.HandlerOptions{Level: level})
	default:
		return usagef("belay serve --log-format json", "--log-format %q is not text or json", opts.LogFormat)
	}
	dir, err := opts.dataDir(stdio)
	if err != nil {
		return err
	}
	// The first signal cancels ctx (main); a second one forces the exit.
	go func() {
		<-ctx.Done()
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
		<-sig
		fmt.Fprintln(stdio.Err, "belay: second signal: exiting now")
		os.Exit(ExitError)
	}()
	storeURL := opts.Store
	if storeURL == "" {
		storeURL = stdio.Getenv("BELAY_STORE") // else config.toml's [store] url
	}
	if _, err := daemon.StoreKind(storeURL); err != nil {
		return usagef("belay serve --store postgres://USER@HOST/DB", "%v", err)
	}
	err = daemon.Run(ctx, daemon.Options{DataDir: dir, Listen: opts.Listen, Store: storeURL, Version: Version, Logger: slog.New(h), MaxConns: opts.MaxConns})
	if errors.Is(err, belay.ErrStoreLocked) {
		return &exitError{code: ExitError, err: err}
	}
	if errors.Is(err, belay.ErrStoreUnreachable) {
		// Not the running daemon's "resumes by itself": this one never
		// started. One line, so that the command that started it in the
		// background quotes all of it from the log.
		return &exitError{code: ExitUnreachable, err: fmt.Errorf("%w; the daemon did not start: start the database (or fix --store, $BELAY_STORE or [store] url), then belay daemon start", err)}
	}
	return err
}
