package browser

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/cmdline"
	"github.com/belayhq/belay/provider"
)

// RefKind is the Kind of the conversation refs the provider reports.
const RefKind = "browser"

// Defaults.
const (
	DefaultPollInterval  = 250 * time.Millisecond
	DefaultSendTimeout   = 30 * time.Second
	DefaultReadyTimeout  = 30 * time.Second
	DefaultProgressEvery = 20 * time.Second
	DefaultArtifactTime  = 30 * time.Minute
	DefaultStartTimeout  = 30 * time.Second
	DefaultNoBarAfter    = 5 * time.Minute
)

// Config configures a browser provider. It is decoded from the daemon's
// config file: [providers.<name>] with type = "browser".
type Config struct {
	// Site is the site profile runs use when they name none.
	Site string `toml:"site"`
	// SiteURL replaces the start URL of the site (the loopback test site
	// runs on a port chosen when it starts).
	SiteURL string `toml:"site_url"`
	// Chromium is the browser executable (default: chromium,
	// chromium-browser or google-chrome on PATH).
	Chromium string `toml:"chromium"`
	// Headed shows the run's browser windows (default headless).
	Headed bool `toml:"headed"`
	// Args are extra browser flags.
	Args []string `toml:"args"`
	// Dir holds seeds/ (the logged-in seed profiles), sites/ (site profile
	// overrides) and runs/ (each run's profile clone). The daemon sets it
	// to <data>/browser.
	Dir string `toml:"dir"`
	// ArtifactDir returns where a run's artifacts are downloaded; nil
	// keeps them in the run's directory under Dir.
	ArtifactDir func(session, run string) string `toml:"-"`
	// RunActive reports whether a run may still resume (it is not
	// finished, or it cannot tell). With it, the browsers of finished runs
	// that nothing closed are ended (see reap.go); the daemon asks its
	// store.
	RunActive func(session, run string) bool `toml:"-"`
	// PollInterval is how often the page is read (default 250ms).
	PollInterval time.Duration `toml:"poll_interval"`
	// SendTimeout bounds the wait for a send to show (default 30s).
	SendTimeout time.Duration `toml:"send_timeout"`
	// StartTimeout bounds a browser's start (until it opens its DevTools
	// port) and, again, the first connection to it (default 30s; a loaded
	// machine can take many seconds).
	StartTimeout time.Duration `toml:"start_timeout"`
	// ReadyTimeout bounds the wait for a page to be ready (default 30s).
	ReadyTimeout time.Duration `toml:"ready_timeout"`
	// ProgressEvery: while the site visibly works (a stop control or a
	// thinking indicator) but shows no new text, the provider reports the
	// target as alive this often, so the watchdog does not take a long
	// think for a stall (default 20s).
	ProgressEvery time.Duration `toml:"progress_every"`
	// ArtifactTimeout bounds the download of one artifact (default 30m;
	// there is no 30 s cap, a slow file is given its time).
	ArtifactTimeout time.Duration `toml:"artifact_timeout"`
	// NoBarAfter: an answer whose text has not changed for this long while
	// the page shows no stop control, no thinking indicator and no action
	// bar fails the run as ui_drift (the profile's action_bar no longer
	// matches) instead of waiting for the deadline (default 5m).
	NoBarAfter time.Duration `toml:"no_bar_after"`
	// Settle overrides the sites' completion settle time (tests).
	Settle time.Duration `toml:"settle"`
}

// ErrConfig reports an invalid provider configuration.
var ErrConfig = errors.New("browser: invalid config")

