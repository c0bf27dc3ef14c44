package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/clock"
	"github.com/belayhq/belay/internal/ids"
	"github.com/belayhq/belay/provider"
	"github.com/belayhq/belay/store"
)

// Options configure a Runtime.
type Options struct {
	Store     store.Store
	Providers provider.Registry
	// Clock drives every timer: watchdog, deadlines, backoff, leases.
	Clock clock.Clock
	// Incarnation names this runtime in run leases and its owner record;
	// runs of an owner that is gone are rescued by the next claim of any
	// runtime over the store. Default: a new id.
	Incarnation string
	// Limits are the admission caps; the store enforces them over every
	// runtime's runs, so runtimes sharing a store should agree on them.
	Limits   Limits
	Tiers    Tiers
	Retry    RetryPolicy
	Recovery RecoveryPolicy
	// LeaseTTL is the run lease's TTL; leases are renewed at half of it.
	LeaseTTL time.Duration
	// DefaultDeadline bounds a run without its own deadline. Deadlines
	// holds defaults per "provider" or "provider/model" (the more specific
	// wins).
	DefaultDeadline time.Duration
	Deadlines       map[string]time.Duration
	// Retention is the prune policy; PruneEvery how often it runs (0: one
	// hour; negative: never).
	Retention  store.PrunePolicy
	PruneEvery time.Duration
	Logger     *slog.Logger
	// OnRunEnd, if set, is called after a run's terminal state is durable.
	// It must not block.
	OnRunEnd func(belay.Run)
	// OnWatchdog, if set, is called when an inactivity tier expires.
	OnWatchdog func(belay.Tier)
	// OnStall, if set, is told when a runner stopped because the store
	// refused a write, before the run is retried (for metrics).
	OnStall func(run string, err error)
	// Notify are the targets (webhooks, exec hooks) every inbox item they
	// want is sent to, once each, claimed in the store (notify.go).
	Notify []NotifyTarget
	// NotifyAttempts bounds the attempts of one notification
	// (DefaultNotifyAttempts if 0); NotifySweep is how often the store is
	// read for notifications another instance posted or left unsent
	// (DefaultNotifySweep if 0).
	NotifyAttempts int
	NotifySweep    time.Duration
}

// Defaults.
const (
	DefaultLeaseTTL   = 60 * time.Second
	DefaultDeadline   = 2 * time.Hour
	DefaultPruneEvery = time.Hour
)

// Runtime executes runs. Create it with New, then Start it.
type Runtime struct {
	opts  Options
	store store.Store
	clk   clock.Clock
	log   *slog.Logger

	mu       sync.Mutex
	runners  map[string]*runner // active runs by id
	stalls   map[string]int     // stalled retries by run id (stall.go)
	stallErr map[string]error   // why a run waits to be retried (stall.go)
	// cancelSeen holds runs whose cancel request came with no runner here
	// (claim.go: cancelLocal), until the run ends or a runner starts.
	cancelSeen map[string]struct{}
	// claiming counts claims between their store call and the start of
	// their runners; orphans are the runs adoptOrphans saw with no runner
	// while one was, by epoch (claim.go).
	claiming int
	orphans  map[string]uint64
	started  bool
	joined   bool // the owner record is written and the claim loop runs
	stopping bool
	wg       sync.WaitGroup // runners and background work
	workers  workers        // the goroutines runners run on
	stopBg   context.CancelFunc

	// known holds what a submit reads of a session and never changes
	// once it is created (id, provider, model, options), so that a
	// submit to a known session does not read it again (session).
	knownMu sync.Mutex
	known   map[string]belay.Session

	inbox  inbox
	notify notifier
	// wake asks the claim loop to claim runs now (claim.go).
	wake chan struct{}

	// sleepHook, if set (by tests), is called when a runner starts a backoff
	// wait, after its timer is armed.
	sleepHook func(run string, d time.Duration)
}

