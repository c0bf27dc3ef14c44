// Command belay is the belay daemon and command line.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/belayhq/belay/internal/app/cli"
	"github.com/belayhq/belay/internal/gotune"
)

func main() { os.Exit(run()) }

// run runs the command line; the first SIGINT or SIGTERM cancels its
// context (the daemon then stops gracefully).
func run() int {
	gotune.Apply(os.Getenv) // GOMAXPROCS, GOGC, GOMEMLIMIT: see package gotune
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return cli.Main(ctx, os.Args, cli.Stdio{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})
}
