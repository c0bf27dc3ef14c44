package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/belayhq/belay"
)

// RetryRequest asks for a new run with the input of a finished one.
type RetryRequest struct {
	// Run is the finished run to retry.
	Run string
	// AllowSideEffects retries even when side-effecting tool calls of the
	// run settled (or may have): they may run again.
	AllowSideEffects bool
	// IdempotencyKey makes the retry idempotent; default "retry-" + Run,
	// so that retrying the same run twice makes one new run (G3).
	IdempotencyKey string
	// Policy applies if the session is busy (default enqueue).
	Policy belay.Policy
	// Deadline bounds the new run from its submit; 0 keeps the original
	// run's: the time it had from its creation to its deadline.
	Deadline time.Duration
}

// RelativeDeadline is the time a run had from its creation to its
// deadline, to the second (its deadline is set from the submit's clock
// just before the store stamps its creation), or 0 if it had none.
func RelativeDeadline(run belay.Run) time.Duration {
	if run.Deadline.IsZero() || !run.Deadline.After(run.CreatedAt) {
		return 0
	}
	return max(run.Deadline.Sub(run.CreatedAt).Round(time.Second), time.Second)
}

// RetryKey is the default idempotency key of a retry of run.
func RetryKey(run string) string { return "retry-" + run }

// Retry creates a new run in the same session with the journaled input of
// a finished run (any terminal status). It is refused with a
// *SideEffectsError when a side-effecting tool call of the run settled or
// may have, unless req.AllowSideEffects; the names of those tools are
// returned with the new run.
func (r *Runtime) Retry(ctx context.Context, req RetryRequest) (belay.Run, []string, error) {
	orig, err := r.store.Run(ctx, req.Run)
	if err != nil {
		return belay.Run{}, nil, err
	}
	if !orig.Status.Terminal() {
		return belay.Run{}, nil, fmt.Errorf("%w: run %s is still %s; wait for it (belay wait %s) or cancel it first", belay.ErrActive, orig.ID, orig.Phase, orig.ID)
	}
	effects, err := scanRunEffects(ctx, r.store, orig)
	if err != nil {
		return belay.Run{}, nil, err
	}
	tools := effects.names()
	if len(tools) > 0 && !req.AllowSideEffects {
		return belay.Run{}, tools, &belay.SideEffectsError{Run: orig.ID, Tools: tools}
	}
	raw, err := r.store.RunInput(ctx, orig.ID)
	if err != nil {
		return belay.Run{}, nil, err
	}
	var in belay.InputData
	if err := json.Unmarshal(raw, &in); err != nil {
		return belay.Run{}, nil, fmt.Errorf("%w: run %s has an unreadable input: %v", belay.ErrInvalid, orig.ID, err)
	}
	key := req.IdempotencyKey
	if key == "" {
		key = RetryKey(orig.ID)
	}
	policy := req.Policy
	if policy == "" {
		policy = belay.PolicyEnqueue
	}
	deadline := req.Deadline
	if deadline <= 0 {
		deadline = RelativeDeadline(orig)
	}
	run, err := r.Submit(ctx, SubmitRequest{
		Session: orig.Session, Provider: orig.Provider, Model: orig.Model, Prompt: in.Prompt,
		Script: in.Script, Options: in.Options, Policy: policy, Priority: orig.Priority, IdempotencyKey: key,
		Deadline: deadline,
	})
	return run, tools, err
}