// New returns a stopped Runtime.
func New(opts Options) (*Runtime, error) {
	if opts.Store == nil {
		return nil, fmt.Errorf("%w: runtime needs a store", belay.ErrInvalid)
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real
	}
	if opts.Incarnation == "" {
		opts.Incarnation = ids.New("inc_")
	}
	if opts.LeaseTTL <= 0 {
		opts.LeaseTTL = DefaultLeaseTTL
	}
	if opts.DefaultDeadline <= 0 {
		opts.DefaultDeadline = DefaultDeadline
	}
	if opts.PruneEvery == 0 {
		opts.PruneEvery = DefaultPruneEvery
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.NotifyAttempts <= 0 {
		opts.NotifyAttempts = DefaultNotifyAttempts
	}
	if opts.NotifySweep <= 0 {
		opts.NotifySweep = DefaultNotifySweep
	}
	opts.Tiers = opts.Tiers.withDefaults()
	opts.Retry = opts.Retry.withDefaults()
	opts.Recovery = opts.Recovery.withDefaults()
	r := &Runtime{
		opts:     opts,
		store:    opts.Store,
		clk:      opts.Clock,
		log:      opts.Logger,
		runners:  map[string]*runner{},
		wake:     make(chan struct{}, 1),
		stalls:   map[string]int{},
		stallErr: map[string]error{},

		cancelSeen: map[string]struct{}{},
		known:      map[string]belay.Session{},
	}
	r.inbox.init(r)
	if err := r.notify.init(r); err != nil {
		return nil, err
	}
	return r, nil
}

// maxKnownSessions bounds Runtime.known; a full one starts over. A
// session whose options are larger than maxKnownOptions is read each time.
const (
	maxKnownSessions = 1 << 16
	maxKnownOptions  = 4 << 10
)

// session returns what a submit needs of a session: its id, provider,
// model and options, none of which changes after the session is created
// (a session deleted since is refused by the store's submit, which locks
// it; one deleted through this runtime is forgotten, so that an id the
// store lets a caller choose again is read again). Only those fields are
// set.
func (r *Runtime) session(ctx context.Context, id string) (belay.Session, error) {
	r.knownMu.Lock()
	sess, ok := r.known[id]
	r.knownMu.Unlock()
	if ok {
		return sess, nil
	}
	full, err := r.store.Session(ctx, id)
	if err != nil {
		return belay.Session{}, err
	}
	sess = belay.Session{ID: full.ID, Provider: full.Provider, Model: full.Model, Options: full.Options}
	if len(sess.Options) > maxKnownOptions {
		return sess, nil
	}
	r.knownMu.Lock()
	if len(r.known) >= maxKnownSessions {
		clear(r.known)
	}
	r.known[id] = sess
	r.knownMu.Unlock()
	return sess, nil
}

// forgetSession drops what session knows of a deleted session.
func (r *Runtime) forgetSession(id string) {
	r.knownMu.Lock()
	delete(r.known, id)
	r.knownMu.Unlock()
}

// Incarnation returns the id this runtime leases runs under.
func (r *Runtime) Incarnation() string { return r.opts.Incarnation }

// Store returns the runtime's store.
func (r *Runtime) Store() store.Store { return r.store }

// Start reconciles the previous incarnation's work and starts admitting.
// It does not block.
func (r *Runtime) Start(ctx context.Context) error {
	r.mu.Lock()
	if r.started {
		r.mu.Unlock()
		return errors.New("runtime: already started")
	}
	r.started = true
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r.stopBg = cancel
	r.mu.Unlock()
	if err := r.join(ctx, bg); err != nil {
		cancel()
		return err
	}
	r.startRetention(bg)
	r.notify.start(bg)
	return nil
}

// Stop stops admitting, suspends the active runs (their leases stay with
// this incarnation, so the next one reclaims and resumes them at once) and
// waits for the runners until ctx is done. It is idempotent and safe
// before Start.
func (r *Runtime) Stop(ctx context.Context) error {
	r.mu.Lock()
	if r.stopping {
		r.mu.Unlock()
	} else {
		r.stopping = true
		// No runner starts from here on: a worker whose runner ends
		// now ends with it, even if ctx runs out before the others do.
		r.workers.close()
		for _, rn := range r.runners {
			rn.cancel(errShutdown)
		}
		if r.stopBg != nil {
			r.stopBg()
		}
		r.mu.Unlock()
		r.inbox.stop()
		r.notify.stop()
	}
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		r.notify.cancelSends()
		return fmt.Errorf("runtime: stop: %w", context.Cause(ctx))
	}
	r.workers.stop() // every runner has returned: wait for their workers
	return r.leave(ctx)
}

