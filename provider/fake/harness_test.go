package fake

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay/internal/clock"
	"github.com/belayhq/belay/provider"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// patience bounds every real wait in these tests; generous for a loaded
// machine. Nothing sleeps on the fake timeline.
const patience = 20 * time.Second

// rec is an event and the fake time it arrived at, since epoch.
type rec struct {
	provider.Event
	at time.Duration
}

// harness runs one provider.Run in a goroutine on a fake clock.
type harness struct {
	t      *testing.T
	clk    *clock.Fake
	p      *Provider
	cancel context.CancelFunc
	done   chan struct{}
	err    error

	mu     sync.Mutex
	events []rec
}

func newFake(t *testing.T, opts Options) (*Provider, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(epoch)
	opts.Clock = clk
	return New(opts), clk
}

// start runs req on a new fake-clock provider.
func start(t *testing.T, opts Options, req provider.Request) *harness {
	t.Helper()
	p, clk := newFake(t, opts)
	return startOn(t, p, clk, req)
}

func startOn(t *testing.T, p *Provider, clk *clock.Fake, req provider.Request) *harness {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{t: t, clk: clk, p: p, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		h.err = p.Run(ctx, req, func(ev provider.Event) error {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.events = append(h.events, rec{ev, clk.Now().Sub(epoch)})
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		<-h.done
	})
	return h
}

func (h *harness) finished() bool {
	select {
	case <-h.done:
		return true
	default:
		return false
	}
}

// settle waits until the provider is blocked on a timer or has returned:
// then every event it will emit before the next timer fires was emitted.
func (h *harness) settle() {
	h.t.Helper()
	h.poll("the provider to block on a timer or return", func() bool {
		return h.clk.Pending() > 0 || h.finished()
	})
}

func (h *harness) poll(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// advance moves the fake clock by total in steps (no step may span two
// of the provider's timers), settling after each.
func (h *harness) advance(total, step time.Duration) {
	h.t.Helper()
	for done := time.Duration(0); done < total; done += step {
		h.settle()
		h.clk.Advance(min(step, total-done))
	}
	h.settle()
}

// wait returns Run's error once it returned.
func (h *harness) wait() error {
	h.t.Helper()
	select {
	case <-h.done:
		return h.err
	case <-time.After(patience):
		h.t.Fatal("Run did not return")
		return nil
	}
}

// finish advances the clock until Run returns and returns its error.
func (h *harness) finish(step time.Duration) error {
	h.t.Helper()
	deadline := time.Now().Add(patience)
	for {
		h.settle()
		if h.finished() {
			return h.err
		}
		if time.Now().After(deadline) {
			h.t.Fatal("Run did not finish")
		}
		h.clk.Advance(step)
	}
}

func (h *harness) snapshot() []rec {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]rec(nil), h.events...)
}

// waitEvents waits until n events arrived.
func (h *harness) waitEvents(n int) []rec {
	h.t.Helper()
	h.poll("events", func() bool { return len(h.snapshot()) >= n || h.finished() })
	evs := h.snapshot()
	require.GreaterOrEqual(h.t, len(evs), n, "Run returned %v", h.err)
	return evs
}

// kinds lists the events' kinds.
func kinds(evs []rec) []provider.EventKind {
	out := make([]provider.EventKind, len(evs))
	for i, e := range evs {
		out[i] = e.Kind
	}
	return out
}

// only keeps events of the given kinds.
func only(evs []rec, ks ...provider.EventKind) []rec {
	var out []rec
	for _, e := range evs {
		for _, k := range ks {
			if e.Kind == k {
				out = append(out, e)
			}
		}
	}
	return out
}

func text(evs []rec) string {
	var b strings.Builder
	for _, e := range only(evs, provider.TextDelta) {
		b.WriteString(e.Text)
	}
	return b.String()
}

// collect runs req synchronously (for scripts without delays).
func collect(t *testing.T, p *Provider, req provider.Request) ([]provider.Event, error) {
	t.Helper()
	var evs []provider.Event
	err := p.Run(context.Background(), req, func(ev provider.Event) error {
		evs = append(evs, ev)
		return nil
	})
	return evs, err
}

func textOf(evs []provider.Event) string {
	var b strings.Builder
	for _, e := range evs {
		if e.Kind == provider.TextDelta {
			b.WriteString(e.Text)
		}
	}
	return b.String()
}

func req(model, prompt string) provider.Request {
	return provider.Request{Session: "ses_1", Run: "run_1", Model: model, Prompt: prompt, Attempt: 1}
}
