package runtime

import (
	"sync"
	"time"

	"github.com/belayhq/belay/internal/clock"
)

// alarm calls fire at the earliest moment it was armed for: one clock
// timer, moved earlier by each arm and never later, until stop.
type alarm struct {
	clk  clock.Clock
	fire func()

	mu      sync.Mutex
	timer   clock.Timer
	at      time.Time
	stopped bool
}

// arm makes sure fire is called no later than at (a zero at is ignored).
func (a *alarm) arm(at time.Time) {
	if at.IsZero() {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopped || a.timer != nil && !a.at.After(at) {
		return
	}
	if a.timer != nil {
		a.timer.Stop()
	}
	a.at = at
	a.timer = a.clk.AfterFunc(at.Sub(a.clk.Now()), a.ring)
}

func (a *alarm) ring() {
	a.mu.Lock()
	a.timer, a.at = nil, time.Time{}
	stopped := a.stopped
	a.mu.Unlock()
	if !stopped {
		a.fire()
	}
}

// stop disarms the alarm for good.
func (a *alarm) stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stopped = true
	if a.timer != nil {
		a.timer.Stop()
	}
}