// Limits are the admission caps (G5), enforced by the store's claims
// across every runtime over it. Zero means unlimited.
type Limits = store.Limits

// ErrConversationBusy is returned for a run submitted with PolicyReject to
// a session that has a run queued or running.
var ErrConversationBusy = store.ErrConversationBusy

// SubmitRequest asks for a run.
type SubmitRequest struct {
	// Session is the session to run in; empty creates one with Provider
	// and Model.
	Session  string
	Provider string
	Model    string
	Prompt   string
	// Script drives the fake provider.
	Script json.RawMessage
	// Options are per-run provider options.
	Options  json.RawMessage
	Policy   belay.Policy
	Priority int
	// Deadline bounds the run (0: the default for its provider/model).
	Deadline time.Duration
	// IdempotencyKey makes the submit idempotent: the same key returns the
	// same run (and session).
	IdempotencyKey string
	Labels         map[string]string
	// Tags and Meta are kept with the run (belay.Run).
	Tags []string
	Meta map[string]string
}

// MaxInput is the largest run input (prompt, script and options, as JSON)
// a run can have: its run.created event, with the run's other fields
// (bounded by maxRunFields), fits one journal record.
const MaxInput = belay.MaxRecordSize - maxRunFields

// maxRunFields bounds what a run.created event holds besides the input:
// the line's envelope, ids, the idempotency key (twice), provider, model
// and deadline.
const maxRunFields = 4 << 10

// CheckInput returns the JSON of a run's input, or a *belay.TooLargeError
// when it is larger than MaxInput.
func CheckInput(in belay.InputData) ([]byte, error) {
	b, err := json.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", belay.ErrInvalid, err)
	}
	if len(b) > MaxInput {
		return nil, &belay.TooLargeError{What: "the run's input (prompt, script and options, as JSON)", Size: len(b), Limit: MaxInput}
	}
	return b, nil
}

// maxNameLen caps provider and model names and labels, which the run's
// event carries too.
const maxNameLen = 256

