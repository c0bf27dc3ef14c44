// Package gotune sets how the Go runtime schedules and collects for
// belay's binaries: more Ps than CPUs, and a collector that runs less
// often, bounded by a soft memory limit near the memory there is. Each
// setting the environment makes (GOMAXPROCS, GOGC, GOMEMLIMIT) stays as
// given.
package gotune

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
)

// ExtraProcs is how many Ps belay runs with beyond the CPUs it may use.
// The store keeps goroutines in disk system calls (the commit log's
// fdatasync, journal writes); such a goroutine keeps its P until the Go
// scheduler notices and hands the P on, and meanwhile runnable goroutines
// wait. With one P per CPU, on 2 cores, `belay bench runs` measured a
// scheduler wait p99 of 5.2 ms; with 2 more, 2.6 ms, and 1.1-1.7x the
// runs/s (docs/performance.md, "The Go runtime's settings"). Under a CPU
// quota (a container's), where Go's default is the quota, none are added:
// Ps beyond the quota would only get the process throttled.
const ExtraProcs = 2

// GCPercent is belay's GOGC: the heap may grow to five times what is live
// before the next collection, against Go's default of twice. A daemon
// under load allocates for every event it journals, and each collection
// cycle delays the runs in flight: on 2 cores, at half the peak load, the
// p99 from submit to complete was 19-43 ms at 100 and 8-18 ms at 400
// (6.6 ms in two of three runs with no collection at all). The cost is
// memory: the bench's process peaked at 420-427 MB instead of 243-259 MB.
const GCPercent = 400

// BoundedGCPercent is the GOGC of work whose promise is bounded memory
// rather than latency under load (Go's default): a repair streaming a
// transcript of any size holds what it needs and lets the collector run.
// At GCPercent the default repairs of `belay bench repair --size 100MB`
// peaked at 40-46 MB of heap and 64.6-71.5 MB of RSS (Claude Code's over
// the repair's 64 MiB target); at 100, 23-24 MB and 47.6-48.8 MB, with
// the same CPU time (docs/performance.md). Bounded is not for concurrent
// use: two overlapping calls may leave GOGC at BoundedGCPercent.
const BoundedGCPercent = 100

// MemLimitShare is the share of the memory there is (the machine's, or
// its cgroups' limit when lower) set as the soft memory limit: as the heap
// nears it, the collector runs more often, so GCPercent does not take a
// process with a moderate live heap past its container's limit. Belay
// collects more often than Go's default only when its live heap is above
// 45 % of that memory, where the default's next collection (at twice the
// live heap) would be past 90 % of it.
const MemLimitShare = 0.9

// Settings are what Apply left in effect; MemLimit is math.MaxInt64 for
// none.
type Settings struct {
	Procs     int
	GCPercent int // -1: off
	MemLimit  int64
}

// Apply sets GOMAXPROCS to the CPUs plus ExtraProcs (not under a CPU
// quota), GOGC to GCPercent and the soft memory limit to MemLimitShare of
// the memory there is, each unless the environment sets it. Setting
// GOMAXPROCS stops the runtime from following later changes of the CPUs
// it may use. It returns the settings in effect.
func Apply(getenv func(string) string) Settings {
	if getenv("GOMAXPROCS") == "" {
		if n := runtime.GOMAXPROCS(0); n >= runtime.NumCPU() {
			runtime.GOMAXPROCS(n + ExtraProcs)
		}
	}
	if getenv("GOGC") == "" {
		debug.SetGCPercent(GCPercent)
	}
	if getenv("GOMEMLIMIT") == "" {
		if total := memoryTotal(); total > 0 {
			debug.SetMemoryLimit(int64(float64(total) * MemLimitShare))
		}
	}
	return Current()
}

// Bounded sets GOGC to BoundedGCPercent for work whose promise is bounded
// memory (a transcript repair), unless the environment sets GOGC, and
// returns what puts the setting before it back. GOGC is the process's:
// what runs beside that work collects as often.
func Bounded(getenv func(string) string) (restore func()) {
	if getenv("GOGC") != "" {
		return func() {}
	}
	prev := debug.SetGCPercent(BoundedGCPercent)
	return func() { debug.SetGCPercent(prev) }
}

// Current returns the settings in effect.
func Current() Settings {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}, {Name: "/gc/gomemlimit:bytes"}}
	metrics.Read(s)
	out := Settings{Procs: runtime.GOMAXPROCS(0), GCPercent: -1, MemLimit: math.MaxInt64}
	if s[0].Value.Kind() == metrics.KindUint64 && s[0].Value.Uint64() <= math.MaxInt32 {
		out.GCPercent = int(s[0].Value.Uint64())
	}
	if s[1].Value.Kind() == metrics.KindUint64 && s[1].Value.Uint64() <= math.MaxInt64 {
		out.MemLimit = int64(s[1].Value.Uint64())
	}
	return out
}
