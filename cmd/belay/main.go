// Command belay is the belay daemon and command line.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/belayhq/belay/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args, cli.Stdio{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})
	stop()
	os.Exit(code)
}
