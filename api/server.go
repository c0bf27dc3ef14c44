package api

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/runtime"
	"github.com/belayhq/belay/store"
	"github.com/belayhq/belay/transcript"
)

// Body size limits. A run's input is journaled whole in one record, so a
// run request is capped at the journal's record size, and its input
// (prompt, script and options as JSON) at runtime.MaxInput: what is
// accepted can be stored.
const (
	MaxBody    = 1 << 20             // most requests
	MaxRunBody = belay.MaxRecordSize // run creation
)

// Limits on waits a client may ask for.
const (
	MaxWait          = 60 * time.Second
	DefaultKeepalive = 15 * time.Second
)

// Options configure a Server.
type Options struct {
	Runtime *runtime.Runtime
	Version string
	DataDir string
	// Keepalive is the SSE keepalive interval (DefaultKeepalive if 0).
	Keepalive time.Duration
	Logger    *slog.Logger
	Metrics   *Metrics
	// Export writes a session's transcript in a format, and says what it
	// changed to fit the format; nil disables the endpoint.
	Export func(ctx context.Context, w io.Writer, session, format string) (transcript.ExportSummary, error)
	// DaemonDoctor reports on the daemon, store and locks.
	DaemonDoctor func(ctx context.Context) (any, error)
	// MCP, if set, serves the Model Context Protocol at /mcp, behind the
	// same authentication as the API.
	MCP http.Handler
	// MaxWatchers caps SSE streams and long polls at once (see ConnLimits;
	// 1024 if 0); beyond it they are answered 503 overloaded.
	MaxWatchers int
	// BodyTimeout bounds reading a request body (DefaultBodyTimeout if 0).
	BodyTimeout time.Duration
}

// Server serves the API.
type Server struct {
	opts     Options
	watchers watchers
	rt       *runtime.Runtime
	st       store.Store
	started  time.Time
	log      *slog.Logger
	hubs     hubs           // followers of streamed sessions (hub.go)
	hubWG    sync.WaitGroup // their goroutines
	hubKeep  int            // frames a hub holds (tests make it small)
}

// NewServer returns a Server.
func NewServer(opts Options) *Server {
	if opts.Keepalive <= 0 {
		opts.Keepalive = DefaultKeepalive
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.MaxWatchers <= 0 {
		opts.MaxWatchers = 1024
	}
	if opts.BodyTimeout <= 0 {
		opts.BodyTimeout = DefaultBodyTimeout
	}
	return &Server{opts: opts, watchers: make(watchers, opts.MaxWatchers), rt: opts.Runtime, st: opts.Runtime.Store(), started: time.Now(), log: opts.Logger, hubKeep: defaultHubKeep}
}

// Handler returns the API's handler. With a non-empty token every request
// except /healthz must carry "Authorization: Bearer <token>" (TCP).
func (s *Server) Handler(token string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", s.health)
	if s.opts.Metrics != nil {
		mux.Handle("GET /metrics", s.opts.Metrics.Handler())
	}
	mux.HandleFunc("POST /v1/sessions", s.createSession)
	mux.HandleFunc("GET /v1/sessions", s.listSessions)
	mux.HandleFunc("GET /v1/sessions/{id}", s.getSession)
	mux.HandleFunc("DELETE /v1/sessions/{id}", s.deleteSession)
	mux.HandleFunc("GET /v1/sessions/{id}/runs", s.listRuns)
	mux.HandleFunc("POST /v1/sessions/{id}/runs", s.createRun)
	mux.HandleFunc("GET /v1/sessions/{id}/events", s.events)
	mux.HandleFunc("GET /v1/sessions/{id}/doctor", s.doctor)
	mux.HandleFunc("GET /v1/sessions/{id}/transcript", s.transcript)
	mux.HandleFunc("GET /v1/sessions/{id}/inbox", s.listInbox)
	mux.HandleFunc("POST /v1/sessions/{id}/inbox", s.post)
	mux.HandleFunc("POST /v1/runs", s.createRun)
	mux.HandleFunc("POST /v1/runs:batch", s.createRuns)
	mux.HandleFunc("GET /v1/runs", s.listAllRuns)
	mux.HandleFunc("GET /v1/runs/{id}", s.getRun)
	mux.HandleFunc("GET /v1/runs/{id}/wait", s.waitRun)
	mux.HandleFunc("GET /v1/runs/{id}/answer", s.answer)
	mux.HandleFunc("POST /v1/runs/{id}/cancel", s.cancelRun)
	mux.HandleFunc("POST /v1/runs/{id}/retry", s.retryRun)
	mux.HandleFunc("POST /v1/inbox/lease", s.lease)
	mux.HandleFunc("POST /v1/inbox/{id}/settle", s.settle)
	mux.HandleFunc("POST /v1/prune", s.prune)
	mux.HandleFunc("GET /v1/doctor", s.daemonDoctor)
	if s.opts.MCP != nil {
		// MCP's event streams (and subscriptions/listen, a POST whose
		// response is a stream) live as long as the client: no read or
		// write deadline; the connection cap still bounds them.
		mcp := s.opts.MCP
		mux.Handle("/mcp", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rc := http.NewResponseController(w)
			_ = rc.SetWriteDeadline(time.Time{})
			_ = rc.SetReadDeadline(time.Time{})
			mcp.ServeHTTP(w, r)
		}))
	}
	var h http.Handler = jsonMisses(mux)
	if token != "" {
		h = requireToken(token, h, s.publicHealth)
	}
	return s.recoverer(s.deadlines(h))
}

// storeHealth is implemented by stores that can say whether they can be
// written now (pgstore: the database answers).
type storeHealth interface {
	Health(ctx context.Context) error
}

// problems says why the daemon cannot do its work now (nil: it can).
func (s *Server) problems(ctx context.Context) []string {
	sh, ok := s.st.(storeHealth)
	if !ok {
		return nil
	}
	err := sh.Health(ctx)
	if err == nil {
		return nil
	}
	// "store unreachable: ...", "store read-only: ...".
	msg := errorMessage(err)
	if !strings.HasPrefix(msg, "store ") {
		msg = "store " + msg
	}
	return []string{msg}
}

// health is GET /healthz: 200 and status ok, or 503 and status degraded
// with the problems, so that a load balancer, `belay daemon status` and
// doctor all see a daemon that answers but cannot write.
func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	st := s.rt.Stats()
	h := apitype.Health{
		Status: apitype.HealthOK, Version: s.opts.Version, Incarnation: s.rt.Incarnation(), PID: os.Getpid(),
		DataDir: s.opts.DataDir, StartedAt: s.started, Active: st.Active, Queued: st.Queued,
		Watchers: len(s.watchers),
	}
	code := http.StatusOK
	if p := s.problems(r.Context()); len(p) > 0 {
		h.Status, h.Problems, code = apitype.HealthDegraded, p, http.StatusServiceUnavailable
	}
	writeJSON(w, code, h)
}

// publicHealth is GET /healthz without the bearer token (TCP): the
// status only, no pid, paths, ids or error text.
func (s *Server) publicHealth(w http.ResponseWriter, r *http.Request) {
	if len(s.problems(r.Context())) > 0 {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": apitype.HealthDegraded})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": apitype.HealthOK})
}
