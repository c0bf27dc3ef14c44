package procs

import (
	"runtime"
	"testing"
)

func TestTune(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(before) })

	if got := Tune(func(string) string { return "3" }); got != before || runtime.GOMAXPROCS(0) != before {
		t.Fatalf("with GOMAXPROCS set: Tune = %d, GOMAXPROCS %d; want both %d (left as the environment set it)", got, runtime.GOMAXPROCS(0), before)
	}
	if got := Tune(func(string) string { return "" }); got != before+Extra || runtime.GOMAXPROCS(0) != before+Extra {
		t.Fatalf("without GOMAXPROCS: Tune = %d, GOMAXPROCS %d; want both %d", got, runtime.GOMAXPROCS(0), before+Extra)
	}
}
