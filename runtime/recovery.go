package runtime

import (
	"fmt"
	"math/rand/v2"
	"sort"
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
	pending map[string]string // call id -> tool name: intent, no settlement
	ran     map[string]string // call id -> tool name: settled, and it ran
	first   string            // the first call that ran, for reasons
	calls   map[string]bool   // every call id journaled
	results map[string]bool   // every call id whose result was journaled
}

func newSideEffects() *sideEffects {
	return &sideEffects{pending: map[string]string{}, ran: map[string]string{}, calls: map[string]bool{}, results: map[string]bool{}}
}

// mayHaveRun reports whether a side-effecting call with this id was
// journaled and not settled as not executed: running it again would repeat
// its effect.
func (s *sideEffects) mayHaveRun(id string) bool {
	_, p := s.pending[id]
	_, r := s.ran[id]
	return p || r
}

func (s *sideEffects) intent(id, name string, sideEffect bool) {
	s.calls[id] = true
	if sideEffect {
		s.pending[id] = name
	}
}

func (s *sideEffects) settle(id string, notExecuted bool) {
	s.results[id] = true
	name, ok := s.pending[id]
	if !ok {
		return
	}
	delete(s.pending, id)
	if notExecuted {
		return
	}
	s.ran[id] = name
	if s.first == "" {
		s.first = fmt.Sprintf("%q (call %s)", name, id)
	}
}

// unsafe returns why a resend would repeat side effects, or "".
func (s *sideEffects) unsafe() string {
	if s.first != "" {
		return "tool " + s.first + " had side effects and settled"
	}
	for id, name := range s.pending {
		return fmt.Sprintf("tool %q (call %s) has side effects and may have run", name, id)
	}
	return ""
}

// names returns the tools that ran or may have run, sorted.
func (s *sideEffects) names() []string {
	set := map[string]bool{}
	for _, n := range s.ran {
		set[n] = true
	}
	for _, n := range s.pending {
		set[n] = true
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
