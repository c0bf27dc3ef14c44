//go:build !linux && !darwin

package clock

import "time"

// elapsed falls back to the runtime's monotonic clock, which may not count
// suspended time on this platform.
func elapsed() time.Duration { return time.Since(processStart) }