func (c Config) withDefaults() (Config, error) {
	if c.Dir == "" {
		c.Dir = filepath.Join(os.TempDir(), "belay-browser")
	}
	abs, err := filepath.Abs(c.Dir)
	if err != nil {
		return c, fmt.Errorf("%w: dir: %v", ErrConfig, err)
	}
	c.Dir = abs
	if c.PollInterval < 0 || c.SendTimeout < 0 || c.ReadyTimeout < 0 || c.StartTimeout < 0 || c.ProgressEvery < 0 || c.Settle < 0 {
		return c, fmt.Errorf("%w: durations must not be negative", ErrConfig)
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.SendTimeout == 0 {
		c.SendTimeout = DefaultSendTimeout
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = DefaultStartTimeout
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = DefaultReadyTimeout
	}
	if c.ArtifactTimeout <= 0 {
		c.ArtifactTimeout = DefaultArtifactTime
	}
	if c.ProgressEvery == 0 {
		c.ProgressEvery = DefaultProgressEvery
	}
	if c.NoBarAfter <= 0 {
		c.NoBarAfter = DefaultNoBarAfter
	}
	return c, nil
}

// Provider drives chat web UIs in isolated, detached Chromium browsers.
// It is safe for concurrent runs: each run has its own browser.
type Provider struct {
	name  string
	cfg   Config
	sites *Sites

	reapMu   sync.Mutex
	reapedAt time.Time
}

var _ provider.Provider = (*Provider)(nil)

// New returns a browser provider named name.
func New(name string, cfg Config) (*Provider, error) {
	if name == "" {
		return nil, fmt.Errorf("%w: provider name is empty", ErrConfig)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("provider %q: %w", name, err)
	}
	return &Provider{name: name, cfg: cfg, sites: NewSites(filepath.Join(cfg.Dir, "sites"))}, nil
}

// Name returns the provider's name.
func (p *Provider) Name() string { return p.name }

// Capabilities reports Resume and Cancel.
func (p *Provider) Capabilities() provider.Capabilities {
	return provider.Capabilities{Resume: true, Cancel: true}
}

// Config returns the configuration in effect.
func (p *Provider) Config() Config { return p.cfg }

// Sites returns the provider's site profiles.
func (p *Provider) Sites() *Sites { return p.sites }

var _ provider.SiteReader = (*Provider)(nil)

// ReadsSiteOptions marks the browser provider as the one that reads
// --site, --site-url and --attach (provider.SiteReader).
func (p *Provider) ReadsSiteOptions() {}

// Options are a run's or session's provider options (JSON).
type Options struct {
	Site    string `json:"site,omitempty"`
	SiteURL string `json:"site_url,omitempty"`
	// Attachments are files (absolute paths) uploaded with the prompt;
	// only a run's own options give them.
	Attachments []string `json:"attachments,omitempty"`
}

// cursor is the provider's durable state of a run, kept in the run's
// conversation ref: the send's intent and settlement, the turn baseline,
// and the browser the run is bound to.
type cursor struct {
	Run      string `json:"run"`
	Site     string `json:"site"`
	SiteURL  string `json:"siteUrl,omitempty"`
	Phase    string `json:"phase"` // open, intent, sent, done
	Hash     string `json:"hash,omitempty"`
	Baseline int    `json:"baseline"` // assistant turns before the send
	Users    int    `json:"users"`    // user turns before the send
	Chrome   chrome `json:"chrome"`
	Beat     int    `json:"beat,omitempty"`    // liveness reports while the site works
	Retries  int    `json:"retries,omitempty"` // error turns retried
	Rebinds  int    `json:"rebinds,omitempty"`
	Evidence string `json:"evidence,omitempty"` // why the last rebind happened
	// Answer is where the final answer came from: "copy" (the turn's copy
	// button), or "dom: " and why there was no copy to take.
	Answer string `json:"answer,omitempty"`
}

// Cursor phases.
const (
	phaseOpen   = "open"   // a browser is open; nothing typed
	phaseIntent = "intent" // the prompt is about to be (or was) sent
	phaseSent   = "sent"   // the send was verified: never send again
	phaseDone   = "done"
	// phaseStopped: the run was cancelled and its answer stopped on the
	// site; no later run adopts it.
	phaseStopped = "stopped"
)

// ParseCursor decodes the state a browser ref's cursor holds (for doctor
// and tests).
func ParseCursor(s string) (Cursor, error) {
	var c cursor
	if err := json.Unmarshal([]byte(s), &c); err != nil {
		return Cursor{}, fmt.Errorf("browser: malformed cursor: %w", err)
	}
	return Cursor{Run: c.Run, Site: c.Site, SiteURL: c.SiteURL, Phase: c.Phase, Hash: c.Hash, Baseline: c.Baseline,
		PID: c.Chrome.PID, WS: c.Chrome.WS, Profile: c.Chrome.Profile, Rebinds: c.Rebinds, Evidence: c.Evidence, Answer: c.Answer}, nil
}

// Cursor is the exported view of a run's browser state.
type Cursor struct {
	Run  string `json:"run"`
	Site string `json:"site"`
	// SiteURL is the start URL the run was sent with (--site-url), when
	// not the profile's.
	SiteURL  string `json:"siteUrl,omitempty"`
	Phase    string `json:"phase"`
	Hash     string `json:"hash,omitempty"`
	Baseline int    `json:"baseline"`
	PID      int    `json:"pid,omitempty"`
	WS       string `json:"ws,omitempty"`
	Profile  string `json:"profile,omitempty"`
	Rebinds  int    `json:"rebinds,omitempty"`
	Evidence string `json:"evidence,omitempty"`
	Answer   string `json:"answer,omitempty"`
}

// CheckCommand is the command that checks site as a run of provider
// (the browser provider's configured name) sent with start URL siteURL
// ("" for the profile's) sees it.
func CheckCommand(provider, site, siteURL string) string {
	return cmdline.BrowserSite("check", provider, site, siteURL)
}

// LoginCommand is the command that logs in to site as a run of provider
// sent with start URL siteURL ("" for the profile's) opens it.
func LoginCommand(provider, site, siteURL string) string {
	return cmdline.BrowserSite("login", provider, site, siteURL)
}

// PromptHash is the hash of a prompt the cursor records.
func PromptHash(prompt string) string {
	h := sha256.Sum256([]byte(prompt))
	return hex.EncodeToString(h[:])
}

// options merges the session's and the run's options.
func options(req provider.Request) (Options, error) {
	var o Options
	if len(req.Options) > 0 {
		if err := json.Unmarshal(req.Options, &o); err != nil {
			return o, provider.Errorf(belay.ClassInvalidRequest, "browser: session options: %v", err)
		}
	}
	if len(req.Input) > 0 {
		if run := provider.RunOptions(req.Input); len(run) > 0 {
			var ro Options
			if err := json.Unmarshal(run, &ro); err != nil {
				return o, provider.Errorf(belay.ClassInvalidRequest, "browser: run options: %v", err)
			}
			if ro.Site != "" {
				o.Site, o.SiteURL = ro.Site, ro.SiteURL
			}
			if ro.SiteURL != "" {
				o.SiteURL = ro.SiteURL
			}
			o.Attachments = ro.Attachments
		}
	}
	return o, nil
}

// site resolves the run's site: its options, then the conversation it
// continues, then the provider's default.
func (p *Provider) site(o Options, prev *cursor, follow *cursor) (*Site, string, error) {
	name, siteURL := o.Site, o.SiteURL
	for _, c := range []*cursor{prev, follow} {
		if name == "" && c != nil {
			name, siteURL = c.Site, c.SiteURL
		}
	}
	if name == "" {
		name, siteURL = p.cfg.Site, p.cfg.SiteURL
	}
	if name == "" {
		return nil, "", provider.Errorf(belay.ClassInvalidRequest, "browser: no site: give one with belay send --site NAME (sites: belay browser sites)")
	}
	if siteURL == "" && name == p.cfg.Site {
		siteURL = p.cfg.SiteURL
	}
	s, err := p.sites.Get(name)
	if err != nil {
		return nil, "", &provider.Error{Class: belay.ClassInvalidRequest, Message: err.Error(), Err: err}
	}
	if siteURL != "" {
		if s, err = s.WithStartURL(siteURL); err != nil {
			return nil, "", &provider.Error{Class: belay.ClassInvalidRequest, Message: err.Error(), Err: err}
		}
	}
	return s, siteURL, nil
}

func refCursor(ref belay.ConversationRef) *cursor {
	if ref.Kind != RefKind || ref.Cursor == "" {
		return nil
	}
	var c cursor
	if json.Unmarshal([]byte(ref.Cursor), &c) != nil {
		return nil
	}
	return &c
}

var _ provider.Validator = (*Provider)(nil)

// Validate refuses at the door (before the run is created) what the run
// would refuse at its start: options that do not decode, a site that no
// profile names, a start URL its profile refuses, an attachment that is
// not a readable file given by its absolute path. A request that names
// no site is left to the run, which may take the site of the session's
// conversation.
func (p *Provider) Validate(req provider.Request) error {
	o, err := options(req)
	if err != nil {
		return &provider.FieldError{Field: "options", Err: err}
	}
	if o.Site != "" {
		if _, _, err := p.site(o, nil, nil); err != nil {
			return &provider.FieldError{Field: "options", Err: err}
		}
	}
	if err := checkAttachments(o.Attachments); err != nil {
		return &provider.FieldError{Field: "options", Err: err}
	}
	return nil
}

// checkAttachments refuses an attachment that is not a readable regular
// file given by its absolute path.
func checkAttachments(files []string) error {
	for _, f := range files {
		if fi, err := os.Stat(f); err != nil || !filepath.IsAbs(f) || !fi.Mode().IsRegular() {
			return provider.Errorf(belay.ClassInvalidRequest, "browser: attachment %q is not a readable file given by its absolute path", f)
		}
	}
	return nil
}

// Run sends the prompt in a browser bound to the run (or, when the run
// already sent it, reattaches) and follows the answer until it is
// complete. The prompt is sent at most once per run: after an intent
// without a settlement the conversation is searched for it first, and
// after a settlement it is never sent again.
func (p *Provider) Run(ctx context.Context, req provider.Request, emit func(provider.Event) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !pathSafe(req.Session) || !pathSafe(req.Run) {
		return provider.Errorf(belay.ClassInvalidRequest, "browser: session %q or run %q cannot name a directory", req.Session, req.Run)
	}
	p.reapOrphans()
	o, err := options(req)
	if err != nil {
		return err
	}
	prev := refCursor(req.Ref)
	if prev != nil && prev.Run != req.Run {
		prev = nil // the ref of an earlier run of the session
	}
	follow := refCursor(req.SessionRef)
	site, siteURL, err := p.site(o, prev, follow)
	if err != nil {
		return err
	}
	if err := checkAttachments(o.Attachments); err != nil {
		return err
	}
	r := &runState{ctx: ctx, p: p, req: req, emit: emit, site: site, attachments: o.Attachments, runDir: filepath.Join(p.cfg.Dir, "runs", req.Session, req.Run)}
	r.settle = time.Duration(site.Completion.Settle)
	if p.cfg.Settle > 0 {
		r.settle = p.cfg.Settle
	}
	if req.Resume {
		r.emitted = req.TextOffset
	}
	err = r.execute(ctx, prev, follow, siteURL)
	r.finish(ctx, err)
	return err
}

func pathSafe(id string) bool {
	return id != "" && id != "." && id != ".." && len(id) <= 128 && !strings.ContainsAny(id, "/\\\x00")
}