// Submit creates a run and queues it under its policy (G3, G4). An input
// larger than MaxInput is refused before anything is created.
func (r *Runtime) Submit(ctx context.Context, req SubmitRequest) (belay.Run, error) {
	input, err := r.checkSubmit(req)
	if err != nil {
		return belay.Run{}, err
	}
	sessionID := req.Session
	var first *belay.Run // a new session's run, created with it
	if sessionID == "" {
		// A request refused at the door leaves no session behind.
		if err := r.validate(req.Provider, provider.Request{Model: req.Model, Prompt: req.Prompt, Input: input}); err != nil {
			return belay.Run{}, err
		}
		in := belay.SessionInput{Provider: req.Provider, Model: req.Model, Labels: req.Labels}
		if req.IdempotencyKey != "" {
			in.IdempotencyKey = "submit/" + req.IdempotencyKey
		}
		// The session and its run are one durable write: a send that
		// fails creates neither, never a session left empty.
		in.FirstRun = &belay.RunInput{
			IdempotencyKey: req.IdempotencyKey, Priority: req.Priority, Provider: req.Provider, Model: req.Model,
			Deadline: r.clk.Now().Add(r.deadlineOf(req.Deadline, req.Provider, req.Model)), Input: input,
			Tags: req.Tags, Meta: req.Meta,
		}
		sess, err := r.store.CreateSession(ctx, in)
		if err != nil {
			return belay.Run{}, err
		}
		sessionID = sess.ID
		if req.IdempotencyKey == "" {
			// No key: this call made the session, so its one run is ours.
			runs, err := r.store.Runs(ctx, belay.RunFilter{Session: sessionID})
			if err != nil {
				return belay.Run{}, err
			}
			if len(runs) != 1 {
				return belay.Run{}, fmt.Errorf("runtime: new session %s has %d runs, want its first one", sessionID, len(runs))
			}
			first = &runs[0]
		}
	}
	sess, err := r.session(ctx, sessionID)
	if err != nil {
		return belay.Run{}, err
	}
	prov, model := req.Provider, req.Model
	if prov == "" {
		prov = sess.Provider
	}
	if model == "" && prov == sess.Provider {
		model = sess.Model
	}
	if err := r.validate(prov, provider.Request{Session: sessionID, Model: model, Prompt: req.Prompt, Input: input, Options: sess.Options}); err != nil {
		return belay.Run{}, err
	}
	var run belay.Run
	if first != nil {
		run = *first
	} else {
		in := store.SubmitInput{Policy: req.Policy, RunInput: belay.RunInput{
			Session: sessionID, IdempotencyKey: req.IdempotencyKey, Priority: req.Priority,
			Provider: prov, Model: model, Deadline: r.clk.Now().Add(r.deadlineOf(req.Deadline, prov, model)), Input: input,
			Tags: req.Tags, Meta: req.Meta,
		}}
		res, err := r.submitClaiming(ctx, in)
		if err != nil {
			return belay.Run{}, err
		}
		run = res.Run
		if !res.Created {
			if err := r.sameSubmit(ctx, run, req.IdempotencyKey, prov, model, input); err != nil {
				return belay.Run{}, err
			}
			return run, nil // an idempotent repeat: the first submit queued it
		}
		if res.Interrupted != "" {
			r.cancelLocal(res.Interrupted) // the change feed tells its owner too
		}
		if res.Claimed != nil {
			return run, nil // leased to this runtime and started
		}
	}
	r.claimSoon()
	// The run as the write returned it (queued): a claim may start it
	// any moment, so a reread would be no truer, only a round trip more.
	return run, nil
}

