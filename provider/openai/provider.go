package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/provider"
	"github.com/belayhq/belay/provider/internal/httpapi"
	"github.com/belayhq/belay/provider/internal/prompt"
)

// RefKind is the Kind of the conversation refs the Responses API mode
// reports: ID is the response id, Cursor the last applied
// sequence_number.
const RefKind = "openai.response"

// Provider is an OpenAI-compatible provider. It is safe for concurrent
// runs.
type Provider struct {
	name   string
	cfg    Config
	key    string
	scrub  *httpapi.Scrubber
	client *httpapi.Client
	now    func() time.Time
}

var _ provider.Provider = (*Provider)(nil)

// New validates cfg, loads the API key and returns the provider named
// name (the registry key, e.g. "openai" or "vllm").
func New(name string, cfg Config) (*Provider, error) {
	if name == "" {
		name = "openai"
	}
	if err := cfg.validate(name); err != nil {
		return nil, err
	}
	key, err := cfg.loadKey(name)
	if err != nil {
		return nil, err
	}
	cfg.APIKey = "" // the key lives in p.key only
	return &Provider{
		name:  name,
		cfg:   cfg,
		key:   key,
		scrub: httpapi.NewScrubber(key),
		client: httpapi.NewClient(httpapi.Timeouts{
			Connect: cfg.ConnectTimeout, FirstByte: cfg.FirstByteTimeout, Idle: cfg.IdleTimeout,
		}),
		now: time.Now,
	}, nil
}

// Name returns the provider's name.
func (p *Provider) Name() string { return p.name }

// Capabilities: Tools always; Resume and Cancel in the Responses API mode.
func (p *Provider) Capabilities() provider.Capabilities {
	bg := p.cfg.API == APIResponses
	return provider.Capabilities{Resume: bg, Cancel: bg, Tools: true}
}

// API returns the API the provider speaks ("chat" or "responses").
func (p *Provider) API() string { return p.cfg.API }

// Close closes idle connections. The provider stays usable.
func (p *Provider) Close() error {
	p.client.CloseIdleConnections()
	return nil
}

// Run executes req: see the package doc.
func (p *Provider) Run(ctx context.Context, req provider.Request, emit func(provider.Event) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if p.cfg.API == APIResponses {
		return p.runResponses(ctx, req, emit)
	}
	if req.Resume {
		return provider.Errorf(belay.ClassInvalidRequest, "%s: the chat API cannot resume a run; use api = \"responses\"", p.name)
	}
	return p.runChat(ctx, req, emit)
}

// input is what every request is built from.
type input struct {
	model string
	opts  prompt.Options
	msgs  []prompt.Message
}

func (p *Provider) input(ctx context.Context, req provider.Request, needPrompt bool) (input, error) {
	in := input{model: req.Model}
	if in.model == "" {
		in.model = p.cfg.Model
	}
	if in.model == "" {
		return in, provider.Errorf(belay.ClassInvalidRequest, "%s: no model: set model in [providers.%s] or give the run one", p.name, p.name)
	}
	var err error
	if in.opts, err = prompt.ParseOptions(req); err != nil {
		return in, provider.Errorf(belay.ClassInvalidRequest, "%s: %v", p.name, err)
	}
	if !needPrompt {
		return in, nil
	}
	if in.msgs, err = prompt.Conversation(ctx, p.cfg.History, req); err != nil {
		if ctx.Err() != nil {
			return in, ctx.Err()
		}
		return in, &provider.Error{Class: belay.ClassInvalidRequest, Message: p.scrub.String(p.name + ": " + err.Error())}
	}
	return in, nil
}

// newRequest builds an API request; body nil means no body.
func (p *Provider) newRequest(ctx context.Context, method, path string, body any) (*http.Request, error) {
	var rd *bytes.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, provider.Errorf(belay.ClassInvalidRequest, "%s: encode request: %v", p.name, err)
		}
		rd = bytes.NewReader(b)
	}
	var r *http.Request
	var err error
	if rd != nil {
		r, err = http.NewRequestWithContext(ctx, method, p.cfg.BaseURL+path, rd)
	} else {
		r, err = http.NewRequestWithContext(ctx, method, p.cfg.BaseURL+path, nil)
	}
	if err != nil {
		return nil, provider.Errorf(belay.ClassInvalidRequest, "%s: %s", p.name, p.scrub.String(err.Error()))
	}
	for k, v := range p.cfg.Headers {
		r.Header.Set(k, v)
	}
	if body != nil {
		r.Header.Set("Content-Type", "application/json")
	}
	r.Header.Set("Accept", "application/json, text/event-stream")
	r.Header.Set("User-Agent", "belay")
	if p.key != "" {
		r.Header.Set("Authorization", "Bearer "+p.key)
	}
	if p.cfg.Organization != "" {
		r.Header.Set("OpenAI-Organization", p.cfg.Organization)
	}
	if p.cfg.Project != "" {
		r.Header.Set("OpenAI-Project", p.cfg.Project)
	}
	return r, nil
}

// do sends a request and returns a 2xx response; anything else is a
// classified error (ctx's error when ctx is done).
func (p *Provider) do(ctx context.Context, what, method, path string, body any) (*http.Response, error) {
	resp, err := p.send(ctx, what, method, path, body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return nil, httpapi.FromResponse(resp, p.name+": "+what, p.scrub, p.now())
	}
	return resp, nil
}

// send sends a request and returns its response, whatever the status.
func (p *Provider) send(ctx context.Context, what, method, path string, body any) (*http.Response, error) {
	r, err := p.newRequest(ctx, method, path, body)
	if err != nil {
		return nil, err
	}
	resp, err := p.client.Do(ctx, r)
	if err != nil {
		return nil, httpapi.NetworkError(ctx, p.name+": "+what, err, p.scrub)
	}
	return resp, nil
}

// malformed is the error for a chunk that does not parse. It is
// transient: a broken proxy or a cut connection usually causes it, and
// the runtime's retry budget bounds a server that keeps sending one.
func (p *Provider) malformed(what string, data string, err error) *provider.Error {
	// The chunk itself is not quoted: it may hold answer text.
	return &provider.Error{Class: belay.ClassTransient, Message: p.scrub.String(fmt.Sprintf("%s: %s: malformed chunk (%d bytes): %v", p.name, what, len(data), err))}
}

var _ provider.Validator = (*Provider)(nil)

// Validate checks that a run has a model and that its options decode.
func (p *Provider) Validate(req provider.Request) error {
	if req.Model == "" && p.cfg.Model == "" {
		return &provider.FieldError{Field: "model", Err: fmt.Errorf("%s has no default model: give one with --model or set model in [providers.%s]", p.name, p.name)}
	}
	if _, err := prompt.ParseOptions(req); err != nil {
		return &provider.FieldError{Field: "options", Err: err}
	}
	return nil
}
