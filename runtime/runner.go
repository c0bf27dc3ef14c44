package runtime

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/clock"
	"github.com/belayhq/belay/internal/jsonx"
	"github.com/belayhq/belay/provider"
	"github.com/belayhq/belay/store"
)

// startMode says how a runner begins.
type startMode int

const (
	// startFresh: a queued run the scheduler admitted.
	startFresh startMode = iota
	// startReclaim: a run a previous incarnation left in flight.
	startReclaim
	// startRetry: a run of this incarnation whose runner stopped because
	// the store refused a write (a full disk, an I/O error): retried once
	// the store may accept writes again (see stall.go).
	startRetry
	// startAdopt: a run leased to this incarnation with no runner here
	// (its runner exited without ending it or handing it on, or its
	// lease expired while this owner kept heartbeating, which a peer's
	// claim would rescue but this owner's never does): taken back like a
	// rescue (see adoptOrphans in claim.go).
	startAdopt
)

// runner executes one run: it leases it, runs attempts through its
// provider, journals what happens, recovers within its budgets, and
// always leaves the run in a consistent journaled state with a reason.
type runner struct {
	r    *Runtime
	id   string
	mode startMode
	done chan struct{}
	// claimed is the run as the store leased it to this runtime (with its
	// input and session when the claim read them), when a claim started
	// the runner.
	claimed *store.Claimed
	// since is when the runner started: the run's activity until its
	// first attempt arms a watchdog.
	since time.Time
	// recheckCancel: a cancel request for the run was seen before the
	// runner existed (startLocked); execute reads the run again for it.
	recheckCancel bool

	mu            sync.Mutex
	stalled       error                   // the store refused a write: retry later (stall.go)
	cause         error                   // why the whole run is being stopped (first wins)
	cancelAttempt context.CancelCauseFunc // cancels the current attempt or wait
	wd            *watchdog
	phase         belay.RunPhase
	attempt       int

	// Owned by the runner goroutine.
	run      belay.Run
	epoch    uint64
	prov     provider.Provider
	effects  *sideEffects
	window   *failureWindow
	retries  int
	recovers int
	started  bool // the current attempt reported progress

	resumable      bool                  // guarded by mu: the provider could resume the run now
	barrenResume   bool                  // guarded by mu: the last attempt resumed and made no progress
	sessionOptions json.RawMessage       // the session's provider options
	sessionRef     belay.ConversationRef // the session's ref when the run started
	text           streamPos             // the answer text journaled since the last fresh attempt
	thinking       streamPos             // the thinking text, the same way
	fresh          int                   // the attempt that last started from scratch
}

// canResume reports whether the provider can resume the run from the ref
// it reported.
func (rn *runner) canResume() bool {
	return rn.prov.Capabilities().Resume && (rn.run.Ref.ID != "" || rn.run.Ref.Cursor != "")
}

// startLocked starts a runner for a run: claimed is the run as the store
// leased it to this runtime (a claim), nil when the runner takes its own
// lease (startRetry, startAdopt). r.mu is held.
func (r *Runtime) startLocked(id string, mode startMode, claimed *store.Claimed) {
	rn := &runner{r: r, id: id, mode: mode, done: make(chan struct{}), since: r.clk.Now(), claimed: claimed}
	r.runners[id] = rn
	if _, ok := r.cancelSeen[id]; ok {
		// A cancel request reached this runtime (the change feed) before
		// the runner was here to take it, and may be newer than the run
		// the claim returned: the runner reads it again before it starts.
		delete(r.cancelSeen, id)
		rn.recheckCancel = true
	}
	r.wg.Add(1)
	r.workers.run(func() {
		defer r.wg.Done()
		defer r.afterRunner(rn)
		defer close(rn.done)
		rn.execute()
	})
}

// cancel stops the run for cause (the first cause wins).
func (rn *runner) cancel(cause error) {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	if rn.cause == nil {
		rn.cause = cause
	}
	if rn.cancelAttempt != nil {
		rn.cancelAttempt(cause)
	}
}

func (rn *runner) stopCause() error {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	return rn.cause
}

func (rn *runner) activity() belay.Activity {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	a := belay.Activity{Run: rn.id, Phase: rn.phase, Attempt: rn.attempt}
	if rn.wd != nil {
		a.LastProgress, a.Tier = rn.wd.lastActivity()
	} else {
		a.LastProgress, a.Tier = rn.since, belay.TierAwaitingFirst
	}
	return a
}

// ctx is the context for the runner's own store writes: they must go
// through even while the run is being cancelled.
var bgCtx = context.Background()

func (rn *runner) log() *runnerLog { return &runnerLog{rn} }

type runnerLog struct{ rn *runner }

