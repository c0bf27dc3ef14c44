package runtime

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/belayhq/belay"
)

// RetryPolicy governs retries of retryable failures (rate_limited,
// overloaded, transient): exponential backoff with full jitter, never
// shorter than the provider's Retry-After.
type RetryPolicy struct {
	MaxRetries int           `json:"maxRetries"`
	Base       time.Duration `json:"base"`
	Max        time.Duration `json:"max"`
}

// DefaultRetry is the default retry policy.
var DefaultRetry = RetryPolicy{MaxRetries: 3, Base: time.Second, Max: time.Minute}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.MaxRetries <= 0 {
		p.MaxRetries = DefaultRetry.MaxRetries
	}
	if p.Base <= 0 {
		p.Base = DefaultRetry.Base
	}
	if p.Max <= 0 {
		p.Max = DefaultRetry.Max
	}
	return p
}

// backoff returns the wait before retry n (from 1): a random duration up
// to Base*2^(n-1), capped at Max, and at least retryAfter.
func (p RetryPolicy) backoff(n int, retryAfter time.Duration) time.Duration {
	ceiling := p.Base << min(n-1, 30)
	if ceiling <= 0 || ceiling > p.Max {
		ceiling = p.Max
	}
	d := time.Duration(rand.Int64N(int64(ceiling)) + 1)
	return max(d, retryAfter)
}

// RecoveryPolicy governs recovery from stalls (watchdog expiries) and from
// tripped failure detectors (G9).
type RecoveryPolicy struct {
	// MaxAttempts bounds recoveries per run.
	MaxAttempts int `json:"maxAttempts"`
	// Window is the failure detector over tool results.
	Window WindowPolicy `json:"window"`
}

// DefaultRecovery is the default recovery policy.
var DefaultRecovery = RecoveryPolicy{MaxAttempts: 2, Window: DefaultWindow}

func (p RecoveryPolicy) withDefaults() RecoveryPolicy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = DefaultRecovery.MaxAttempts
	}
	if p.Window.Size <= 0 {
		p.Window = DefaultWindow
	}
	return p
}

// recoverableToolFailure reports whether a failed tool result counts
// towards the failure detector.
func recoverableToolFailure(c belay.ErrorClass) bool {
	switch c {
	case belay.ClassPermissionDenied, belay.ClassTimeout:
		return true
	}
	return c.Retryable()
}

// sideEffects tracks the side-effecting tool calls of a run (G9). A call
// with side effects whose intent was journaled makes a resend unsafe
// unless its settlement says it never ran (permission denied): a call
// whose settlement is missing may have run.
type sideEffects struct {
	pending map[string]string // call id -> tool name, intent without settlement
	settled string            // the first side-effecting call that ran: "name (id)"
	sideEff map[string]bool   // call id -> has side effects
}

func newSideEffects() *sideEffects {
	return &sideEffects{pending: map[string]string{}, sideEff: map[string]bool{}}
}

func (s *sideEffects) intent(id, name string, sideEffect bool) {
	if sideEffect {
		s.pending[id] = name
		s.sideEff[id] = true
	}
}

func (s *sideEffects) settle(id string, notExecuted bool) {
	name, ok := s.pending[id]
	if !ok {
		return
	}
	delete(s.pending, id)
	if !notExecuted && s.settled == "" {
		s.settled = fmt.Sprintf("%q (call %s)", name, id)
	}
}

// unsafe returns why a resend would repeat side effects, or "".
func (s *sideEffects) unsafe() string {
	if s.settled != "" {
		return "tool " + s.settled + " had side effects and settled"
	}
	for id, name := range s.pending {
		return fmt.Sprintf("tool %q (call %s) has side effects and may have run", name, id)
	}
	return ""
}
