package gotune

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"testing"
	"testing/fstest"
)

// restore puts the runtime's settings back after a test changed them
// (GOMAXPROCS to the runtime's own default, which follows the CPUs,
// unless the environment set it).
func restore(t *testing.T) {
	procs := runtime.GOMAXPROCS(0)
	gc := debug.SetGCPercent(100)
	debug.SetGCPercent(gc)
	limit := debug.SetMemoryLimit(-1)
	t.Cleanup(func() {
		if os.Getenv("GOMAXPROCS") == "" {
			runtime.SetDefaultGOMAXPROCS()
		} else {
			runtime.GOMAXPROCS(procs)
		}
		debug.SetGCPercent(gc)
		debug.SetMemoryLimit(limit)
	})
}

func TestApplyLeavesWhatTheEnvironmentSets(t *testing.T) {
	restore(t)
	before := Current()
	got := Apply(func(string) string { return "set" })
	if got != before || Current() != before {
		t.Fatalf("with GOMAXPROCS, GOGC and GOMEMLIMIT set: Apply = %+v, in effect %+v; want %+v unchanged", got, Current(), before)
	}
}

func TestApplySetsBelaysDefaults(t *testing.T) {
	restore(t)
	before := Current()
	got := Apply(func(string) string { return "" })
	want := Settings{Procs: before.Procs, GCPercent: GCPercent, MemLimit: before.MemLimit}
	if before.Procs >= runtime.NumCPU() {
		want.Procs += ExtraProcs // no CPU quota lowered the default
	}
	total := physicalMemory()
	if limit := cgroupLimit(os.DirFS("/")); limit > 0 && limit < total {
		total = limit
	}
	if total > 0 {
		want.MemLimit = int64(float64(total) * MemLimitShare)
	}
	if got != want || Current() != want {
		t.Fatalf("Apply = %+v, in effect %+v; want %+v", got, Current(), want)
	}
	if runtime.GOOS == "linux" && (want.MemLimit == math.MaxInt64 || want.MemLimit <= 0) {
		t.Fatalf("no soft memory limit set on Linux: %d", want.MemLimit)
	}
}

