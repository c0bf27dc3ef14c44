package lock

import (
	"math/rand/v2"
	"time"

	"github.com/belayhq/belay/internal/clock"
)

// Options configures a Lock. The zero value is usable.
type Options struct {
	// TTL is how long a record stays valid without a heartbeat. Holders
	// must heartbeat well within it. Default 30s.
	TTL time.Duration
	// MissingMetaGrace is how long a lock file without a readable record
	// (by its mtime) counts as held before it is stale. Default 2s.
	MissingMetaGrace time.Duration
	// Clock reads the time used for acquiredAt, heartbeatAt, expiresAt and
	// for judging expiry and grace. Default time.Now.
	Clock func() time.Time
	// Incarnation is written into the record; default a random id chosen
	// once per process.
	Incarnation string
	// Purpose is written into the record ("daemon"); optional.
	Purpose string
	// Elapsed reads a monotonic clock that keeps counting while the
	// machine is suspended; [Lock.Check] judges the age of the last
	// confirmed heartbeat with it. Default clock.Elapsed.
	Elapsed func() time.Duration
	// FenceMargin is how long before the TTL runs out a holder that has
	// not confirmed a heartbeat stops writing: [Lock.Check] fences after
	// TTL-FenceMargin. Default TTL/4.
	FenceMargin time.Duration
	// BackoffMin and BackoffMax bound the exponential backoff of Acquire.
	// Defaults 10ms and 1s. Each wait is jittered to [d/2, d).
	BackoffMin, BackoffMax time.Duration

	fastProof bool // Elapsed is clock.Elapsed: Check may use time.Now first
}

func (o Options) withDefaults() Options {
	if o.TTL <= 0 {
		o.TTL = 30 * time.Second
	}
	if o.MissingMetaGrace <= 0 {
		o.MissingMetaGrace = 2 * time.Second
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Elapsed == nil {
		// Only the real clocks may take Check's fast path: an injected
		// Elapsed is read every time.
		o.Elapsed, o.fastProof = clock.Elapsed, true
	}
	if o.FenceMargin <= 0 || o.FenceMargin >= o.TTL {
		o.FenceMargin = o.TTL / 4
	}
	if o.Incarnation == "" {
		o.Incarnation = processIncarnation()
	}
	if o.BackoffMin <= 0 {
		o.BackoffMin = 10 * time.Millisecond
	}
	if o.BackoffMax <= 0 {
		o.BackoffMax = time.Second
	}
	o.BackoffMax = max(o.BackoffMax, o.BackoffMin)
	return o
}

// fenceAfter is the age of the last confirmed heartbeat at which a holder
// must prove ownership again before it writes.
func (o Options) fenceAfter() time.Duration { return o.TTL - o.FenceMargin }

// jitter returns a duration in [d/2, d), so that racers spread out.
func jitter(d time.Duration) time.Duration {
	if d < 2 {
		return d
	}
	return d/2 + rand.N(d/2)
}