func (l *runnerLog) warn(msg string, err error) {
	l.rn.r.log.Warn(msg, "run", l.rn.id, "err", err)
}

// unreachable stalls the runner when err says the store cannot be read
// now: the run is not unreadable, the store is away; it is tried again
// later (stall.go). It reports whether it did.
func (rn *runner) unreachable(err error) bool {
	if !errors.Is(err, belay.ErrStoreUnreachable) {
		return false
	}
	rn.log().warn("read run", err)
	rn.stallOn(err)
	return true
}

// execute is the runner's life.
func (rn *runner) execute() {
	r := rn.r
	if c := rn.claimed; c != nil {
		rn.run, rn.epoch = c.Run, c.Run.Epoch
		rn.setPhase(c.Run.Phase)
	} else if !rn.takeLease() {
		return
	}
	var err error
	rn.prov, err = r.opts.Providers.Get(rn.run.Provider)
	if err != nil {
		rn.end(belay.PhaseFailed, &belay.RunError{Class: belay.ClassInvalidRequest, Message: err.Error()}, "no such provider")
		return
	}
	if rn.recheckCancel {
		if run, err := r.store.Run(bgCtx, rn.id); err == nil && run.CancelRequest != nil {
			rn.run.CancelRequest = run.CancelRequest
		} else if rn.unreachable(err) {
			return
		}
	}
	if cr := rn.run.CancelRequest; cr != nil {
		// Asked to cancel while nobody ran it (queued behind a claim, or
		// its owner gone): carry the request out before anything starts.
		rn.cancel(cancelCause(cr))
	}
	rn.effects = newSideEffects()
	rn.window = newFailureWindow(r.opts.Recovery.Window)
	rn.mu.Lock()
	rn.attempt = rn.run.Attempt
	rn.resumable = rn.canResume()
	rn.mu.Unlock()

	var input json.RawMessage
	if c := rn.claimed; c != nil && c.Input != nil {
		input = c.Input // read by the claim
	} else {
		input, err = r.store.RunInput(bgCtx, rn.id)
	}
	var in belay.InputData
	if err == nil {
		err = json.Unmarshal(input, &in)
	}
	if rn.unreachable(err) {
		return
	}
	if err != nil {
		rn.end(belay.PhaseFailed, &belay.RunError{Class: belay.ClassInternal, Message: "unreadable run input"}, err.Error())
		return
	}

	if c := rn.claimed; c != nil && c.Session != nil {
		rn.sessionOptions, rn.sessionRef = c.Session.Options, c.Session.Ref // read by the claim
	} else if sess, err := r.store.Session(bgCtx, rn.run.Session); err == nil {
		rn.sessionOptions, rn.sessionRef = sess.Options, sess.Ref
	}
	stopTimers := rn.startTimers()
	defer stopTimers()

	resume := false
	if rn.mode != startFresh && rn.attempt > 0 {
		if err := rn.scanEffects(); rn.unreachable(err) {
			return
		} else if err != nil {
			rn.end(belay.PhaseFailed, &belay.RunError{Class: belay.ClassInternal, Message: "unreadable run journal"}, err.Error())
			return
		}
		if rn.text, rn.thinking, rn.fresh, err = scanRunText(bgCtx, r.store, rn.run); rn.unreachable(err) {
			return
		} else if err != nil {
			rn.end(belay.PhaseFailed, &belay.RunError{Class: belay.ClassInternal, Message: "unreadable run journal"}, err.Error())
			return
		}
		why := "the daemon that ran it is gone"
		switch rn.mode {
		case startRetry:
			why = "a journal write failed and the store accepts writes again"
		case startAdopt:
			why = "its runner in this daemon stopped without ending it"
		}
		var ok bool
		if resume, ok = rn.decide(why); !ok {
			return
		}
	}
	for {
		err := rn.attemptOnce(in, resume)
		// A resume that brought no progress (the provider reports the same
		// failure again: an agent that had exited, a failed response) is not
		// tried again: the next recovery resends if that is safe.
		rn.mu.Lock()
		rn.barrenResume = resume && !rn.started
		rn.mu.Unlock()
		next, cont := rn.outcome(err)
		if !cont {
			return
		}
		resume = next
	}
}

