package clock

import "time"

// Elapsed returns the time since an arbitrary fixed point on a monotonic
// clock that keeps counting while the machine is suspended (CLOCK_BOOTTIME
// on Linux, CLOCK_MONOTONIC on darwin, where it includes sleep). Go's own
// monotonic reading (time.Since) stops during suspend on Linux, so a
// process that judges "how long since I last proved I own my lock" with it
// would, after a laptop resumes, believe almost no time has passed. Fencing
// decisions use Elapsed instead.
func Elapsed() time.Duration { return elapsed() }

// processStart anchors the fallback monotonic reading.
var processStart = time.Now()