// submitClaiming submits a run asking the store to lease it to this
// runtime in the same write when a claim would take it first anyway
// (store.SubmitInput.Claim), and starts its runner if it did: a run
// submitted while nothing waits is one durable write from queued to
// leased instead of two (a submit, then a claim). Like a claim, it counts
// in claiming until the runner is started (adoptOrphans).
func (r *Runtime) submitClaiming(ctx context.Context, in store.SubmitInput) (store.SubmitResult, error) {
	r.mu.Lock()
	claim := r.joined && !r.stopping
	if claim {
		r.claiming++
		in.Claim = &store.Claim{Owner: r.opts.Incarnation, TTL: r.opts.LeaseTTL, Limits: r.opts.Limits}
	}
	r.mu.Unlock()
	res, err := r.store.Submit(ctx, in)
	if !claim {
		return res, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.claiming--
	if err != nil {
		// A lease the store set aside for the run was given back (fsstore
		// unadmit): a run parked behind it may start now.
		r.claimSoon()
	}
	if c := res.Claimed; err == nil && c != nil && !r.stopping {
		if _, ok := r.runners[c.Run.ID]; !ok {
			r.startLocked(c.Run.ID, startFresh, c)
		}
	}
	// Stopping meanwhile: the run is leased to this owner, and the next
	// start or a peer rescues it, as with a claim.
	return res, err
}

// checkSubmit refuses a request that cannot be submitted whatever the
// store holds, and returns its input's JSON.
func (r *Runtime) checkSubmit(req SubmitRequest) ([]byte, error) {
	if !req.Policy.Valid() {
		return nil, fmt.Errorf("%w: policy %q is not enqueue, reject, interrupt or replace", belay.ErrInvalid, req.Policy)
	}
	if err := belay.CheckTags(req.Tags, req.Meta); err != nil {
		return nil, err
	}
	if err := belay.CheckPriority(req.Priority); err != nil {
		return nil, err
	}
	if len(req.Provider) > maxNameLen || len(req.Model) > maxNameLen {
		return nil, fmt.Errorf("%w: provider and model names are at most %d bytes", belay.ErrInvalid, maxNameLen)
	}
	input, err := CheckInput(belay.InputData{Prompt: req.Prompt, Script: req.Script, Options: req.Options})
	if err != nil {
		return nil, err
	}
	return input, r.admitting()
}

// batchWorkers bounds the session reads and new-session submissions of a
// SubmitBatch in flight at once.
const batchWorkers = 16

// SubmitBatch submits many runs at once (POST /v1/runs:batch): each
// request is what Submit would do, with its own outcome (runs[i] or
// errs[i]). Requests to existing sessions are written with one
// store.SubmitBatch (on PostgreSQL a few transactions for the whole
// batch), in the order given within a session; a request without a
// session creates its session and run in one write, as Submit does.
func (r *Runtime) SubmitBatch(ctx context.Context, reqs []SubmitRequest) ([]belay.Run, []error) {
	runs, errs := make([]belay.Run, len(reqs)), make([]error, len(reqs))
	inputs := make([][]byte, len(reqs))
	var fresh []int // requests that create their session
	sessions := map[string]*belay.Session{}
	for i, req := range reqs {
		if inputs[i], errs[i] = r.checkSubmit(req); errs[i] != nil {
			continue
		}
		if req.Session == "" {
			fresh = append(fresh, i)
		} else {
			sessions[req.Session] = nil
		}
	}
	// The sessions (provider, model and options), and the requests that
	// create theirs, a few at a time.
	var mu sync.Mutex
	sessErr := map[string]error{}
	jobs := make(chan func())
	var wg sync.WaitGroup
	for range batchWorkers {
		wg.Go(func() {
			for job := range jobs {
				job()
			}
		})
	}
	ids := make([]string, 0, len(sessions))
	for id := range sessions {
		ids = append(ids, id)
	}
	for _, id := range ids {
		jobs <- func() {
			sess, err := r.session(ctx, id)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				sessErr[id] = err
				return
			}
			sessions[id] = &sess
		}
	}
	for _, i := range fresh {
		jobs <- func() { runs[i], errs[i] = r.Submit(ctx, reqs[i]) }
	}
	close(jobs)
	wg.Wait()

	var ins []store.SubmitInput
	var at []int // the request of each of ins
	models := make([]string, len(reqs))
	for i, req := range reqs {
		if errs[i] != nil || req.Session == "" {
			continue
		}
		if err := sessErr[req.Session]; err != nil {
			errs[i] = err
			continue
		}
		sess := sessions[req.Session]
		prov, model := req.Provider, req.Model
		if prov == "" {
			prov = sess.Provider
		}
		if model == "" && prov == sess.Provider {
			model = sess.Model
		}
		if err := r.validate(prov, provider.Request{Session: sess.ID, Model: model, Prompt: req.Prompt, Input: inputs[i], Options: sess.Options}); err != nil {
			errs[i] = err
			continue
		}
		models[i] = model
		ins = append(ins, store.SubmitInput{Policy: req.Policy, RunInput: belay.RunInput{
			Session: sess.ID, IdempotencyKey: req.IdempotencyKey, Priority: req.Priority,
			Provider: prov, Model: model, Deadline: r.clk.Now().Add(r.deadlineOf(req.Deadline, prov, model)), Input: inputs[i],
			Tags: req.Tags, Meta: req.Meta,
		}})
		at = append(at, i)
	}
	if len(ins) > 0 {
		res, serrs := r.store.SubmitBatch(ctx, ins)
		for k, i := range at {
			switch {
			case serrs[k] != nil:
				errs[i] = serrs[k]
			case !res[k].Created:
				// An idempotent repeat: the same request, or refused.
				if err := r.sameSubmit(ctx, res[k].Run, reqs[i].IdempotencyKey, ins[k].Provider, models[i], inputs[i]); err != nil {
					errs[i] = err
					continue
				}
				runs[i] = res[k].Run
			default:
				runs[i] = res[k].Run
				if res[k].Interrupted != "" {
					r.cancelLocal(res[k].Interrupted) // the change feed tells its owner too
				}
			}
		}
	}
	r.claimSoon()
	return runs, errs
}