// takeLease takes the lease back for a run of this runtime whose runner
// stopped because the store refused a write (startRetry), or that has no
// runner here (startAdopt). It reports whether the runner may go on: not
// when the run ended meanwhile, or another owner rescued it (its lease
// had expired). The new epoch fences every late write of the runner
// that had it (G6).
func (rn *runner) takeLease() bool {
	r := rn.r
	run, err := r.store.Run(bgCtx, rn.id)
	if err != nil {
		rn.log().warn("load run", err)
		rn.stallOn(err)
		return false
	}
	if run.Status.Terminal() {
		return false
	}
	var takeover uint64
	if run.Lease != nil {
		if run.Lease.Owner != r.opts.Incarnation {
			return false // rescued by another owner: it is theirs now
		}
		takeover = run.Epoch // our own lease, with no runner on it here
	}
	leased, err := r.store.AcquireRunLease(bgCtx, rn.id, r.opts.Incarnation, r.opts.LeaseTTL, takeover)
	if err != nil {
		rn.log().warn("lease run", err)
		rn.stallOn(err)
		return false
	}
	rn.run, rn.epoch = leased, leased.Epoch
	rn.setPhase(leased.Phase)
	r.unstalled(rn.id)
	return true
}

// startTimers arms the absolute deadline and the lease renewal.
func (rn *runner) startTimers() func() {
	r := rn.r
	var timers []clock.Timer
	if d := rn.run.Deadline; !d.IsZero() {
		timers = append(timers, r.clk.AfterFunc(d.Sub(r.clk.Now()), func() { rn.cancel(&deadlineError{at: d}) }))
	}
	var mu sync.Mutex
	stopped := false
	// The lease is proven until lastRenew + TTL by the store (the store
	// grants it at its own now, after lastRenew). Unless a renewal succeeds
	// again, the runner stops the run's side effects at three quarters of
	// that (the store unreachable, a partition): another owner may rescue
	// the run once it expires, and two runners must never act at once.
	// The fence is a timer of its own, so a renewal that hangs (a silent
	// partition: no answer, no error) cannot delay it; each renewal is
	// bounded too, so the next one is tried.
	fenceAfter := r.opts.LeaseTTL - r.opts.LeaseTTL/4
	var fence clock.Timer
	armFence := func(from time.Time) { // mu held
		if fence != nil {
			fence.Stop()
		}
		fence = r.clk.AfterFunc(from.Add(fenceAfter).Sub(r.clk.Now()), func() { rn.cancel(errLeaseUnproven) })
	}
	mu.Lock()
	armFence(r.clk.Now())
	mu.Unlock()
	var renew func()
	renew = func() {
		a := rn.activity()
		act := &belay.RunActivity{LastProgress: a.LastProgress, Tier: string(a.Tier)}
		asked := r.clk.Now()
		ctx, cancel := context.WithCancel(bgCtx)
		bound := r.clk.AfterFunc(r.opts.LeaseTTL/8, cancel)
		run, err := r.store.RenewRunLease(ctx, rn.id, rn.epoch, r.opts.LeaseTTL, act)
		bound.Stop()
		cancel()
		if err != nil {
			if errors.Is(err, belay.ErrStaleEpoch) || errors.Is(err, belay.ErrNotLeased) {
				rn.cancel(errLeaseLost)
				return
			}
			if errors.Is(err, belay.ErrTerminal) {
				return
			}
			rn.log().warn("renew lease", err)
		} else if cr := run.CancelRequest; cr != nil {
			// The change feed brings cancel requests at once; a renewal
			// that finds one (its feed entry missed: a store read that
			// failed then) carries it out no later than this.
			rn.cancel(cancelCause(cr))
		}
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		// Renew at half the TTL; after a failure, sooner, so that a store
		// back within the lease keeps the run.
		next := r.opts.LeaseTTL / 2
		if err == nil {
			armFence(asked)
		} else {
			next = r.opts.LeaseTTL / 8
		}
		timers = append(timers, r.clk.AfterFunc(next, renew))
	}
	mu.Lock()
	timers = append(timers, r.clk.AfterFunc(r.opts.LeaseTTL/2, renew))
	mu.Unlock()
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		fence.Stop()
		for _, t := range timers {
			t.Stop()
		}
	}
}

