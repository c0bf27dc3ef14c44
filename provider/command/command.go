package command

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/provider"
)

// RefKind is the Kind of the conversation refs the provider reports.
const RefKind = "command"

// ErrDetach, as the cause of a Run's context cancellation, says "stop
// following the run but leave the agent running": the runtime passes it
// when the daemon stops or the run's lease moved to another worker, so a
// later Resume reattaches. Any other cancellation kills the agent. An emit
// error that wraps ErrDetach detaches the same way.
var ErrDetach = provider.ErrDetach

// Provider runs a local agent CLI detached and follows its output. It is
// safe for concurrent runs.
type Provider struct {
	name     string
	cfg      Config
	readOnly map[string]bool
}

var _ provider.Provider = (*Provider)(nil)

// New returns a command provider named name.
func New(name string, cfg Config) (*Provider, error) {
	if name == "" {
		return nil, fmt.Errorf("%w: provider name is empty", ErrConfig)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("provider %q: %w", name, err)
	}
	return &Provider{name: name, cfg: cfg, readOnly: readOnlySet(cfg.ReadOnlyTools)}, nil
}

// Name returns the provider's name.
func (p *Provider) Name() string { return p.name }

// Capabilities reports Resume, Cancel and Tools.
func (p *Provider) Capabilities() provider.Capabilities {
	return provider.Capabilities{Resume: true, Cancel: true, Tools: true}
}

// Config returns the configuration in effect (preset and defaults
// applied).
func (p *Provider) Config() Config { return p.cfg }

// Run starts the agent (or, with req.Resume, reattaches to it at req.Ref)
// and follows its output until it exits, emitting its events. It returns
// nil when the agent finished, an *provider.Error when it failed, and
// ctx's error when ctx was cancelled: the agent is killed, unless the
// cause is ErrDetach.
func (p *Provider) Run(ctx context.Context, req provider.Request, emit func(provider.Event) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	dec := decoders[p.cfg.Format](p.readOnly)
	var (
		t   *tailer
		err error
	)
	if req.Resume {
		t, err = p.reattach(req, dec, emit)
	} else {
		t, err = p.launch(req, dec, emit)
	}
	if err != nil {
		return err
	}
	defer t.close()
	return t.follow(ctx)
}

// launch starts a new agent for req.
func (p *Provider) launch(req provider.Request, dec decoder, emit func(provider.Event) error) (*tailer, error) {
	session, run := req.Session, req.Run
	if session == "" {
		session = "_"
	}
	if run == "" {
		run = "_"
	}
	if !pathSafe(session) || !pathSafe(run) {
		return nil, provider.Errorf(belay.ClassInvalidRequest, "command: session %q or run %q cannot name a directory", req.Session, req.Run)
	}
	runRoot := filepath.Join(p.cfg.RunDir, session, run)
	if err := os.MkdirAll(runRoot, 0o700); err != nil {
		return nil, internal(err, "create run directory")
	}
	// A new attempt means the runtime gave up on the earlier ones: an agent
	// of this run that is still running (it was never reported, or the
	// runtime resends) must not go on unseen.
	p.reapStale(runRoot)
	attempt := max(req.Attempt, 1)
	dir, err := os.MkdirTemp(runRoot, fmt.Sprintf("attempt%d-", attempt))
	if err != nil {
		return nil, internal(err, "create run directory")
	}
	stdin := os.DevNull
	if p.cfg.Prompt == PromptStdin {
		stdin = filepath.Join(dir, filePrompt)
		if err := os.WriteFile(stdin, []byte(req.Prompt), 0o600); err != nil {
			return nil, internal(err, "write prompt")
		}
	}
	argv := p.cfg.expand(vars{
		prompt: req.Prompt, model: req.Model, session: req.Session, run: req.Run,
		attempt: strconv.Itoa(attempt), runDir: dir,
	})
	h, err := start(dir, argv, stdin, p.cfg.Dir, p.env(req, dir))
	if err != nil {
		h.kill(p.cfg.KillGrace)
		return nil, &provider.Error{Class: belay.ClassInvalidRequest, Message: fmt.Sprintf("command: start %s: %v", argv[0], err), Err: err}
	}
	t, err := p.open(h, dec, emit, 0)
	if err != nil {
		h.kill(p.cfg.KillGrace)
		return nil, err
	}
	t.refOff = -1 // report the process at once
	if err := t.ref(); err != nil {
		t.close()
		return nil, t.abort(err)
	}
	return t, nil
}

// env is the agent's environment: the daemon's, Config.Env, and the run's
// ids.
func (p *Provider) env(req provider.Request, dir string) []string {
	env := os.Environ()
	for _, k := range slices.Sorted(maps.Keys(p.cfg.Env)) {
		env = append(env, k+"="+p.cfg.Env[k])
	}
	return append(env, "BELAY_SESSION="+req.Session, "BELAY_RUN="+req.Run, "BELAY_RUN_DIR="+dir)
}

// reapStale kills the agents of earlier attempts in runRoot that still run.
func (p *Provider) reapStale(runRoot string) {
	ents, err := os.ReadDir(runRoot)
	if err != nil {
		return
	}
	for _, e := range ents {
		dir := filepath.Join(runRoot, e.Name())
		b, err := os.ReadFile(filepath.Join(dir, fileID))
		if err != nil {
			continue
		}
		pid, pgid, token, err := parseID(string(trimNL(b)))
		if err != nil {
			continue
		}
		handle{pid: pid, pgid: pgid, token: token, dir: dir}.kill(p.cfg.KillGrace)
	}
}

// reattach follows the agent req.Ref names from its cursor.
func (p *Provider) reattach(req provider.Request, dec decoder, emit func(provider.Event) error) (*tailer, error) {
	ref := req.Ref
	if ref.Kind != RefKind {
		return nil, provider.Errorf(belay.ClassInvalidRequest, "command: cannot resume a %q ref", ref.Kind)
	}
	pid, pgid, token, err := parseID(ref.ID)
	if err != nil {
		return nil, &provider.Error{Class: belay.ClassInvalidRequest, Message: err.Error(), Err: err}
	}
	off := int64(0)
	if ref.Cursor != "" {
		off, err = strconv.ParseInt(ref.Cursor, 10, 64)
		if err != nil || off < 0 {
			return nil, provider.Errorf(belay.ClassInvalidRequest, "command: malformed cursor %q", ref.Cursor)
		}
	}
	if !filepath.IsAbs(ref.Target) || filepath.Base(ref.Target) != fileStdout {
		return nil, provider.Errorf(belay.ClassInvalidRequest, "command: ref target %q is not an output file", ref.Target)
	}
	dir := filepath.Dir(ref.Target)
	// <run dir root>/<session>/<run>/attempt<N>-<random>/stdout: a ref
	// that reached this run by mistake must not adopt another run's agent.
	if req.Run != "" && filepath.Base(filepath.Dir(dir)) != req.Run {
		return nil, provider.Errorf(belay.ClassInvalidRequest, "command: ref target %q is not an agent of run %s", ref.Target, req.Run)
	}
	h := handle{pid: pid, pgid: pgid, token: token, dir: dir}
	return p.open(h, dec, emit, off)
}

func internal(err error, what string) error {
	return &provider.Error{Class: belay.ClassInternal, Message: "command: " + what + ": " + err.Error(), Err: err}
}

func trimNL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}