// validate looks the provider up and lets it check the request, so that a
// model, script or option it would refuse is refused at the door rather
// than failing the run later.
func (r *Runtime) validate(prov string, req provider.Request) error {
	p, err := r.opts.Providers.Get(prov)
	if err != nil {
		return err
	}
	if v, ok := p.(provider.Validator); ok {
		if err := v.Validate(req); err != nil {
			return fmt.Errorf("%w: %w", belay.ErrInvalid, err)
		}
	}
	// The run's own options only: a session's were checked when it was
	// created (CheckSession), and a session made for one provider may
	// take a run of another.
	return siteOptionsFor(prov, p, provider.RunOptions(req.Input), "option")
}

// siteOptionsFor refuses browser options (belay send --site, --site-url,
// --attach) for provider p (named prov) unless it reads them: any other
// would ignore them, and the prompt would go where the user did not mean.
func siteOptionsFor(prov string, p provider.Provider, options json.RawMessage, what string) error {
	if _, ok := p.(provider.SiteReader); ok {
		return nil
	}
	if key := provider.SiteOption(options); key != "" {
		return fmt.Errorf("%w: %w", belay.ErrInvalid, &provider.FieldError{Field: "options", Err: fmt.Errorf(
			"provider %s is not a browser provider and would ignore %s %s (belay send --site, --site-url, --attach): use --provider browser (or another provider of type browser), or leave it out", prov, what, key)})
	}
	return nil
}

// CheckSession checks a session to create (POST /v1/sessions) before it
// is: its provider is configured, and its options are ones that provider
// reads (an unknown provider is an *provider.UnknownError; options it
// would ignore are belay.ErrInvalid).
func (r *Runtime) CheckSession(prov string, options json.RawMessage) error {
	p, err := r.opts.Providers.Get(prov)
	if err != nil {
		return err
	}
	return siteOptionsFor(prov, p, options, "session option")
}

// Provider returns the named provider; an unknown name is an
// *provider.UnknownError that lists the configured ones.
func (r *Runtime) Provider(name string) (provider.Provider, error) {
	return r.opts.Providers.Get(name)
}

// IdempotencyConflictError is a submit that reuses an idempotency key
// with a different input: it is refused rather than answered with the
// run the key made (G3 returns the original result only for the same
// request). It is a belay.ErrExists.
type IdempotencyConflictError struct {
	Key, Run, What string
}

func (e *IdempotencyConflictError) Error() string {
	return fmt.Sprintf("idempotency key %q was used for run %s with a different %s; use a new key for a new request", e.Key, e.Run, e.What)
}

// Is makes errors.Is(err, belay.ErrExists) hold.
func (e *IdempotencyConflictError) Is(target error) bool { return target == belay.ErrExists }

// sameSubmit checks that the run an idempotency key already made was made
// by the same request.
func (r *Runtime) sameSubmit(ctx context.Context, run belay.Run, key, prov, model string, input json.RawMessage) error {
	what := ""
	switch {
	case run.Provider != prov:
		what = "provider"
	case run.Model != model:
		what = "model"
	default:
		old, err := r.store.RunInput(ctx, run.ID)
		if err != nil {
			return err
		}
		var a, b belay.InputData
		if json.Unmarshal(old, &a) != nil || json.Unmarshal(input, &b) != nil {
			return fmt.Errorf("%w: run %s has an unreadable input", belay.ErrInvalid, run.ID)
		}
		switch {
		case a.Prompt != b.Prompt:
			what = "prompt"
		case !sameJSON(a.Script, b.Script):
			what = "script"
		case !sameJSON(a.Options, b.Options):
			what = "options"
		}
	}
	if what == "" {
		return nil
	}
	return &IdempotencyConflictError{Key: key, Run: run.ID, What: what}
}

