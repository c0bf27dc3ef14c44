// Command belay is the belay daemon and command line.
package main

import (
	"context"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/belayhq/belay/internal/app/cli"
)

func main() { os.Exit(run()) }

// run runs the command line; the first SIGINT or SIGTERM cancels its
// context (the daemon then stops gracefully).
func run() int {
	tuneProcs(os.Getenv)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return cli.Main(ctx, os.Args, cli.Stdio{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})
}

// extraProcs is how many Ps (GOMAXPROCS) belay runs with beyond the CPUs
// it may use. The store keeps goroutines in disk system calls (the commit
// log's fdatasync, journal writes); such a goroutine keeps its P until the
// Go scheduler notices and hands the P on, and meanwhile runnable
// goroutines wait. With one P per CPU, on 2 cores, `belay bench runs`
// measured a scheduler wait p99 of 5.2 ms; with 2 more, 2.6 ms, and
// 1.1-1.7x the runs/s (docs/performance.md, "Scheduler headroom").
const extraProcs = 2

// tuneProcs sets GOMAXPROCS to the runtime's default plus extraProcs,
// unless the environment sets GOMAXPROCS (which then stays as given). It
// returns the value in effect.
func tuneProcs(getenv func(string) string) int {
	if getenv("GOMAXPROCS") != "" {
		return runtime.GOMAXPROCS(0)
	}
	n := runtime.GOMAXPROCS(0) + extraProcs
	runtime.GOMAXPROCS(n)
	return n
}
