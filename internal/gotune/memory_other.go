//go:build !linux

package gotune

// physicalMemory returns 0 (unknown) where sysinfo(2) is not there: no
// soft memory limit is set from it.
func physicalMemory() uint64 { return 0 }