func TestCgroupLimit(t *testing.T) {
	const (
		// A systemd host on cgroup v2.
		v2Host = "25 1 0:22 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
		// Docker on cgroup v1 (the container sees its own cgroup as the
		// mount's root) beside other controllers.
		v1Docker = "610 600 0:30 /docker/abc /sys/fs/cgroup/memory ro,nosuid master:15 - cgroup cgroup rw,memory\n" +
			"611 600 0:31 /docker/abc /sys/fs/cgroup/cpu,cpuacct ro,nosuid master:16 - cgroup cgroup rw,cpu,cpuacct\n"
		// A hybrid host: v1 controllers and an unused v2 hierarchy.
		hybrid = "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n" +
			"41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
	)
	for _, tc := range []struct {
		name string
		fs   fstest.MapFS
		want uint64
	}{
		{"v2 with a limit", fstest.MapFS{
			"proc/self/cgroup":    {Data: []byte("0::/system.slice/belay.service\n")},
			"proc/self/mountinfo": {Data: []byte(v2Host)},
			"sys/fs/cgroup/system.slice/belay.service/memory.max": {Data: []byte("536870912\n")},
			"sys/fs/cgroup/system.slice/memory.max":               {Data: []byte("max\n")},
		}, 512 << 20},
		{"v2, the limit on a parent slice", fstest.MapFS{
			"proc/self/cgroup":    {Data: []byte("0::/kubepods.slice/pod1/ctr\n")},
			"proc/self/mountinfo": {Data: []byte(v2Host)},
			"sys/fs/cgroup/kubepods.slice/pod1/ctr/memory.max": {Data: []byte("max\n")},
			"sys/fs/cgroup/kubepods.slice/pod1/memory.max":     {Data: []byte("268435456\n")},
			"sys/fs/cgroup/kubepods.slice/memory.max":          {Data: []byte("1073741824\n")},
		}, 256 << 20},
		{"v2 without", fstest.MapFS{
			"proc/self/cgroup":                    {Data: []byte("0::/user.slice\n")},
			"proc/self/mountinfo":                 {Data: []byte(v2Host)},
			"sys/fs/cgroup/user.slice/memory.max": {Data: []byte("max\n")},
		}, 0},
		{"v2 in its own namespace (at the mount's root)", fstest.MapFS{
			"proc/self/cgroup":         {Data: []byte("0::/\n")},
			"proc/self/mountinfo":      {Data: []byte(v2Host)},
			"sys/fs/cgroup/memory.max": {Data: []byte("2147483648\n")},
		}, 2 << 30},
		{"v1 in a container (the mount's root is its cgroup)", fstest.MapFS{
			"proc/self/cgroup":                           {Data: []byte("12:cpu,cpuacct:/docker/abc\n11:memory:/docker/abc\n")},
			"proc/self/mountinfo":                        {Data: []byte(v1Docker)},
			"sys/fs/cgroup/memory/memory.limit_in_bytes": {Data: []byte("1073741824\n")},
		}, 1 << 30},
		{"v1 on a hybrid host, no limit (its huge count)", fstest.MapFS{
			"proc/self/cgroup":    {Data: []byte("4:memory:/process_api/65f6\n0::/\n")},
			"proc/self/mountinfo": {Data: []byte(hybrid)},
			"sys/fs/cgroup/memory/process_api/65f6/memory.limit_in_bytes": {Data: []byte("9223372036854771712\n")},
			"sys/fs/cgroup/memory/process_api/memory.limit_in_bytes":      {Data: []byte("9223372036854771712\n")},
			"sys/fs/cgroup/memory/memory.limit_in_bytes":                  {Data: []byte("9223372036854771712\n")},
		}, 0},
		{"v1 on a hybrid host, a limit above", fstest.MapFS{
			"proc/self/cgroup":    {Data: []byte("4:memory:/process_api/65f6\n0::/\n")},
			"proc/self/mountinfo": {Data: []byte(hybrid)},
			"sys/fs/cgroup/memory/process_api/memory.limit_in_bytes": {Data: []byte("4294967296\n")},
		}, 4 << 30},
		{"a cgroup outside the mount's root", fstest.MapFS{
			"proc/self/cgroup":                           {Data: []byte("11:memory:/dockerx/abc\n")},
			"proc/self/mountinfo":                        {Data: []byte(v1Docker)},
			"sys/fs/cgroup/memory/memory.limit_in_bytes": {Data: []byte("1073741824\n")},
		}, 0},
		{"no cgroup files", fstest.MapFS{}, 0},
		{"no mountinfo", fstest.MapFS{
			"proc/self/cgroup":         {Data: []byte("0::/\n")},
			"sys/fs/cgroup/memory.max": {Data: []byte("2147483648\n")},
		}, 0},
		{"garbage", fstest.MapFS{
			"proc/self/cgroup":           {Data: []byte("nonsense\n0::/x\n")},
			"proc/self/mountinfo":        {Data: []byte("short line\n" + v2Host)},
			"sys/fs/cgroup/x/memory.max": {Data: []byte("lots\n")},
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := cgroupLimit(tc.fs); got != tc.want {
				t.Fatalf("cgroupLimit = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestBounded(t *testing.T) {
	restore(t)
	Apply(func(string) string { return "" })
	undo := Bounded(func(string) string { return "" })
	if got := Current().GCPercent; got != BoundedGCPercent {
		t.Fatalf("GOGC under Bounded = %d, want %d", got, BoundedGCPercent)
	}
	undo()
	if got := Current().GCPercent; got != GCPercent {
		t.Fatalf("GOGC after Bounded's restore = %d, want belay's %d back", got, GCPercent)
	}
	debug.SetGCPercent(250) // as GOGC=250 in the environment would
	undo = Bounded(func(k string) string {
		if k == "GOGC" {
			return "250"
		}
		return ""
	})
	if got := Current().GCPercent; got != 250 {
		t.Fatalf("GOGC under Bounded with GOGC=250 set = %d, want the environment's 250", got)
	}
	undo()
	if got := Current().GCPercent; got != 250 {
		t.Fatalf("GOGC after restore = %d, want 250", got)
	}
}