// attemptOnce runs one attempt through the provider.
func (rn *runner) attemptOnce(in belay.InputData, resume bool) error {
	r := rn.r
	rn.started = false
	ctx, cancel := context.WithCancelCause(bgCtx)
	defer cancel(nil)
	wd := newWatchdog(r.clk, r.opts.Tiers, func(e expiry) {
		// After the turn end the run finishes: the provider's work must stop.
		cancel(&watchdogError{e: e, detach: e.Tier != belay.TierAfterTurnEnd && rn.willResume()})
	})
	defer wd.stop()
	rn.mu.Lock()
	rn.attempt++
	if rn.cause != nil {
		rn.mu.Unlock()
		return rn.cause
	}
	rn.cancelAttempt, rn.wd = cancel, wd
	rn.mu.Unlock()

	// The update that starts an attempt records it (attempt and resume).
	if err := rn.update(belay.RunUpdate{Phase: belay.PhaseAwaitingResponse, Attempt: rn.attempt, Data: jsonx.Must(belay.AttemptData{Attempt: rn.attempt, Resume: resume})}); err != nil {
		return err
	}
	rn.text.replay, rn.thinking.replay = 0, 0
	if !resume {
		// A fresh attempt's text replaces what came before.
		rn.text, rn.thinking = streamPos{}, streamPos{}
		rn.fresh = rn.attempt
	}
	req := provider.Request{
		Session: rn.run.Session, Run: rn.id, Model: rn.run.Model, Prompt: in.Prompt,
		Attempt: rn.attempt, Ref: rn.run.Ref, Resume: resume, Options: rn.sessionOptions,
		SessionRef: rn.sessionRef,
	}
	if resume {
		// The provider goes on from its ref: what it emitted after the
		// ref was last journaled, it emits again (a cursor-based provider
		// replays from its cursor; one that re-reads the whole answer
		// skips TextOffset bytes). The journal may hold some of it already
		// (text is written as it comes, the ref after it, and a crash can
		// fall in between): those bytes are dropped, not journaled twice.
		// Thinking text is streamed and replayed the same way.
		req.TextOffset, req.ThinkingOffset = rn.text.atRef, rn.thinking.atRef
		rn.text.resume()
		rn.thinking.resume()
	}
	req.Input, _ = json.Marshal(in)
	err := rn.callProvider(ctx, req, func(ev provider.Event) error { return rn.emit(ev, wd, cancel) })
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		// The attempt was cut short by us: the cause says why.
		return cause
	}
	return err
}

// callProvider runs the provider, turning a panic in its code into a
// failed attempt: a provider's bug ends its run (class internal, the stack
// in the log), not the daemon and every run in it. A panic in belay's own
// code under emit is not recovered: it may have left a lock held or state
// half-changed, so it stops the process as it would anywhere else.
func (rn *runner) callProvider(ctx context.Context, req provider.Request, emit func(provider.Event) error) (err error) {
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		if ep, ok := v.(emitPanic); ok {
			panic(ep.v)
		}
		rn.r.log.Error("provider panicked; the attempt fails", "run", rn.id, "provider", rn.run.Provider, "panic", v, "stack", string(debug.Stack()))
		err = provider.Errorf(belay.ClassInternal, "the %s provider panicked: %v", rn.run.Provider, v)
	}()
	return rn.prov.Run(ctx, req, func(ev provider.Event) error {
		defer func() {
			if v := recover(); v != nil {
				panic(emitPanic{v})
			}
		}()
		return emit(ev)
	})
}

// emitPanic carries a panic of belay's own code through the provider's
// frames, so that callProvider does not take it for the provider's.
type emitPanic struct{ v any }

