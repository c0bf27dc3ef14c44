package command

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/provider"
)

// patience bounds every wait for a run; generous for a loaded machine.
const patience = 30 * time.Second

// agentConfig is a provider config that runs the test binary as a
// scripted agent.
func agentConfig(t *testing.T, format string, s agentScript) Config {
	t.Helper()
	b, err := json.Marshal(s)
	require.NoError(t, err)
	return Config{
		Argv:         []string{os.Args[0], "-test.run=^$"},
		Format:       format,
		Env:          map[string]string{agentEnv: string(b), "GORACE": "atexit_sleep_ms=0"},
		RunDir:       t.TempDir(),
		PollInterval: 10 * time.Millisecond,
		KillGrace:    10 * time.Second,
	}
}

func newProvider(t *testing.T, cfg Config) *Provider {
	t.Helper()
	p, err := New("agent", cfg)
	require.NoError(t, err)
	return p
}

// harness runs one provider.Run in a goroutine and records its events.
type harness struct {
	t      *testing.T
	cancel context.CancelCauseFunc
	done   chan struct{}
	err    error

	mu     sync.Mutex
	events []provider.Event
}

func startRun(t *testing.T, p *Provider, req provider.Request) *harness {
	t.Helper()
	if req.Session == "" {
		req.Session = "ses_test"
	}
	if req.Run == "" {
		req.Run = "run_test"
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	h := &harness{t: t, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		h.err = p.Run(ctx, req, func(ev provider.Event) error {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.events = append(h.events, ev)
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel(nil)
		<-h.done
	})
	return h
}

// run runs req to its end.
func run(t *testing.T, p *Provider, req provider.Request) ([]provider.Event, error) {
	t.Helper()
	h := startRun(t, p, req)
	return h.wait()
}

// wait waits for the run's end.
func (h *harness) wait() ([]provider.Event, error) {
	h.t.Helper()
	select {
	case <-h.done:
	case <-time.After(patience):
		h.t.Fatal("the run did not end")
	}
	return h.snapshot(), h.err
}

func (h *harness) snapshot() []provider.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.events)
}

// waitEvent waits until an event satisfies cond.
func (h *harness) waitEvent(cond func([]provider.Event) bool) {
	h.t.Helper()
	waitFor(h.t, func() bool { return cond(h.snapshot()) })
}

// lastRef is the last ref the events report.
func lastRef(t *testing.T, evs []provider.Event) belay.ConversationRef {
	t.Helper()
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Kind == provider.RefUpdate {
			return *evs[i].Ref
		}
	}
	t.Fatal("no ref reported")
	return belay.ConversationRef{}
}

// content drops refs and keepalives.
func content(evs []provider.Event) []provider.Event {
	var out []provider.Event
	for _, ev := range evs {
		if ev.Kind != provider.RefUpdate && ev.Kind != provider.Keepalive {
			out = append(out, ev)
		}
	}
	return out
}

// Event constructors for expectations.
func text(s string) provider.Event { return provider.Event{Kind: provider.TextDelta, Text: s} }
func thinking(s string) provider.Event {
	return provider.Event{Kind: provider.ThinkingDelta, Text: s}
}
func turnEnd(r string) provider.Event { return provider.Event{Kind: provider.TurnEnd, StopReason: r} }
func usage(in, out int) provider.Event {
	return provider.Event{Kind: provider.Usage, Tokens: &provider.Tokens{Input: in, Output: out}}
}
func call(id, name, input string, side bool) provider.Event {
	var raw json.RawMessage
	if input != "" {
		raw = json.RawMessage(input)
	}
	return provider.Event{Kind: provider.ToolCall, Call: &provider.Call{ID: id, Name: name, Input: raw, SideEffect: side}}
}
func result(id, content string, isErr bool) provider.Event {
	return provider.Event{Kind: provider.ToolResult, Result: &provider.Result{CallID: id, Content: content, IsError: isErr}}
}

// requireClass asserts err is a *provider.Error of class c.
func requireClass(t *testing.T, err error, c belay.ErrorClass) {
	t.Helper()
	require.Error(t, err)
	var pe *provider.Error
	require.ErrorAs(t, err, &pe, "%v", err)
	require.Equal(t, c, pe.Class, "%v", err)
}

func lines(ls ...string) []agentStep {
	out := make([]agentStep, len(ls))
	for i, l := range ls {
		out[i] = agentStep{Line: l}
	}
	return out
}

func handleOf(t *testing.T, ref belay.ConversationRef) handle {
	t.Helper()
	pid, pgid, token, err := parseID(ref.ID)
	require.NoError(t, err)
	return handle{pid: pid, pgid: pgid, token: token, dir: filepath.Dir(ref.Target)}
}
