package mcpserver

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/belayhq/belay/client"
)

// SessionTimeout closes an MCP session over HTTP that has had no request
// open (a client waiting for wake-ups keeps its event stream open) for
// this long, so that vanished clients do not pile up in the daemon.
const SessionTimeout = 30 * time.Minute

// HTTP serves the MCP servers of every scope over streamable HTTP. A
// request names its scope in the query, as the flags of `belay mcp` do:
// /mcp?tag=T&tag=U, /mcp?session=ses_..., /mcp?all=1, and optionally
// subscriber=NAME; none is tag "mcp". One server (and wake loop) runs per
// scope; Close stops them.
type HTTP struct {
	c       *client.Client
	version string
	log     *slog.Logger
	h       http.Handler

	mu      sync.Mutex
	servers map[string]*Server
	ctx     context.Context
	cancel  context.CancelFunc
	closed  bool
}

// NewHTTP returns the handler; servers talk to the daemon through c.
func NewHTTP(c *client.Client, version string, log *slog.Logger) *HTTP {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &HTTP{c: c, version: version, log: log, servers: map[string]*Server{}}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	h.h = mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		if s := h.server(r); s != nil {
			return s.MCP()
		}
		return nil
	}, &mcp.StreamableHTTPOptions{SessionTimeout: SessionTimeout})
	return h
}

func (h *HTTP) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.h.ServeHTTP(w, r) }

// server returns the server of the request's scope (nil: a bad scope,
// answered 400).
func (h *HTTP) server(r *http.Request) *Server {
	q := r.URL.Query()
	scope := Scope{Sessions: q["session"], Tags: q["tag"], All: q.Get("all") == "1" || q.Get("all") == "true"}
	if err := scope.Check(); err != nil {
		h.log.Warn("mcp: bad scope", "err", err)
		return nil
	}
	sub := q.Get("subscriber")
	key := scope.String() + "|" + sub
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	if s := h.servers[key]; s != nil {
		return s
	}
	s, err := New(Options{Client: h.c, Scope: scope, Subscriber: sub, Version: h.version, Logger: h.log})
	if err != nil {
		h.log.Warn("mcp: bad scope", "err", err)
		return nil
	}
	s.Start(h.ctx)
	h.servers[key] = s
	return s
}

// Close stops every server's wake loop and closes its MCP sessions (a
// client that never ended its session holds it until SessionTimeout
// otherwise); a request after Close is refused. Safe to call more than
// once.
func (h *HTTP) Close() {
	h.mu.Lock()
	h.closed = true
	servers := h.servers
	h.servers = map[string]*Server{}
	h.mu.Unlock()
	h.cancel()
	for _, s := range servers {
		s.Stop()
		for ss := range s.MCP().Sessions() {
			_ = ss.Close() // ends the session's connection; nothing of belay's is lost
		}
	}
}
