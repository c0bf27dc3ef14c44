// Package mcpserver is `belay mcp`: a Model Context Protocol server that
// lets agents send long prompts to belay, follow them and be woken when
// they end. It talks to the daemon only through client/ and keeps no state
// of its own: runs, scopes and wake-ups live in the daemon, so the process
// may die and start again at any moment. It serves over stdio (what agent
// configs launch) and, mounted by the daemon, over streamable HTTP at /mcp.
package mcpserver

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/client"
	"github.com/belayhq/belay/internal/ids"
)

// DefaultTag is the scope of a server started with no scope: the runs it
// sends carry it, and it may act on the sessions whose runs carry it.
const DefaultTag = "mcp"

// Limits of the tools.
const (
	// MaxWait caps the wait tool's timeout: an agent is never blocked
	// longer than this by one call.
	MaxWait     = 50 * time.Second
	DefaultWait = 30 * time.Second
	// DefaultReadBytes and MaxReadBytes size a page of the read tool.
	DefaultReadBytes = 16 << 10
	MaxReadBytes     = 256 << 10
	// MaxResourceText caps the answer text a resource read returns; the
	// read tool pages through the rest.
	MaxResourceText = 1 << 20
)

// Scope is what an agent may act on: the sessions named, the sessions
// whose runs carry one of the tags (the runs this server sends carry them
// all), or everything.
type Scope struct {
	Sessions []string
	Tags     []string
	All      bool
}

// Check validates the scope and fills in the default (tag "mcp").
func (s *Scope) Check() error {
	for _, id := range s.Sessions {
		if err := ids.Check(ids.Session, id); err != nil {
			return fmt.Errorf("%w: --session: %v", belay.ErrInvalid, err)
		}
	}
	if err := belay.CheckTags(s.Tags, nil); err != nil {
		return err
	}
	if s.All && (len(s.Sessions) > 0 || len(s.Tags) > 0) {
		return fmt.Errorf("%w: --all grants everything: give it alone, without --session or --tag", belay.ErrInvalid)
	}
	if !s.All && len(s.Sessions) == 0 && len(s.Tags) == 0 {
		s.Tags = []string{DefaultTag}
	}
	return nil
}

// String names the scope: it is the default wake-up subscriber.
func (s Scope) String() string {
	switch {
	case s.All:
		return "all"
	case len(s.Tags) > 0:
		return "tag:" + strings.Join(s.Tags, ",")
	}
	return "session:" + strings.Join(s.Sessions, ",")
}

// Options configure a Server.
type Options struct {
	Client *client.Client
	Scope  Scope
	// Subscriber names this server's wake-ups in the daemon (the addressee
	// of their inbox items). Servers with the same subscriber share them:
	// each wake-up is sent by one of them. Default: "mcp:" + the scope,
	// shortened to fit.
	Subscriber string
	Version    string
	// Logger gets status only: prompts and answers are never logged.
	Logger *slog.Logger
	// WakeTTL is the lease of a wake-up being sent (default 60s).
	WakeTTL time.Duration
}

// Server is one MCP server over one daemon and scope.
type Server struct {
	c     *client.Client
	scope Scope
	sub   string
	log   *slog.Logger
	srv   *mcp.Server
	owner string
	ttl   time.Duration

	wake    chan struct{} // kicks the wake loop
	mu      sync.Mutex
	subs    map[string]map[*mcp.ServerSession]bool // uri -> sessions subscribed
	sent    map[string][]string                    // delivery id -> who got the notification
	cancel  context.CancelFunc
	done    chan struct{}
	started bool
}

// New returns a server; Start begins sending wake-ups.
func New(opts Options) (*Server, error) {
	if opts.Client == nil {
		return nil, fmt.Errorf("%w: mcpserver needs a client", belay.ErrInvalid)
	}
	if err := opts.Scope.Check(); err != nil {
		return nil, err
	}
	if opts.Subscriber == "" {
		opts.Subscriber = "mcp:" + opts.Scope.String()
		if len(opts.Subscriber) > belay.MaxTagLen {
			opts.Subscriber = opts.Subscriber[:belay.MaxTagLen]
		}
	}
	if err := belay.CheckTags([]string{opts.Subscriber}, nil); err != nil {
		return nil, fmt.Errorf("%w: subscriber %q: want 1-%d of letters, digits and ._:/@-", belay.ErrInvalid, opts.Subscriber, belay.MaxTagLen)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.WakeTTL <= 0 {
		opts.WakeTTL = 60 * time.Second
	}
	host, _ := os.Hostname()
	s := &Server{
		c: opts.Client, scope: opts.Scope, sub: opts.Subscriber, log: opts.Logger,
		owner: fmt.Sprintf("%s@%s:%d/%s", opts.Subscriber, host, os.Getpid(), ids.New("mcp_")[4:14]),
		ttl:   opts.WakeTTL,
		wake:  make(chan struct{}, 1), subs: map[string]map[*mcp.ServerSession]bool{}, sent: map[string][]string{},
	}
	s.srv = mcp.NewServer(&mcp.Implementation{Name: "belay", Title: "belay", Version: opts.Version}, &mcp.ServerOptions{
		Instructions:       instructions,
		Capabilities:       &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}, Resources: &mcp.ResourceCapabilities{Subscribe: true}},
		SubscribeHandler:   s.subscribe,
		UnsubscribeHandler: s.unsubscribe,
	})
	s.srv.AddSendingMiddleware(s.recordSends)
	s.addTools()
	s.addResources()
	return s, nil
}

const instructions = `belay runs long prompts and agent jobs durably: send returns at once with a run id; the run goes on if you, the MCP server or the belay daemon restart.
To be woken when a run ends, subscribe to its resource belay://runs/{id} (notifications/resources/updated), or call wait (bounded: it returns still_running rather than block).
Read the answer with read (paged by cursor) or by reading the resource. doctor says what to do when something looks wrong.`

// MCP returns the SDK server, to serve on a transport.
func (s *Server) MCP() *mcp.Server { return s.srv }

// Subscriber returns the name of this server's wake-ups in the daemon.
func (s *Server) Subscriber() string { return s.sub }

// Start begins leasing and sending wake-ups. It does not block.
func (s *Server) Start(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return
	}
	s.started = true
	ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		s.wakeLoop(ctx)
	}()
}

// Stop stops the wake loop and waits for it. Wake-ups it held leases on
// are sent by the next server when the leases expire. Safe before Start.
func (s *Server) Stop() {
	s.mu.Lock()
	cancel, done := s.cancel, s.done
	s.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// Serve runs the server on a transport (stdio) until the client goes
// away or ctx is done, with the wake loop running.
func (s *Server) Serve(ctx context.Context, t mcp.Transport) error {
	s.Start(ctx)
	defer s.Stop()
	return s.srv.Run(ctx, t)
}

// inScopeTags returns the scope's tags for a new run.
func (s *Server) runTags(extra []string) []string {
	tags := slices.Clone(s.scope.Tags)
	for _, t := range extra {
		if !slices.Contains(tags, t) {
			tags = append(tags, t)
		}
	}
	return tags
}
