package gotune

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestPhysicalMemoryIsMemTotal: sysinfo(2)'s total is what
// /proc/meminfo calls MemTotal.
func TestPhysicalMemoryIsMemTotal(t *testing.T) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Skipf("no /proc/meminfo: %v", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("MemTotal line %q: %v", line, err)
			}
			if got := physicalMemory(); got != kb*1024 {
				t.Fatalf("physicalMemory = %d, MemTotal %d kB = %d", got, kb, kb*1024)
			}
			return
		}
	}
	t.Fatal("no MemTotal in /proc/meminfo")
}
