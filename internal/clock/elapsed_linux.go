package clock

import (
	"time"

	"golang.org/x/sys/unix"
)

func elapsed() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		// CLOCK_BOOTTIME exists since Linux 2.6.39; fall back to the
		// runtime's monotonic clock rather than fail a fencing check.
		return time.Since(processStart)
	}
	return time.Duration(ts.Nano())
}
