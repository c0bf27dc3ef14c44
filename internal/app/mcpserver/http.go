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

// IdleScope is how long the server of a scope with no MCP session left
// is kept after the last request of that scope (the SDK asks for the
// server on every request); it is stopped (its wake loop too) when a
// server for another scope is made after that.
const IdleScope = time.Minute

// MaxScopes is how many scopes' servers may run at once; a new session of
// a scope past that, with none idle to stop, is refused (400).
const MaxScopes = 1024

// HTTP serves the MCP servers of every scope over streamable HTTP. A
// request names its scope in the query, as the flags of `belay mcp` do:
// /mcp?tag=T&tag=U, /mcp?session=ses_..., /mcp?all=1, and optionally
// subscriber=NAME; none is tag "mcp". One server (and wake loop) runs per
// scope while it has sessions (see IdleScope, MaxScopes); Close stops
// them.
type HTTP struct {
	c       *client.Client
	version string
	log     *slog.Logger
	h       http.Handler
	now     func() time.Time

	mu       sync.Mutex
	servers  map[string]*scopeServer
	ctx      context.Context
	cancel   context.CancelFunc
	closed   bool
	inflight sync.WaitGroup
}

// scopeServer is the server of one scope, and when a request of the
// scope last asked for it.
type scopeServer struct {
	s    *Server
	used time.Time
}

// NewHTTP returns the handler; servers talk to the daemon through c.
func NewHTTP(c *client.Client, version string, log *slog.Logger) *HTTP {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &HTTP{c: c, version: version, log: log, servers: map[string]*scopeServer{}, now: time.Now}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	h.h = mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		if s := h.server(r); s != nil {
			return s.MCP()
		}
		return nil
	}, &mcp.StreamableHTTPOptions{SessionTimeout: SessionTimeout})
	return h
}

func (h *HTTP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		http.Error(w, "belay: the daemon is stopping", http.StatusServiceUnavailable)
		return
	}
	h.inflight.Add(1)
	h.mu.Unlock()
	defer h.inflight.Done()
	h.h.ServeHTTP(w, r)
}

// server returns the server of the request's scope (the SDK asks on
// every request; nil: a bad scope, or too many, answered 400).
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
	now := h.now()
	if ss := h.servers[key]; ss != nil {
		ss.used = now
		return ss.s
	}
	for k, ss := range h.servers {
		if now.Sub(ss.used) >= IdleScope && sessions(ss.s) == 0 {
			delete(h.servers, k)
			ss.s.Stop() // ends its wake loop's long poll at once
		}
	}
	if len(h.servers) >= MaxScopes {
		h.log.Warn("mcp: too many scopes with sessions", "max", MaxScopes)
		return nil
	}
	s, err := New(Options{Client: h.c, Scope: scope, Subscriber: sub, Version: h.version, Logger: h.log})
	if err != nil {
		h.log.Warn("mcp: bad scope", "err", err)
		return nil
	}
	s.Start(h.ctx)
	h.servers[key] = &scopeServer{s: s, used: now}
	return s
}

// sessions counts the MCP sessions of s.
func sessions(s *Server) int {
	n := 0
	for range s.MCP().Sessions() {
		n++
	}
	return n
}

// Close stops every server's wake loop and closes its MCP sessions (a
// client that never ended its session holds it until SessionTimeout
// otherwise), including any a request in progress made; later requests
// are answered 503. Safe to call more than once.
func (h *HTTP) Close() {
	h.mu.Lock()
	h.closed = true
	servers := h.servers
	h.servers = map[string]*scopeServer{}
	h.mu.Unlock()
	h.cancel()
	closeAll := func() {
		for _, ss := range servers {
			for session := range ss.s.MCP().Sessions() {
				_ = session.Close() // ends its connection; nothing of belay's is lost
			}
		}
	}
	closeAll()
	// Requests in progress end with their sessions (or their
	// connections); a session one of them made after the first pass is
	// closed by the second.
	h.inflight.Wait()
	closeAll()
	for _, ss := range servers {
		ss.s.Stop()
	}
}