// emit journals one provider event. Returning an error stops the attempt.
func (rn *runner) emit(ev provider.Event, wd *watchdog, cancel context.CancelCauseFunc) error {
	if ev.Kind.Progress() && !rn.started && ev.Kind != provider.TurnEnd {
		rn.started = true
		// The in-memory activity first, then the store: whoever sees the
		// stored phase sees the activity that goes with it.
		if ev.Kind == provider.TextDelta || ev.Kind == provider.ThinkingDelta {
			wd.progress(belay.TierStreaming)
		}
		// Buffered: a crash that takes it back leaves the attempt's
		// start, which is synced (docs/journal-format.md).
		if err := rn.update(belay.RunUpdate{Phase: belay.PhaseStreaming, Buffered: true}); err != nil {
			return err
		}
	}
	switch ev.Kind {
	case provider.TextDelta:
		wd.progress(belay.TierStreaming)
		return rn.appendStream(&rn.text, belay.EventRunText, ev.Text)
	case provider.ThinkingDelta:
		wd.progress(belay.TierStreaming)
		return rn.appendStream(&rn.thinking, belay.EventRunThinking, ev.Text)
	case provider.ToolCall:
		if ev.Call == nil {
			return provider.Errorf(belay.ClassInternal, "tool call event without a call")
		}
		wd.progress(belay.TierToolRunning)
		if rn.effects.calls[ev.Call.ID] {
			// A resumed stream replays a call the journal already holds.
			if ev.Call.SideEffect && rn.effects.mayHaveRun(ev.Call.ID) {
				// Refusing it stops the provider before it runs it again.
				return &replayError{call: ev.Call.ID, tool: ev.Call.Name}
			}
			return nil
		}
		// The intent is durable before the tool can run (G9).
		if err := rn.append(belay.Sync, belay.EventRunToolCall, ev.Call); err != nil {
			return err
		}
		rn.effects.intent(ev.Call.ID, ev.Call.Name, ev.Call.SideEffect)
		// The phase may ride on the next sync: the intent is durable.
		return rn.update(belay.RunUpdate{Phase: belay.PhaseToolRunning, Buffered: true})
	case provider.ToolResult:
		if ev.Result == nil {
			return provider.Errorf(belay.ClassInternal, "tool result event without a result")
		}
		wd.progress(belay.TierStreaming)
		if rn.effects.results[ev.Result.CallID] {
			return nil // replayed by a resumed stream: already journaled
		}
		if err := rn.append(belay.Sync, belay.EventRunToolResult, ev.Result); err != nil {
			return err
		}
		rn.effects.settle(ev.Result.CallID, ev.Result.NotExecuted())
		// The phase may ride on the next sync: the settlement is durable.
		if err := rn.update(belay.RunUpdate{Phase: belay.PhaseStreaming, Buffered: true}); err != nil {
			return err
		}
		if rn.window.record(ev.Result.IsError && recoverableToolFailure(ev.Result.Class)) {
			cancel(&windowError{p: rn.r.opts.Recovery.Window, detach: rn.willResume()})
		}
		return nil
	case provider.RefUpdate:
		if ev.Ref == nil {
			return nil
		}
		wd.progress(belay.TierStreaming)
		ref := mergeRef(rn.run.Ref, *ev.Ref)
		rn.run.Ref = ref
		if err := rn.update(belay.RunUpdate{Ref: &ref}); err != nil {
			return err
		}
		// The provider is as far as the journal, less what it has yet to
		// replay.
		rn.text.atRefNow()
		rn.thinking.atRefNow()
		rn.mu.Lock()
		rn.resumable = rn.canResume()
		rn.mu.Unlock()
		return nil
	case provider.Usage:
		if ev.Tokens != nil {
			return rn.append(belay.Buffered, belay.EventRunUsage, ev.Tokens)
		}
	case provider.FinalAnswer:
		wd.progress(belay.TierStreaming)
		return rn.appendAnswer(ev)
	case provider.TurnEnd:
		wd.progress(belay.TierAfterTurnEnd)
		// Buffered: recovery does not read it (the answer's text and the
		// terminal state decide), so a crash may take it back.
		return rn.update(belay.RunUpdate{Phase: belay.PhaseFinishing, Buffered: true, Data: jsonx.Must(belay.TurnEndData{StopReason: ev.StopReason})})
	}
	return nil
}

func mergeRef(old, upd belay.ConversationRef) belay.ConversationRef {
	if upd.Kind != "" {
		old.Kind = upd.Kind
	}
	if upd.ID != "" {
		old.ID = upd.ID
	}
	if upd.URL != "" {
		old.URL = upd.URL
	}
	if upd.Target != "" {
		old.Target = upd.Target
	}
	if upd.Cursor != "" {
		old.Cursor = upd.Cursor
	}
	return old
}

