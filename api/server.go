package api

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/internal/ids"
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
	return &Server{opts: opts, watchers: make(watchers, opts.MaxWatchers), rt: opts.Runtime, st: opts.Runtime.Store(), started: time.Now(), log: opts.Logger}
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

// jsonMisses answers requests no route matches (404, or 405 with Allow)
// with a JSON error body like every other error.
func jsonMisses(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, r)
		if allow := rec.Header().Get("Allow"); allow != "" {
			w.Header().Set("Allow", allow)
		}
		if rec.Code == http.StatusMethodNotAllowed {
			writeErrorCode(w, rec.Code, apitype.CodeMethod, r.Method+" is not allowed on "+r.URL.Path, nil)
			return
		}
		writeErrorCode(w, http.StatusNotFound, apitype.CodeNotFound, "no such endpoint: "+r.Method+" "+r.URL.Path, nil)
	})
}

// requireToken checks the bearer token in constant time. GET /healthz
// without it is answered by public.
func requireToken(token string, next http.Handler, public http.HandlerFunc) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			if r.URL.Path == "/healthz" && r.Method == http.MethodGet {
				public(w, r)
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="belay"`)
			writeErrorCode(w, http.StatusUnauthorized, apitype.CodeUnauthenticated, "a valid bearer token is required (see the token file in the data directory)", nil)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// recoverer turns a panic into a 500 and a log line: no input brings the
// daemon down.
func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.Error("handler panic", "path", r.URL.Path, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
				writeErrorCode(w, http.StatusInternalServerError, apitype.CodeInternal, "internal error", nil)
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// decode reads a JSON body of at most limit bytes into v, strictly.
func decode(w http.ResponseWriter, r *http.Request, limit int64, v any) bool {
	body := http.MaxBytesReader(w, r.Body, limit)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeErrorCode(w, http.StatusRequestEntityTooLarge, apitype.CodeTooLarge, fmt.Sprintf("request body is larger than %d bytes", limit), map[string]any{"limit": limit})
			return false
		}
		if errors.Is(err, io.EOF) {
			writeErrorCode(w, http.StatusBadRequest, apitype.CodeInvalid, "request body is empty; send a JSON object", nil)
			return false
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			w.Header().Set("Connection", "close")
			writeErrorCode(w, http.StatusRequestTimeout, apitype.CodeTimeout, "the request body did not arrive within the read timeout", nil)
			return false
		}
		writeErrorCode(w, http.StatusBadRequest, apitype.CodeInvalid, "request body is not valid JSON for this endpoint: "+err.Error(), nil)
		return false
	}
	if dec.More() {
		writeErrorCode(w, http.StatusBadRequest, apitype.CodeInvalid, "request body has data after the JSON object", nil)
		return false
	}
	return true
}

// pathID returns the {id} path value if it follows the grammar of prefix.
func pathID(w http.ResponseWriter, r *http.Request, prefix string) (string, bool) {
	id := r.PathValue("id")
	if err := ids.Check(prefix, id); err != nil {
		writeErrorCode(w, http.StatusBadRequest, apitype.CodeInvalid, err.Error(), nil)
		return "", false
	}
	return id, true
}

func idempotencyKey(w http.ResponseWriter, r *http.Request) (string, bool) {
	k := r.Header.Get("Idempotency-Key")
	if len(k) > 200 || strings.ContainsAny(k, "\x00\r\n") {
		writeErrorCode(w, http.StatusBadRequest, apitype.CodeInvalid, "Idempotency-Key must be at most 200 printable bytes", nil)
		return "", false
	}
	return k, true
}

// storeHealth is implemented by stores that can say whether they can be
// written now (pgstore: the database answers and this node holds its
// writer lock).
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
	msg := strings.TrimPrefix(err.Error(), "belay: ")
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

func (s *Server) createSession(w http.ResponseWriter, r *http.Request) {
	key, ok := idempotencyKey(w, r)
	if !ok {
		return
	}
	var req apitype.CreateSessionRequest
	if !decode(w, r, MaxBody, &req) {
		return
	}
	if _, err := s.rt.Provider(req.Provider); err != nil {
		writeError(w, err) // every run of the session would fail
		return
	}
	sess, err := s.st.CreateSession(r.Context(), belay.SessionInput{
		Provider: req.Provider, Model: req.Model, Labels: req.Labels, Options: req.Options, IdempotencyKey: key,
	})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, sess)
}

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if st := belay.SessionState(q.Get("state")); st != "" && !st.Valid() {
		writeErrorCode(w, http.StatusBadRequest, apitype.CodeInvalid, "state must be idle, active or quarantined", map[string]any{"field": "state"})
		return
	}
	limit, cursor, ok := pageParams(w, r)
	if !ok {
		return
	}
	if sessionsCursor(cursor) != nil {
		badCursor(w, cursor)
		return
	}
	f := belay.SessionFilter{State: belay.SessionState(q.Get("state")), Provider: q.Get("provider"), Limit: limit + 1, Before: cursor}
	list, err := s.st.Sessions(r.Context(), f)
	if err != nil {
		writeError(w, err)
		return
	}
	out := apitype.SessionList{Sessions: list}
	if len(list) > limit {
		out.Sessions = list[:limit]
		out.NextCursor = list[limit-1].ID
	}
	if out.Sessions == nil {
		out.Sessions = []belay.Session{}
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, ids.Session)
	if !ok {
		return
	}
	sess, err := s.st.Session(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, sess)
}

func (s *Server) withActivity(run belay.Run) apitype.Run {
	out := apitype.Run{Run: run}
	if a, ok := s.rt.Activity(run.ID); ok {
		out.Activity = &a
	}
	return out
}

func (s *Server) listRuns(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, ids.Session)
	if !ok {
		return
	}
	status := belay.RunStatus(r.URL.Query().Get("status"))
	if status != "" && !status.Valid() {
		writeErrorCode(w, http.StatusBadRequest, apitype.CodeInvalid, "status must be queued, running, complete, failed, cancelled or stranded", map[string]any{"field": "status"})
		return
	}
	limit, cursor, ok := pageParams(w, r)
	if !ok {
		return
	}
	runs, err := s.st.Runs(r.Context(), belay.RunFilter{Session: id, Status: status})
	if err != nil {
		writeError(w, err)
		return
	}
	runs, next, ok := runsPage(runs, cursor, limit)
	if !ok {
		badCursor(w, cursor)
		return
	}
	out := apitype.RunList{Runs: []apitype.Run{}, NextCursor: next}
	for _, run := range runs {
		out.Runs = append(out.Runs, s.withActivity(run))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) createRun(w http.ResponseWriter, r *http.Request) {
	key, ok := idempotencyKey(w, r)
	if !ok {
		return
	}
	var req apitype.CreateRunRequest
	if !decode(w, r, MaxRunBody, &req) {
		return
	}
	if r.PathValue("id") != "" {
		id, ok := pathID(w, r, ids.Session)
		if !ok {
			return
		}
		req.Session = id
	} else if req.Session != "" {
		if err := ids.Check(ids.Session, req.Session); err != nil {
			writeErrorCode(w, http.StatusBadRequest, apitype.CodeInvalid, err.Error(), nil)
			return
		}
	}
	if req.Session == "" && req.Provider == "" {
		writeErrorCode(w, http.StatusBadRequest, apitype.CodeInvalid, "a run needs a session or a provider", nil)
		return
	}
	if req.Deadline < 0 {
		writeErrorCode(w, http.StatusBadRequest, apitype.CodeInvalid, "deadline must not be negative", nil)
		return
	}
	run, err := s.rt.Submit(r.Context(), runtime.SubmitRequest{
		Session: req.Session, Provider: req.Provider, Model: req.Model, Prompt: req.Prompt,
		Script: req.Script, Options: req.Options, Policy: req.Policy, Priority: req.Priority,
		Deadline: time.Duration(req.Deadline), IdempotencyKey: key, Labels: req.Labels,
		Tags: req.Tags, Meta: req.Meta,
	})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, s.withActivity(run))
}

func (s *Server) getRun(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, ids.Run)
	if !ok {
		return
	}
	run, err := s.st.Run(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s.withActivity(run))
}

// waitFor reads the wait/timeout query parameter, capped at MaxWait.
func waitFor(w http.ResponseWriter, r *http.Request, name string) (time.Duration, bool) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return 0, true
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		writeErrorCode(w, http.StatusBadRequest, apitype.CodeInvalid, name+" must be a duration such as 30s", nil)
		return 0, false
	}
	return min(d, MaxWait), true
}

// waitRun long-polls until the run ends or the wait (at most a minute)
// passes; then it answers with the run as it is: a timeout is not an error.
func (s *Server) waitRun(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, ids.Run)
	if !ok {
		return
	}
	d, ok := waitFor(w, r, "timeout")
	if !ok {
		return
	}
	if d > 0 {
		release, ok := s.acquireWatcher(w)
		if !ok {
			return
		}
		defer release()
	}
	ctx, cancel := context.WithTimeout(r.Context(), d)
	defer cancel()
	run, err := s.rt.Wait(ctx, id)
	if err != nil && !errors.Is(err, belay.ErrStillRunning) {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s.withActivity(run))
}

func (s *Server) cancelRun(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, ids.Run)
	if !ok {
		return
	}
	var body struct {
		Reason string `json:"reason,omitempty"`
	}
	if r.ContentLength != 0 && !decode(w, r, MaxBody, &body) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	run, err := s.rt.Cancel(ctx, id, body.Reason)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s.withActivity(run))
}

func (s *Server) doctor(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, ids.Session)
	if !ok {
		return
	}
	rep, err := s.rt.Doctor(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, rep)
}

func (s *Server) daemonDoctor(w http.ResponseWriter, r *http.Request) {
	if s.opts.DaemonDoctor == nil {
		writeErrorCode(w, http.StatusNotFound, apitype.CodeNotFound, "daemon doctor is not available", nil)
		return
	}
	rep, err := s.opts.DaemonDoctor(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, rep)
}

func (s *Server) transcript(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, ids.Session)
	if !ok {
		return
	}
	if s.opts.Export == nil {
		writeErrorCode(w, http.StatusNotFound, apitype.CodeNotFound, "transcript export is not available", nil)
		return
	}
	format := r.URL.Query().Get("format")
	if _, err := s.st.Session(r.Context(), id); err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	stream(w, r, func(sw *streamWriter) error {
		sum, err := s.opts.Export(r.Context(), sw, id, format)
		if sum.Total() > 0 {
			if b, jerr := json.Marshal(sum); jerr == nil {
				w.Header().Set(apitype.TrailerExportNotes, string(b))
			}
		}
		return err
	}, apitype.TrailerExportNotes)
}

func (s *Server) post(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, ids.Session)
	if !ok {
		return
	}
	key, ok := idempotencyKey(w, r)
	if !ok {
		return
	}
	var req apitype.PostRequest
	if !decode(w, r, MaxBody, &req) {
		return
	}
	if req.Key == "" {
		req.Key = key
	}
	d, created, err := s.rt.Post(r.Context(), belay.DeliveryInput{Session: id, Type: req.Type, Key: req.Key, Priority: req.Priority, Data: req.Data, To: req.To, AfterRun: req.AfterRun})
	if err != nil {
		writeError(w, err)
		return
	}
	status := http.StatusCreated
	if !created {
		status = http.StatusOK
	}
	writeJSON(w, status, d)
}

func (s *Server) listInbox(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, ids.Session)
	if !ok {
		return
	}
	status := belay.DeliveryStatus(r.URL.Query().Get("status"))
	if status != "" && !status.Valid() {
		writeErrorCode(w, http.StatusBadRequest, apitype.CodeInvalid, "status must be pending, leased, done or error", map[string]any{"field": "status"})
		return
	}
	limit, cursor, ok := pageParams(w, r)
	if !ok {
		return
	}
	ds, err := s.st.Deliveries(r.Context(), belay.DeliveryFilter{Session: id, Status: status})
	if err != nil {
		writeError(w, err)
		return
	}
	ds, next, ok := deliveriesPage(ds, cursor, limit)
	if !ok {
		badCursor(w, cursor)
		return
	}
	if ds == nil {
		ds = []belay.Delivery{}
	}
	writeJSON(w, http.StatusOK, apitype.DeliveryList{Deliveries: ds, NextCursor: next})
}

func (s *Server) lease(w http.ResponseWriter, r *http.Request) {
	var req apitype.LeaseRequest
	if !decode(w, r, MaxBody, &req) {
		return
	}
	if req.Session != "" {
		if err := ids.Check(ids.Session, req.Session); err != nil {
			writeErrorCode(w, http.StatusBadRequest, apitype.CodeInvalid, err.Error(), nil)
			return
		}
	}
	if req.TTL <= 0 {
		req.TTL = apitype.Duration(time.Minute)
	}
	if req.Max <= 0 {
		req.Max = 1
	}
	wait := min(time.Duration(req.Wait), MaxWait)
	var ds []belay.Delivery
	var err error
	if wait > 0 {
		release, ok := s.acquireWatcher(w)
		if !ok {
			return
		}
		defer release()
	}
	switch {
	case req.To != "" && req.Session != "":
		writeErrorCode(w, http.StatusBadRequest, apitype.CodeInvalid, "an addressed lease (to) covers every session: leave session out", nil)
		return
	case req.To != "":
		ds, err = s.rt.LeaseTo(r.Context(), req.To, req.Owner, time.Duration(req.TTL), min(req.Max, 100), wait)
	default:
		ds, err = s.rt.Lease(r.Context(), req.Session, req.Owner, time.Duration(req.TTL), min(req.Max, 100), wait)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	if ds == nil {
		ds = []belay.Delivery{}
	}
	writeJSON(w, http.StatusOK, apitype.DeliveryList{Deliveries: ds})
}

func (s *Server) settle(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, ids.Delivery)
	if !ok {
		return
	}
	var req apitype.SettleRequest
	if !decode(w, r, MaxBody, &req) {
		return
	}
	d, err := s.rt.Settle(r.Context(), id, belay.Settlement{Kind: req.Kind, Epoch: req.Epoch, Result: req.Result, Delay: time.Duration(req.Delay)})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

func (s *Server) prune(w http.ResponseWriter, r *http.Request) {
	var req apitype.PruneRequest
	if r.ContentLength != 0 && !decode(w, r, MaxBody, &req) {
		return
	}
	rep, err := s.rt.Prune(r.Context(), req.DryRun)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, rep)
}

func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request) {
	force := r.URL.Query().Get("force")
	if force != "" && force != "true" && force != "false" {
		writeErrorCode(w, http.StatusBadRequest, apitype.CodeInvalid, "force must be true or false", nil)
		return
	}
	if err := s.rt.DeleteSession(r.Context(), r.PathValue("id"), force == "true"); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

var _ store.Store // the API reads through the runtime's store

// retryRun creates a new run with the input of a finished one (belay runs
// retry), refused when side effects settled unless allowed.
func (s *Server) retryRun(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, ids.Run)
	if !ok {
		return
	}
	key, ok := idempotencyKey(w, r)
	if !ok {
		return
	}
	var req apitype.RetryRequest
	if r.ContentLength != 0 && !decode(w, r, MaxBody, &req) {
		return
	}
	if req.Policy != "" && !req.Policy.Valid() {
		writeErrorCode(w, http.StatusBadRequest, apitype.CodeInvalid, "policy must be enqueue, reject, interrupt or replace", map[string]any{"field": "policy"})
		return
	}
	run, tools, err := s.rt.Retry(r.Context(), runtime.RetryRequest{Run: id, AllowSideEffects: req.AllowSideEffects, IdempotencyKey: key, Policy: req.Policy})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, apitype.RetryResponse{Run: s.withActivity(run), MayRepeat: tools})
}
