package clock

import (
	"time"

	"golang.org/x/sys/unix"
)

func elapsed() time.Duration {
	var ts unix.Timespec
	// On darwin CLOCK_MONOTONIC keeps counting during sleep.
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return time.Since(processStart)
	}
	return time.Duration(ts.Nano())
}