// outcome decides what follows an attempt: it returns whether the next
// attempt resumes, and whether there is one.
func (rn *runner) outcome(err error) (resume, cont bool) {
	if runCause := rn.stopCause(); runCause != nil {
		err = runCause
	}
	var (
		wdErr  *watchdogError
		winErr *windowError
		cErr   *cancelError
		iErr   *interruptError
		dlErr  *deadlineError
		stErr  *storeError
		rpErr  *replayError
	)
	switch {
	case err == nil:
		rn.end(belay.PhaseComplete, nil, "")
		return false, false
	case errors.As(err, &rpErr):
		reason := rpErr.Error() + "; running it again would repeat its side effects"
		if !rn.record(belay.EventRunRecovery, belay.RecoveryData{Decision: belay.DecisionStrand, Reason: reason, Attempt: rn.attempt}) {
			return false, false
		}
		rn.end(belay.PhaseStranded, &belay.RunError{Class: belay.ClassInternal, Message: "resuming would repeat side effects"}, reason)
		return false, false
	case errors.As(err, &stErr):
		// The journal refused a write: nothing more can be recorded now.
		// The run stays leased to this incarnation and is retried when the
		// store may accept writes again (stall.go), or reclaimed by the
		// next start.
		rn.log().warn("journal write failed; the run waits for the store", err)
		rn.stallOn(stErr.err)
		return false, false
	case errors.Is(err, errShutdown):
		// A note for people: the run stays leased to this incarnation
		// whether or not it is written, and the next start reclaims it, so
		// a failed write here loses nothing.
		_ = rn.append(belay.Sync, belay.EventRunSuspended, belay.SuspendedData{Reason: err.Error()})
		return false, false
	case errors.Is(err, errLeaseLost):
		return false, false // another worker owns it now: write nothing
	case errors.Is(err, errLeaseUnproven):
		// The store could not be reached to renew: the attempt was
		// cancelled, not detached, so its side effects stopped before the
		// lease could expire. Wait for the store like for any refused write
		// (stall.go); the retry takes the lease back unless another owner
		// rescued the run meanwhile, and recovers the run (G9).
		rn.stallOn(err)
		return false, false
	case errors.As(err, &cErr):
		rn.end(belay.PhaseCancelled, &belay.RunError{Class: belay.ClassCancelled, Message: cErr.reason}, cErr.reason)
		return false, false
	case errors.As(err, &iErr):
		rn.end(belay.PhaseCancelled, &belay.RunError{Class: belay.ClassCancelled, Message: iErr.Error()}, iErr.Error())
		return false, false
	case errors.As(err, &dlErr):
		rn.end(belay.PhaseFailed, &belay.RunError{Class: belay.ClassTimeout, Message: dlErr.Error()}, dlErr.Error())
		return false, false
	case errors.As(err, &wdErr):
		if h := rn.r.opts.OnWatchdog; h != nil {
			h(wdErr.e.Tier)
		}
		if !rn.record(belay.EventRunWatchdog, belay.WatchdogData{Tier: wdErr.e.Tier, IdleSeconds: wdErr.e.Idle.Seconds()}) {
			return false, false
		}
		if wdErr.e.Tier == belay.TierAfterTurnEnd {
			// The model ended its turn and the answer is in the journal; the
			// provider just never said it was done.
			if !rn.record(belay.EventRunRecovery, belay.RecoveryData{Decision: belay.DecisionFinish, Reason: wdErr.Error(), Attempt: rn.attempt}) {
				return false, false
			}
			rn.end(belay.PhaseComplete, nil, "finished after the turn ended: "+wdErr.Error())
			return false, false
		}
		return rn.recoverFrom(belay.ClassTimeout, wdErr.Error())
	case errors.As(err, &winErr):
		rn.window.reset()
		return rn.recoverFrom(belay.ClassPermissionDenied, winErr.Error())
	}
	class := provider.ClassOf(err)
	if !rn.record(belay.EventRunError, belay.ErrorData{Class: class, Message: err.Error(), RetryAfterSeconds: provider.RetryAfterOf(err).Seconds()}) {
		return false, false
	}
	if !class.Retryable() {
		rn.end(belay.PhaseFailed, runError(class, err), "not retryable")
		return false, false
	}
	if rn.retries >= rn.r.opts.Retry.MaxRetries {
		rn.end(belay.PhaseFailed, runError(class, err),
			fmt.Sprintf("%d retries exhausted", rn.r.opts.Retry.MaxRetries))
		return false, false
	}
	rn.retries++
	wait := rn.r.opts.Retry.backoff(rn.retries, provider.RetryAfterOf(err))
	resume, ok := rn.decide(fmt.Sprintf("%s; retry %d of %d after %s", err, rn.retries, rn.r.opts.Retry.MaxRetries, wait.Round(time.Millisecond)))
	if !ok {
		return false, false
	}
	if err := rn.update(belay.RunUpdate{Phase: belay.PhaseRetryWait}); err != nil {
		rn.stallIfStore(err)
		return false, false
	}
	if err := rn.sleep(wait); err != nil {
		return rn.outcome(err)
	}
	return resume, true
}

// runError is the RunError of a failed attempt: for a provider's error,
// its (scrubbed) message, HTTP status and Retry-After.
func runError(class belay.ErrorClass, err error) *belay.RunError {
	re := &belay.RunError{Class: class, Message: err.Error()}
	var pe *provider.Error
	if errors.As(err, &pe) {
		re.Message, re.Status = pe.Message, pe.Status
		re.RetryAfterSeconds = pe.RetryAfter.Seconds()
	}
	return re
}

// recoverFrom handles a stall or a tripped detector within the recovery
// budget.
func (rn *runner) recoverFrom(class belay.ErrorClass, why string) (resume, cont bool) {
	if rn.recovers >= rn.r.opts.Recovery.MaxAttempts {
		rn.end(belay.PhaseFailed, &belay.RunError{Class: class, Message: why},
			fmt.Sprintf("%s; %d recovery attempts exhausted", why, rn.r.opts.Recovery.MaxAttempts))
		return false, false
	}
	rn.mu.Lock()
	rn.recovers++
	rn.mu.Unlock()
	if err := rn.update(belay.RunUpdate{Phase: belay.PhaseRecovering}); err != nil {
		rn.stallIfStore(err)
		return false, false
	}
	return rn.decide(why)
}

// willResume reports whether a recovery now would resume the run through
// the provider (so the provider's work should be left running).
func (rn *runner) willResume() bool {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	return rn.recovers < rn.r.opts.Recovery.MaxAttempts && rn.resumable && !rn.barrenResume
}

