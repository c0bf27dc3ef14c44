//go:build !unix

package bench

// cpuSeconds is not measured here.
func cpuSeconds() float64 { return 0 }
