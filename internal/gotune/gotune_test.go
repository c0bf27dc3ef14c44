package gotune

import (
	"math"
	"runtime"
	"runtime/debug"
	"testing"
	"testing/fstest"
)

// restore puts the runtime's settings back after a test changed them.
func restore(t *testing.T) {
	procs := runtime.GOMAXPROCS(0)
	gc := debug.SetGCPercent(100)
	debug.SetGCPercent(gc)
	limit := debug.SetMemoryLimit(-1)
	t.Cleanup(func() {
		runtime.GOMAXPROCS(procs)
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
	want := Settings{Procs: before.Procs + ExtraProcs, GCPercent: GCPercent, MemLimit: before.MemLimit}
	if total := memoryTotal(); total > 0 {
		want.MemLimit = int64(float64(total) * MemLimitShare)
	} else if runtime.GOOS == "linux" {
		t.Fatal("sysinfo(2) gave no memory size on Linux")
	}
	if got != want || Current() != want {
		t.Fatalf("Apply = %+v, in effect %+v; want %+v", got, Current(), want)
	}
	if want.MemLimit == math.MaxInt64 || want.MemLimit <= 0 {
		t.Fatalf("no soft memory limit set: %d", want.MemLimit)
	}
}

func TestCgroupLimit(t *testing.T) {
	for _, tc := range []struct {
		name string
		fs   fstest.MapFS
		want uint64
	}{
		{"v2 with a limit", fstest.MapFS{
			"proc/self/cgroup": {Data: []byte("0::/system.slice/belay.service\n")},
			"sys/fs/cgroup/system.slice/belay.service/memory.max": {Data: []byte("536870912\n")},
		}, 512 << 20},
		{"v2 without", fstest.MapFS{
			"proc/self/cgroup":                    {Data: []byte("0::/user.slice\n")},
			"sys/fs/cgroup/user.slice/memory.max": {Data: []byte("max\n")},
		}, 0},
		{"v2 at the root", fstest.MapFS{
			"proc/self/cgroup": {Data: []byte("0::/\n")},
		}, 0},
		{"v1 memory controller", fstest.MapFS{
			"proc/self/cgroup": {Data: []byte("12:cpu,cpuacct:/docker/abc\n11:memory:/docker/abc\n")},
			"sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": {Data: []byte("1073741824\n")},
		}, 1 << 30},
		{"v1 without (its huge count)", fstest.MapFS{
			"proc/self/cgroup":                           {Data: []byte("11:memory:/\n")},
			"sys/fs/cgroup/memory/memory.limit_in_bytes": {Data: []byte("9223372036854771712\n")},
		}, 0},
		{"no cgroup file", fstest.MapFS{}, 0},
		{"garbage", fstest.MapFS{
			"proc/self/cgroup":           {Data: []byte("nonsense\n0::/x\n")},
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