// decide chooses how to go on after an interruption: resume through the
// provider if it can, else resend if no side effect could repeat, else
// strand. It journals the decision; it reports whether to resume and
// whether to go on at all.
func (rn *runner) decide(why string) (resume, cont bool) {
	rn.mu.Lock()
	barren := rn.barrenResume
	rn.mu.Unlock()
	canResume := rn.canResume() && !barren
	if barren {
		why += "; resuming brought nothing new"
	}
	switch {
	case canResume:
		if !rn.record(belay.EventRunRecovery, belay.RecoveryData{Decision: belay.DecisionResume, Reason: why, Attempt: rn.attempt + 1}) {
			return false, false
		}
		return true, true
	case rn.effects.unsafe() != "":
		reason := why + "; not resending: " + rn.effects.unsafe()
		if !rn.record(belay.EventRunRecovery, belay.RecoveryData{Decision: belay.DecisionStrand, Reason: reason, Attempt: rn.attempt}) {
			return false, false
		}
		rn.end(belay.PhaseStranded, &belay.RunError{Class: belay.ClassInternal, Message: "resending would repeat side effects"}, reason)
		return false, false
	}
	if !rn.record(belay.EventRunRecovery, belay.RecoveryData{Decision: belay.DecisionResend, Reason: why, Attempt: rn.attempt + 1}) {
		return false, false
	}
	return false, true
}

// sleep waits for d on the runtime's clock, unless the run is stopped.
func (rn *runner) sleep(d time.Duration) error {
	ctx, cancel := context.WithCancelCause(bgCtx)
	defer cancel(nil)
	rn.mu.Lock()
	if rn.cause != nil {
		rn.mu.Unlock()
		return rn.cause
	}
	rn.cancelAttempt = cancel
	rn.mu.Unlock()
	t := rn.r.clk.AfterFunc(d, func() { cancel(nil) })
	defer t.Stop()
	if h := rn.r.sleepHook; h != nil {
		h(rn.id, d)
	}
	<-ctx.Done()
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return nil
}

// end writes the run's terminal state and posts its delivery. Every exit
// path that finishes a run goes through here, so a run never stays
// "running" without a reason.
func (rn *runner) end(phase belay.RunPhase, runErr *belay.RunError, reason string) {
	u := belay.RunUpdate{Phase: phase, Error: runErr, Reason: reason}
	// The delivery is posted in the same durable write as the end.
	u.Deliver = outcomeDelivery(rn.run, phase, runErr, reason, rn.r.clk.Now())
	rn.setPhase(phase)
	run, err := rn.r.store.UpdateRun(bgCtx, rn.id, rn.epoch, u)
	if err != nil {
		// Not finished: a lost lease means another worker owns the run;
		// any other failure leaves it to be retried (stall.go), never
		// "running" with nobody on it.
		rn.log().warn("finish run", err)
		rn.stallOn(err)
		return
	}
	rn.setPhase(phase)
	// The outcome item, and items waiting for this run's end, are ready.
	rn.r.inbox.notify()
	if h := rn.r.opts.OnRunEnd; h != nil {
		h(run)
	}
}

// replayError is returned to a provider that replays a side-effecting
// tool call the journal already holds.
type replayError struct{ call, tool string }

func (e *replayError) Error() string {
	return fmt.Sprintf("the provider replayed tool %q (call %s) after a resume", e.tool, e.call)
}

// storeError marks a failed journal write from inside an attempt. When
// the run will resume through its provider once the store accepts writes
// again (stall.go), it asks the provider to detach (provider.ErrDetach):
// its work goes on and the retry reattaches; otherwise the work stops, so
// that a resend never runs beside it.
type storeError struct {
	err    error
	detach bool
}

func (e *storeError) Error() string { return "journal: " + e.err.Error() }
func (e *storeError) Unwrap() error { return e.err }

// Is makes errors.Is(err, provider.ErrDetach) hold when the provider
// should leave its work running.
func (e *storeError) Is(target error) bool { return e.detach && target == provider.ErrDetach }

func (rn *runner) storeErr(err error) *storeError {
	return &storeError{err: err, detach: rn.willResume()}
}

func (rn *runner) update(u belay.RunUpdate) error {
	if u.Phase != "" {
		// In memory before the store (see emit): Activity never reports
		// a phase older than the stored one.
		rn.setPhase(u.Phase)
	}
	if wb, ok := rn.r.store.(store.WriteBehind); ok && u.Buffered {
		// Queued with the session's next write (store.WriteBehind): the
		// run as the store has it is not needed, only its phase changes.
		return rn.writeErr(wb.UpdateRunBehind(rn.run.Session, rn.id, rn.epoch, u))
	}
	run, err := rn.r.store.UpdateRun(bgCtx, rn.id, rn.epoch, u)
	if err != nil {
		return rn.writeErr(err)
	}
	rn.run = run
	return nil
}