// sameJSON compares two JSON values by their compact form.
func sameJSON(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return bytes.Equal(a, b)
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}

func (r *Runtime) admitting() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case !r.started:
		return errors.New("runtime: not started")
	case r.stopping:
		return fmt.Errorf("%w: the runtime is stopping", belay.ErrStoreClosed)
	}
	return nil
}

// deadlineOf is a run's deadline: the one asked for, else the default for
// its provider and model.
func (r *Runtime) deadlineOf(asked time.Duration, prov, model string) time.Duration {
	if asked > 0 {
		return asked
	}
	return r.defaultDeadline(prov, model)
}

func (r *Runtime) defaultDeadline(prov, model string) time.Duration {
	if d, ok := r.opts.Deadlines[prov+"/"+model]; ok && d > 0 {
		return d
	}
	if d, ok := r.opts.Deadlines[prov]; ok && d > 0 {
		return d
	}
	return r.opts.DefaultDeadline
}

// Cancel cancels a run: a queued run ends cancelled at once; a running
// run gets a durable cancel request that the runtime holding its lease
// carries out, here or on another instance. It waits until the run has
// ended, or returns the run with belay.ErrStillRunning when ctx ends
// first (the request stands).
func (r *Runtime) Cancel(ctx context.Context, id, reason string) (belay.Run, error) {
	if reason == "" {
		reason = "cancelled by request"
	}
	run, err := r.store.RequestCancel(ctx, id, reason)
	switch {
	case errors.Is(err, belay.ErrTerminal) && run.Status == belay.RunCancelled:
		return run, nil
	case err != nil:
		return run, err
	case run.Status.Terminal():
		return run, nil
	}
	r.cancelLocal(id)
	return r.Wait(ctx, id)
}

// Wait blocks until the run ends and returns it. If ctx ends first it
// returns the run as it is with belay.ErrStillRunning: a local timeout is
// never terminal, and the run goes on (G8).
func (r *Runtime) Wait(ctx context.Context, id string) (belay.Run, error) {
	run, err := r.store.Run(ctx, id)
	if err != nil {
		return run, err
	}
	for {
		// The seq first, then the run: an end journaled in between is seen
		// by the read of the run, or wakes the wait after the seq.
		sess, err := r.store.Session(ctx, run.Session)
		if err != nil {
			return run, err
		}
		if run, err = r.store.Run(ctx, id); err != nil || run.Status.Terminal() {
			return run, err
		}
		if err := r.store.WaitEvents(ctx, run.Session, sess.LastSeq); err != nil {
			if ctx.Err() != nil {
				run, _ = r.store.Run(context.WithoutCancel(ctx), id)
				if run.Status.Terminal() {
					return run, nil
				}
				return run, fmt.Errorf("%w: run %s is %s after the local wait: %v", belay.ErrStillRunning, id, run.Phase, context.Cause(ctx))
			}
			return run, err
		}
	}
}

// Activity returns the liveness of a queued or running run (G8): from its
// runner when it runs here, else from the store, as its owner last
// persisted it (with lease renewals) or, before that, since the run was
// created or started.
func (r *Runtime) Activity(id string) (belay.Activity, bool) {
	if a, ok := r.localActivity(id); ok {
		return a, true
	}
	run, err := r.store.Run(context.Background(), id)
	if err != nil {
		return belay.Activity{}, false
	}
	return storedActivity(run)
}

// RunActivity is Activity for a run the caller already read: it reads
// nothing more from the store, so a page of runs costs no query per run.
func (r *Runtime) RunActivity(run belay.Run) (belay.Activity, bool) {
	if a, ok := r.localActivity(run.ID); ok {
		return a, true
	}
	return storedActivity(run)
}

func (r *Runtime) localActivity(id string) (belay.Activity, bool) {
	r.mu.Lock()
	rn := r.runners[id]
	r.mu.Unlock()
	if rn == nil {
		return belay.Activity{}, false
	}
	return rn.activity(), true
}

