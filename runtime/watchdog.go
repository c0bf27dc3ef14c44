package runtime

import (
	"sync"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/clock"
)

// Tiers are the watchdog's inactivity timeouts by phase (G8). Only
// progress events reset them; usage and keepalives do not.
type Tiers struct {
	// AwaitingFirst applies until the first progress event of an attempt,
	// and is the general default.
	AwaitingFirst time.Duration `json:"awaitingFirst"`
	// Streaming applies between progress events.
	Streaming time.Duration `json:"streaming"`
	// ToolRunning applies while a tool call has no result yet.
	ToolRunning time.Duration `json:"toolRunning"`
	// AfterTurnEnd applies once the model ended its turn but the provider
	// has not returned: a short fallback after which the run is finished.
	AfterTurnEnd time.Duration `json:"afterTurnEnd"`
}

// DefaultTiers are the default inactivity tiers.
var DefaultTiers = Tiers{
	AwaitingFirst: 120 * time.Second,
	Streaming:     120 * time.Second,
	ToolRunning:   600 * time.Second,
	AfterTurnEnd:  30 * time.Second,
}

func (t Tiers) withDefaults() Tiers {
	if t.AwaitingFirst <= 0 {
		t.AwaitingFirst = DefaultTiers.AwaitingFirst
	}
	if t.Streaming <= 0 {
		t.Streaming = t.AwaitingFirst
	}
	if t.ToolRunning <= 0 {
		t.ToolRunning = DefaultTiers.ToolRunning
	}
	if t.AfterTurnEnd <= 0 {
		t.AfterTurnEnd = DefaultTiers.AfterTurnEnd
	}
	return t
}

// expiry says why the watchdog fired.
type expiry struct {
	Tier belay.Tier
	Idle time.Duration
}

// watchdog judges an attempt's liveness from its activity. It keeps one
// timer armed for the moment the current tier would expire; progress only
// moves a timestamp, and a firing timer that finds recent progress re-arms
// itself, so a fast token stream costs no timer churn.
type watchdog struct {
	clk   clock.Clock
	tiers Tiers
	fire  func(expiry)

	mu      sync.Mutex
	tier    belay.Tier
	last    time.Time
	timer   clock.Timer
	stopped bool
}

// newWatchdog starts watching from now in the awaiting-first tier.
func newWatchdog(clk clock.Clock, tiers Tiers, fire func(expiry)) *watchdog {
	w := &watchdog{clk: clk, tiers: tiers.withDefaults(), fire: fire, tier: belay.TierAwaitingFirst, last: clk.Now()}
	w.mu.Lock()
	w.armLocked()
	w.mu.Unlock()
	return w
}

func (w *watchdog) timeout(t belay.Tier) time.Duration {
	switch t {
	case belay.TierStreaming:
		return w.tiers.Streaming
	case belay.TierToolRunning:
		return w.tiers.ToolRunning
	case belay.TierAfterTurnEnd:
		return w.tiers.AfterTurnEnd
	}
	return w.tiers.AwaitingFirst
}

func (w *watchdog) armLocked() {
	if w.timer != nil {
		w.timer.Stop()
	}
	d := w.last.Add(w.timeout(w.tier)).Sub(w.clk.Now())
	w.timer = w.clk.AfterFunc(max(d, 0), w.check)
}

// check runs when the timer fires: it fires the watchdog if the tier has
// really expired, and re-arms otherwise.
func (w *watchdog) check() {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return
	}
	now := w.clk.Now()
	idle := now.Sub(w.last)
	if idle < w.timeout(w.tier) {
		w.armLocked()
		w.mu.Unlock()
		return
	}
	w.stopped = true
	e := expiry{Tier: w.tier, Idle: idle}
	w.mu.Unlock()
	w.fire(e)
}

// progress records a progress event and moves to tier.
func (w *watchdog) progress(tier belay.Tier) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	w.last = w.clk.Now()
	if tier != w.tier {
		// A shorter tier must take effect now, not when the old timer fires.
		w.tier = tier
		w.armLocked()
	}
}

// lastActivity returns the time of the last progress (or the start).
func (w *watchdog) lastActivity() (time.Time, belay.Tier) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last, w.tier
}

// stop disarms the watchdog; it never fires after stop returns.
func (w *watchdog) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	if w.timer != nil {
		w.timer.Stop()
	}
}
