// Package procs sets how many Ps (GOMAXPROCS) belay's binaries run with.
package procs

import "runtime"

// Extra is how many Ps belay runs with beyond the CPUs it may use. The
// store keeps goroutines in disk system calls (the commit log's
// fdatasync, journal writes); such a goroutine keeps its P until the Go
// scheduler notices and hands the P on, and meanwhile runnable goroutines
// wait. With one P per CPU, on 2 cores, `belay bench runs` measured a
// scheduler wait p99 of 5.2 ms; with 2 more, 2.6 ms, and 1.1-1.7x the
// runs/s (docs/performance.md, "Scheduler headroom").
const Extra = 2

// Tune sets GOMAXPROCS to the runtime's default plus Extra, unless the
// environment sets GOMAXPROCS (which then stays as given). It returns the
// value in effect.
func Tune(getenv func(string) string) int {
	if getenv("GOMAXPROCS") != "" {
		return runtime.GOMAXPROCS(0)
	}
	n := runtime.GOMAXPROCS(0) + Extra
	runtime.GOMAXPROCS(n)
	return n
}