// storedActivity is a run's liveness as the store has it: as its owner
// last persisted it, else since the run was started or created.
func storedActivity(run belay.Run) (belay.Activity, bool) {
	if run.Status.Terminal() {
		return belay.Activity{}, false
	}
	a := belay.Activity{Run: run.ID, Phase: run.Phase, Attempt: run.Attempt, LastProgress: run.CreatedAt, Tier: belay.TierAwaitingFirst}
	switch {
	case run.Activity != nil:
		a.LastProgress, a.Tier = run.Activity.LastProgress, belay.Tier(run.Activity.Tier)
	case !run.StartedAt.IsZero():
		a.LastProgress = run.StartedAt
	}
	return a, true
}

// Stats counts what the runtime is doing.
type Stats struct {
	Active int `json:"active"`
	Queued int `json:"queued"`
}

// Stats returns the number of runs active in this runtime (running, or
// waiting to retry a write the store refused) and queued in the store for
// every runtime. Queued is -1 when the store cannot say.
func (r *Runtime) Stats() Stats {
	r.mu.Lock()
	st := Stats{Active: len(r.runners)}
	for id := range r.stallErr {
		if r.runners[id] == nil {
			st.Active++
		}
	}
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := r.store.Counts(ctx)
	if err != nil {
		st.Queued = -1
		return st
	}
	st.Queued = c.Queued
	return st
}

// finished is called by a runner when it exits.
func (r *Runtime) finished(id string) {
	r.mu.Lock()
	delete(r.runners, id)
	delete(r.stalls, id)
	delete(r.stallErr, id)
	r.mu.Unlock()
	r.claimSoon()
}

// Errors that cancel an attempt, told apart by context.Cause.
// The daemon stopping and a lost lease detach the provider: its work goes
// on, and the next incarnation (or the new lease holder) reattaches.
var (
	errShutdown  = fmt.Errorf("runtime: the daemon is stopping (%w)", provider.ErrDetach)
	errLeaseLost = fmt.Errorf("runtime: the run lease was taken over (%w)", provider.ErrDetach)
	// errLeaseUnproven: renewals failed for most of the lease's TTL (the
	// store unreachable, a partition); the runner fences itself before the
	// lease can expire and another owner, maybe on another machine, rescue
	// the run. It cancels the work, not detaches it: a provider's process
	// or browser left running here could act beside the rescuer's.
	errLeaseUnproven = errors.New("runtime: the run lease could not be renewed and is about to expire; the attempt was stopped")
)

type cancelError struct{ reason string }

func (e *cancelError) Error() string { return "cancelled: " + e.reason }

type interruptError struct{ by string }

func (e *interruptError) Error() string { return "interrupted by run " + e.by }

// watchdogError and windowError detach the provider when the recovery that
// follows will resume it (detach is decided when they are raised).
type watchdogError struct {
	e      expiry
	detach bool
}

func (e *watchdogError) Unwrap() error { return detachErr(e.detach) }

func detachErr(detach bool) error {
	if detach {
		return provider.ErrDetach
	}
	return nil
}

func (e *watchdogError) Error() string {
	return fmt.Sprintf("no progress for %s (%s tier)", e.e.Idle.Round(time.Second), e.e.Tier)
}

type deadlineError struct{ at time.Time }

func (e *deadlineError) Error() string {
	return "the run's deadline passed at " + e.at.UTC().Format(time.RFC3339)
}

// Unwrap tells the provider, through its context's cause, that the
// deadline (not a cancel) ended the run.
func (e *deadlineError) Unwrap() error { return provider.ErrDeadline }

type windowError struct {
	p      WindowPolicy
	detach bool
}

func (e *windowError) Unwrap() error { return detachErr(e.detach) }

func (e *windowError) Error() string {
	return fmt.Sprintf("%d of the last %d tool results failed", e.p.Threshold, e.p.Size)
}