// writeErr is what the attempt makes of a failed journal write: a lost
// lease, or a store error that stalls the run.
func (rn *runner) writeErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, belay.ErrStaleEpoch) || errors.Is(err, belay.ErrNotLeased):
		return errLeaseLost
	}
	return rn.storeErr(err)
}

// record journals a decision (Sync) before acting on it. When the write
// fails the runner must not act: a lost lease means another worker owns
// the run; any other failure stalls it, to be retried (stall.go). It
// reports whether the runner may go on.
func (rn *runner) record(typ string, v any) bool {
	err := rn.append(belay.Sync, typ, v)
	if err == nil {
		return true
	}
	rn.stallIfStore(err)
	return false
}

// stallIfStore stalls the runner if err is a write the store refused (a
// lost lease is not: another worker owns the run).
func (rn *runner) stallIfStore(err error) {
	var se *storeError
	if errors.As(err, &se) {
		rn.log().warn("journal write failed; the run waits for the store", se.err)
		rn.stallOn(se.err)
	}
}

func (rn *runner) append(d belay.Durability, typ string, v any) error {
	e := belay.Event{Type: typ, Run: rn.id, Epoch: rn.epoch, Data: jsonx.Must(v)}
	if wb, ok := rn.r.store.(store.WriteBehind); ok && d == belay.Buffered {
		return rn.writeErr(wb.AppendBehind(rn.run.Session, e))
	}
	_, err := rn.r.store.Append(bgCtx, rn.run.Session, d, e)
	return rn.writeErr(err)
}

// appendAnswer journals a final answer as run.answer events (Sync), in
// parts of at most belay.AnswerPart bytes cut between characters. Each
// part has an idempotency id made of the run, the attempt that last
// started from scratch, the answer's hash and the part's offset, so a
// resumed attempt that reports the same answer again journals nothing
// new, and one cut short by a crash adds only the parts that are missing.
func (rn *runner) appendAnswer(ev provider.Event) error {
	// JSON carries only valid UTF-8: the journaled bytes must be the
	// hashed ones.
	text := strings.ToValidUTF8(ev.Text, "\uFFFD")
	sum := sha256.Sum256([]byte(text))
	d := belay.AnswerData{Size: int64(len(text)), SHA256: hex.EncodeToString(sum[:]), Source: ev.Source, Note: ev.Note}
	for off := 0; off < len(text) || off == 0; {
		end := min(off+belay.AnswerPart, len(text))
		for end < len(text) && end > off+belay.AnswerPart-utf8.UTFMax && !utf8.RuneStart(text[end]) {
			end--
		}
		d.Offset, d.Text = int64(off), text[off:end]
		id := fmt.Sprintf("answer/%s/%d/%s/%d", rn.id, max(rn.fresh, 1), d.SHA256[:16], off)
		_, err := rn.r.store.Append(bgCtx, rn.run.Session, belay.Sync, belay.Event{Type: belay.EventRunAnswer, ID: id, Run: rn.id, Epoch: rn.epoch, Data: jsonx.Must(d)})
		if err := rn.writeErr(err); err != nil {
			return err
		}
		if end == len(text) {
			return nil
		}
		off = end
	}
	return nil
}

func (rn *runner) setPhase(p belay.RunPhase) {
	rn.mu.Lock()
	rn.phase = p
	rn.mu.Unlock()
}

// scanEffects rebuilds the side-effect record of a reclaimed run from its
// journal.
func (rn *runner) scanEffects() error {
	effects, err := scanRunEffects(bgCtx, rn.r.store, rn.run)
	rn.effects = effects
	return err
}

// streamPos is where a run's streamed text (answer or thinking) stands in
// the journal, so that a resumed provider's replay is journaled once.
type streamPos struct {
	n      int // bytes journaled since the last fresh attempt
	atRef  int // n when the run's ref was last journaled
	replay int // bytes a resumed attempt will send again that the journal holds: dropped
}

// resume readies p for an attempt that resumes from the last ref: the
// provider sends again what followed it, of which the journal holds n-atRef.
func (p *streamPos) resume() { p.replay = p.n - p.atRef }

// atRefNow records that the ref was journaled now: the provider is as far
// as the journal, less what it has yet to replay.
func (p *streamPos) atRefNow() { p.atRef = p.n - p.replay }

// appendStream journals a streamed delta of p's kind, less the bytes a
// resumed provider replays that the journal already holds.
func (rn *runner) appendStream(p *streamPos, typ string, text string) error {
	if p.replay > 0 {
		drop := min(p.replay, len(text))
		p.replay -= drop
		if text = text[drop:]; text == "" {
			return nil
		}
	}
	if err := rn.append(belay.Buffered, typ, belay.TextData{Text: text}); err != nil {
		return err
	}
	p.n += len(text)
	return nil
}
