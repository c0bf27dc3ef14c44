package chatsite

import (
	"crypto/rand"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// Mode is what the whole site shows, whatever the conversation.
type Mode string

// Modes. Ready is the working site; the others are the failure stories.
const (
	ModeReady       Mode = "ready"
	ModeLogin       Mode = "login"      // every page redirects to /login
	ModeExpired     Mode = "expired"    // the shell loads, the session expired
	ModeLoggedOut   Mode = "logged-out" // a composer, but a logged-out shell
	ModeChallenge   Mode = "challenge"  // "Just a moment... verify you are human"
	ModeRateLimited Mode = "rate-limited"
	ModeModal       Mode = "modal"  // a blocking dialog over the chat
	ModeOutage      Mode = "outage" // "Something went wrong" instead of the chat
	ModeDrift       Mode = "drift"  // the second UI version: other markup
	Mode5xxOnce     Mode = "5xx-once"
	// ModeAuth is the site behind a login: without the session cookie
	// that the login form sets, pages redirect to /login and the API
	// answers 401.
	ModeAuth Mode = "auth"
)

var modes = []Mode{ModeReady, ModeLogin, ModeExpired, ModeLoggedOut, ModeChallenge, ModeRateLimited, ModeModal, ModeOutage, ModeDrift, Mode5xxOnce, ModeAuth}

// SessionCookie is the cookie the login form of ModeAuth sets.
const SessionCookie = "loopback_session"

// Options configure a Site.
type Options struct {
	// Speed is site seconds per real second (default 1): 60 runs a
	// 30-minute answer in 30 s.
	Speed float64
	// SwitchDelay is how long the page stays on "/" after the first send
	// before it switches to "/c/<id>" (default 300ms, real time).
	SwitchDelay time.Duration
}

// Prompt is one send the server received.
type Prompt struct {
	Conv  string    `json:"conv"`
	Hash  string    `json:"hash"`
	Text  string    `json:"text"`
	Model string    `json:"model"` // the model picker's choice
	Files []string  `json:"files,omitempty"`
	At    time.Time `json:"at"`
}

// Site is a running fake chat site on a loopback port.
type Site struct {
	opts Options
	ln   net.Listener
	srv  *http.Server
	url  string

	// Close ends the handlers still waiting (closing) and waits for them
	// and for Serve (serving): nothing of the site outlives Close.
	hmu      sync.Mutex
	closed   bool
	closing  chan struct{}
	handlers sync.WaitGroup
	serving  chan struct{}

	mu      sync.Mutex
	mode    Mode
	drop    int // sends left to drop silently
	convs   map[string]*conv
	prompts []Prompt
	modalUp bool              // the modal of ModeModal is still shown
	uploads map[string]string // file name -> sha256 of what was uploaded
	logins  map[string]bool   // session cookies the login form gave out
	hold    bool              // answers think until FinishHeld
	limitN  int               // sends left to refuse with the usage cap
	refused int               // sends refused with the usage cap
	tickets map[string]string // download tickets the page asked for -> conv/name
	// served counts the bytes of each page-only artifact served, by
	// name: how far the browser's downloads got.
	served map[string]int64
}

type conv struct {
	id    string
	turns []*turn
}

type turn struct {
	role    string // "user" or "assistant"
	text    string // the user's prompt
	prompt  string // the assistant's prompt
	plan    Plan
	start   time.Time // when generation started (real time)
	stopped time.Time // the user pressed stop
	held    bool      // sent while answers were held: thinks until FinishHeld
}

//go:embed static
var static embed.FS

var pageTmpl = template.Must(template.ParseFS(static, "static/page.html"))

// Start starts a site on 127.0.0.1.
func Start(opts Options) (*Site, error) {
	if opts.Speed <= 0 {
		opts.Speed = 1
	}
	if opts.SwitchDelay <= 0 {
		opts.SwitchDelay = 300 * time.Millisecond
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("chatsite: %w", err)
	}
	s := &Site{opts: opts, ln: ln, closing: make(chan struct{}), serving: make(chan struct{}), mode: ModeReady, convs: map[string]*conv{}, uploads: map[string]string{}, logins: map[string]bool{}, url: "http://" + ln.Addr().String()}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.page)
	mux.HandleFunc("GET /c/{id}", s.page)
	mux.HandleFunc("GET /login", s.login)
	mux.HandleFunc("POST /login", s.doLogin)
	mux.HandleFunc("GET /static/app.js", s.asset)
	mux.HandleFunc("POST /api/send", s.send)
	mux.HandleFunc("POST /api/stop", s.stop)
	mux.HandleFunc("POST /api/retry", s.retry)
	mux.HandleFunc("POST /api/dismiss", s.dismiss)
	mux.HandleFunc("POST /api/upload", s.upload)
	mux.HandleFunc("GET /api/conv/{id}", s.convJSON)
	mux.HandleFunc("GET /files/{conv}/{name}", s.file)
	mux.HandleFunc("POST /files/{conv}/{name}/ticket", s.ticket)
	mux.HandleFunc("POST /_harness/mode", s.harnessMode)
	mux.HandleFunc("POST /_harness/drop", s.harnessDrop)
	mux.HandleFunc("GET /_harness/prompts", s.harnessPrompts)
	mux.HandleFunc("POST /_harness/hold", s.harnessHold)
	mux.HandleFunc("POST /_harness/finish", s.harnessFinish)
	s.srv = &http.Server{Handler: s.track(mux), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(s.serving)
		_ = s.srv.Serve(ln)
	}()
	return s, nil
}

// track counts the handlers running, for Close to wait for.
func (s *Site) track(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hmu.Lock()
		if s.closed {
			s.hmu.Unlock()
			http.Error(w, "chatsite: closing", http.StatusServiceUnavailable)
			return
		}
		s.handlers.Add(1)
		s.hmu.Unlock()
		defer s.handlers.Done()
		h.ServeHTTP(w, r)
	})
}

// URL is the site's root URL, "http://127.0.0.1:PORT".
func (s *Site) URL() string { return s.url }

// Close stops the site and returns once its handlers and server are
// done.
func (s *Site) Close() error {
	s.hmu.Lock()
	if !s.closed {
		s.closed = true
		close(s.closing)
	}
	s.hmu.Unlock()
	err := s.srv.Close()
	<-s.serving
	s.handlers.Wait()
	return err
}

// SetMode switches what the site shows.
func (s *Site) SetMode(m Mode) error {
	if !slices.Contains(modes, m) {
		return fmt.Errorf("chatsite: unknown mode %q", m)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mode = m
	s.modalUp = m == ModeModal
	return nil
}

// DropNext makes the server silently drop the next n sends.
func (s *Site) DropNext(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drop = n
}

// RateLimitNext makes the site refuse the next n sends with its usage
// cap message (HTTP 429), as a site does when the cap is reached between
// loading the page and sending.
func (s *Site) RateLimitNext(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limitN = n
}

// Refused returns how many sends the site refused with its usage cap.
func (s *Site) Refused() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refused
}

// HoldAnswers makes the answers to the prompts sent from now on think
// until FinishHeld, so that a run's deadline passes while the site is
// still working.
func (s *Site) HoldAnswers() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hold = true
}

// FinishHeld ends the hold: every answer that was held finishes at once,
// as a site that finished after belay stopped waiting would.
func (s *Site) FinishHeld() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hold = false
	now := time.Now()
	for _, c := range s.convs {
		for _, t := range c.turns {
			if t.held {
				t.held = false
				total := t.plan.Think + t.plan.Pause + t.plan.Stream
				t.start = now.Add(-time.Duration(float64(total)/s.opts.Speed) - time.Millisecond)
			}
		}
	}
}

// Prompts returns the log of received sends.
func (s *Site) Prompts() []Prompt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.prompts)
}

// Count returns how many times a prompt with this text was received.
func (s *Site) Count(prompt string) int {
	h := Hash(prompt)
	n := 0
	for _, p := range s.Prompts() {
		if p.Hash == h {
			n++
		}
	}
	return n
}

// Answer returns the text the site shows now in the assistant turn that
// answers the i-th prompt (from 0) of conversation id, and whether that
// turn is finished.
func (s *Site) Answer(id string, i int) (text string, done bool, err error) {
	v, err := s.answer(id, i)
	return v.Text, v.State == "done", err
}

// Stopped reports whether the i-th answer of conversation id was stopped
// with the stop control.
func (s *Site) Stopped(id string, i int) (bool, error) {
	v, err := s.answer(id, i)
	return v.Stopped, err
}

func (s *Site) answer(id string, i int) (turnView, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.convs[id]
	if c == nil {
		return turnView{}, fmt.Errorf("chatsite: no conversation %s", id)
	}
	n := -1
	for _, t := range c.turns {
		if t.role != "assistant" {
			continue
		}
		if n++; n == i {
			return s.view(c, t, time.Now()), nil
		}
	}
	return turnView{}, fmt.Errorf("chatsite: conversation %s has no answer %d", id, i)
}

// Conversations returns the ids of the conversations, in no order.
func (s *Site) Conversations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.convs))
	for id := range s.convs {
		out = append(out, id)
	}
	return out
}

// turnView is a turn as the page renders it.
type turnView struct {
	Role  string `json:"role"`
	State string `json:"state,omitempty"` // thinking, streaming, done, error
	Text  string `json:"text"`
	// Markdown is the source of a finished turn, what its copy button
	// copies.
	Markdown string `json:"markdown,omitempty"`
	Stopped  bool   `json:"stopped,omitempty"`
	// StopDelayMS is the real time the page waits, after its stop
	// control is clicked, before it posts the stop.
	StopDelayMS int64      `json:"stopDelayMs,omitempty"`
	ActionBar   bool       `json:"actionBar,omitempty"`
	Artifacts   []artifact `json:"artifacts,omitempty"`
}

type artifact struct {
	Name string `json:"name"`
	Href string `json:"href"`
}

// view computes what an assistant turn shows at now. s.mu is held.
func (s *Site) view(c *conv, t *turn, now time.Time) turnView {
	if t.role == "user" {
		return turnView{Role: "user", Text: t.text}
	}
	at := now
	if !t.stopped.IsZero() {
		at = t.stopped
	}
	e := time.Duration(float64(at.Sub(t.start)) * s.opts.Speed)
	p := t.plan
	toks := tokens(t.prompt, p.Words)
	v := turnView{Role: "assistant", Stopped: !t.stopped.IsZero()}
	v.StopDelayMS = time.Duration(float64(p.StopDelay) / s.opts.Speed).Milliseconds()
	if t.held && t.stopped.IsZero() {
		// Held: the answer thinks until FinishHeld.
		v.State = "thinking"
		return v
	}
	switch {
	case e < p.Think:
		v.State, v.Text = "thinking", ""
		// The action bar flashes once mid-thinking: a decoy for a
		// completion rule that trusts one poll.
		mid := p.Think / 2
		v.ActionBar = e >= mid && e < mid+max(p.Think/20, time.Duration(float64(150*time.Millisecond)*s.opts.Speed))
	case p.Error:
		v.State, v.Text = "error", ""
	case e < p.Think+p.Pause:
		v.State, v.Text, v.Markdown = "streaming", toks[0], markdown(toks[:1])
	case e < p.Think+p.Pause+p.Stream:
		n := 1 + int(float64(len(toks)-1)*float64(e-p.Think-p.Pause)/float64(p.Stream))
		v.State, v.Text, v.Markdown = "streaming", strings.Join(toks[:n], ""), markdown(toks[:n])
	default:
		v.State, v.Text, v.Markdown, v.ActionBar = "done", strings.Join(toks, ""), markdown(toks), true
		for _, a := range p.Artifact {
			href := "/files/" + c.id + "/" + a
			if strings.HasPrefix(a, "page-") {
				// As ChatGPT's sandbox links: no URL to fetch, the page's
				// script makes the download when the link is clicked.
				href = "sandbox:/mnt/data/" + a
			}
			v.Artifacts = append(v.Artifacts, artifact{Name: a, Href: href})
		}
	}
	if !t.stopped.IsZero() && v.State != "done" && v.State != "error" {
		v.State, v.ActionBar = "done", true
	}
	if v.State != "done" {
		v.Markdown = "" // only a finished turn has a copy button
	}
	return v
}

type pageData struct {
	Mode      Mode
	Drift     bool
	LoggedOut bool
	Expired   bool
	Limited   bool
	Modal     bool
	// SwitchDelay is in milliseconds.
	SwitchDelay int64
}

func (s *Site) page(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	mode, modal := s.mode, s.modalUp
	if mode == Mode5xxOnce {
		s.mode = ModeReady
	}
	authed := s.authed(r)
	s.mu.Unlock()
	switch {
	case mode == ModeLogin, mode == ModeAuth && !authed:
		http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.Path), http.StatusFound)
		return
	}
	switch mode {
	case ModeChallenge:
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, `<!doctype html><html><head><title>Just a moment...</title></head><body>
<h1>Just a moment...</h1><p>Verify you are human by completing the action below.</p>
<div class="cf-turnstile" id="challenge-form"></div></body></html>`)
		return
	case Mode5xxOnce:
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusBadGateway)
		fmt.Fprint(w, `<!doctype html><html><head><title>502 Bad Gateway</title></head><body><h1>Bad gateway</h1><p>Something went wrong. Please try again.</p></body></html>`)
		return
	case ModeOutage:
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><html><head><title>Loopback Chat</title></head><body><div role="alert"><p>Something went wrong.</p><p>A network error occurred. Try again later.</p><button>Try again</button></div></body></html>`)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = pageTmpl.Execute(w, pageData{
		Mode: mode, Drift: mode == ModeDrift, LoggedOut: mode == ModeLoggedOut,
		Expired: mode == ModeExpired, Limited: mode == ModeRateLimited, Modal: modal,
		SwitchDelay: s.opts.SwitchDelay.Milliseconds(),
	})
}

func (s *Site) login(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	next := r.URL.Query().Get("next")
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") {
		next = "/"
	}
	fmt.Fprintf(w, `<!doctype html><html><head><title>Log in - Loopback Chat</title></head><body>
<h1>Welcome back</h1><form method="post" action="/login"><input type="hidden" name="next" value="%s">
<button id="login" type="submit">Log in</button></form><button>Sign up</button><button>Continue with Google</button></body></html>`, template.HTMLEscapeString(next))
}

// doLogin is the login form's post: it gives out a session cookie that
// lasts a day (so a browser profile keeps it across restarts) and goes
// back to the page that asked for the login.
func (s *Site) doLogin(w http.ResponseWriter, r *http.Request) {
	next := r.FormValue("next")
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") {
		next = "/"
	}
	tok := newID()
	s.mu.Lock()
	s.logins[tok] = true
	s.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: tok, Path: "/", MaxAge: 86400, HttpOnly: true, SameSite: http.SameSiteLaxMode})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// Logins returns how many logins the form has given out.
func (s *Site) Logins() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.logins)
}

// authed reports whether a request may use the site: always, unless the
// site is in ModeAuth and the request lacks a cookie the login form gave
// out. s.mu is held.
func (s *Site) authed(r *http.Request) bool {
	if s.mode != ModeAuth {
		return true
	}
	c, err := r.Cookie(SessionCookie)
	return err == nil && s.logins[c.Value]
}

func (s *Site) asset(w http.ResponseWriter, r *http.Request) {
	b, err := static.ReadFile("static/app.js")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/javascript")
	_, _ = w.Write(b)
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func (s *Site) send(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Conv  string   `json:"conv"`
		Text  string   `json:"text"`
		Model string   `json:"model"`
		Files []string `json:"files"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil || strings.TrimSpace(req.Text) == "" {
		http.Error(w, "bad send", http.StatusBadRequest)
		return
	}
	plan, err := ParsePlan(req.Text)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.authed(r) {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "Log in to continue."})
		return
	}
	limited := s.mode == ModeRateLimited || s.limitN > 0
	if s.limitN > 0 {
		s.limitN--
	}
	if limited {
		s.refused++
	}
	switch {
	case limited:
		writeJSON(w, http.StatusTooManyRequests, map[string]string{"error": "You've reached the current usage cap. Try again later."})
		return
	case s.mode == ModeExpired, s.mode == ModeLoggedOut, s.mode == ModeLogin:
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "Your session has expired. Log in again."})
		return
	}
	if s.drop > 0 {
		s.drop--
		writeJSON(w, http.StatusOK, map[string]string{"conv": req.Conv})
		return
	}
	c := s.convs[req.Conv]
	if c == nil {
		if req.Conv != "" {
			http.Error(w, "no such conversation", http.StatusNotFound)
			return
		}
		c = &conv{id: newID()}
		s.convs[c.id] = c
	}
	if n := len(c.turns); n > 0 {
		if v := s.view(c, c.turns[n-1], time.Now()); v.State == "thinking" || v.State == "streaming" {
			writeJSON(w, http.StatusConflict, map[string]string{"error": "wait for the answer to finish"})
			return
		}
	}
	now := time.Now()
	c.turns = append(c.turns, &turn{role: "user", text: req.Text}, &turn{role: "assistant", prompt: req.Text, plan: plan, start: now, held: s.hold})
	s.prompts = append(s.prompts, Prompt{Conv: c.id, Hash: Hash(req.Text), Text: req.Text, Model: req.Model, Files: req.Files, At: now})
	writeJSON(w, http.StatusOK, map[string]string{"conv": c.id})
}

// lastAssistant returns the conversation's last turn if it is the
// assistant's. s.mu is held.
func (s *Site) lastAssistant(r *http.Request) (*conv, *turn) {
	var req struct {
		Conv string `json:"conv"`
	}
	if json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&req) != nil {
		return nil, nil
	}
	c := s.convs[req.Conv]
	if c == nil || len(c.turns) == 0 || c.turns[len(c.turns)-1].role != "assistant" {
		return nil, nil
	}
	return c, c.turns[len(c.turns)-1]
}

func (s *Site) stop(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, t := s.lastAssistant(r)
	if t == nil {
		http.Error(w, "nothing to stop", http.StatusNotFound)
		return
	}
	if t.stopped.IsZero() {
		t.stopped = time.Now()
	}
	writeJSON(w, http.StatusOK, map[string]string{"conv": c.id})
}

// retry regenerates an error turn: the same prompt, answered again (this
// time without the error).
func (s *Site) retry(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, t := s.lastAssistant(r)
	if t == nil || s.view(c, t, time.Now()).State != "error" {
		http.Error(w, "nothing to retry", http.StatusConflict)
		return
	}
	t.plan.Error, t.start = false, time.Now()
	writeJSON(w, http.StatusOK, map[string]string{"conv": c.id})
}

// Uploads returns the sha256 of each uploaded file, by name.
func (s *Site) Uploads() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]string, len(s.uploads))
	for k, v := range s.uploads {
		out[k] = v
	}
	return out
}

// upload takes a file in 2 s of site time; a name starting with "fail"
// fails.
func (s *Site) upload(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("name")
	b, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if err != nil || name == "" {
		http.Error(w, "bad upload", http.StatusBadRequest)
		return
	}
	select {
	case <-time.After(time.Duration(float64(2*time.Second) / s.opts.Speed)):
	case <-s.closing:
		return
	case <-r.Context().Done():
		return
	}
	if strings.HasPrefix(name, "fail") {
		http.Error(w, "upload failed", http.StatusInternalServerError)
		return
	}
	s.mu.Lock()
	s.uploads[name] = Hash(string(b))
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (s *Site) dismiss(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.modalUp = false
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (s *Site) convJSON(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mode == ModeExpired || !s.authed(r) {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "Your session has expired. Log in again."})
		return
	}
	c := s.convs[r.PathValue("id")]
	if c == nil {
		http.Error(w, "no such conversation", http.StatusNotFound)
		return
	}
	now := time.Now()
	out := struct {
		ID    string     `json:"id"`
		Turns []turnView `json:"turns"`
	}{ID: c.id}
	for _, t := range c.turns {
		out.Turns = append(out.Turns, s.view(c, t, now))
	}
	writeJSON(w, http.StatusOK, out)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Site) harnessMode(w http.ResponseWriter, r *http.Request) {
	if err := s.SetMode(Mode(r.URL.Query().Get("m"))); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Site) harnessDrop(w http.ResponseWriter, r *http.Request) {
	s.DropNext(1)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Site) harnessPrompts(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.Prompts())
}

func (s *Site) harnessHold(w http.ResponseWriter, r *http.Request) {
	s.HoldAnswers()
	w.WriteHeader(http.StatusNoContent)
}

func (s *Site) harnessFinish(w http.ResponseWriter, r *http.Request) {
	s.FinishHeld()
	w.WriteHeader(http.StatusNoContent)
}

var errNoFile = errors.New("chatsite: no such file")

// File returns the content of an artifact and, for the ones that fail,
// an error.
//
// Artifact names choose how they are served: "slow.bin" trickles over 45
// s of site time, "broken.bin" breaks off half way, "*.blob.txt" is made
// in the page as a blob: URL. A name starting with "page-" is a link the
// page's script turns into a download when clicked (its href is a
// sandbox: URL, as ChatGPT's): the file is served only with a ticket the
// page asks for. A name starting with "gated-" has a plain URL that
// refuses (403) any request but a browser's own same-origin navigation
// (Sec-Fetch-Site: same-origin), as a signed CDN link that a fetch from
// outside the page cannot use. "page-slow.bin" and "page-broken.bin"
// combine them.
func File(conv, name string) ([]byte, error) {
	base := strings.TrimPrefix(strings.TrimPrefix(name, "page-"), "gated-")
	if base == "broken.bin" {
		return nil, errNoFile
	}
	if strings.HasSuffix(name, ".blob.txt") {
		return []byte("blob artifact " + name), nil
	}
	h := Hash(conv + "/" + name)
	size := 64 << 10
	if base == "slow.bin" {
		size = 256 << 10
	}
	out := make([]byte, 0, size)
	for len(out) < size {
		out = append(out, h...)
		h = Hash(h)
	}
	return out[:size], nil
}

// ticket gives the page a one-time URL of a "page-" artifact: only the
// page's script asks for one (it sends X-Chat-Page).
func (s *Site) ticket(w http.ResponseWriter, r *http.Request) {
	cid, name := r.PathValue("conv"), r.PathValue("name")
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.convs[cid]; !ok || !s.authed(r) || r.Header.Get("X-Chat-Page") != "1" || !strings.HasPrefix(name, "page-") {
		http.Error(w, "forbidden", http.StatusForbidden)
		return
	}
	t := newID()
	if s.tickets == nil {
		s.tickets = map[string]string{}
	}
	s.tickets[t] = cid + "/" + name
	writeJSON(w, http.StatusOK, map[string]string{"url": "/files/" + cid + "/" + name + "?ticket=" + t})
}

// Served returns how many bytes of the page-only or gated artifact name
// the site served in all (its downloads by the browser).
func (s *Site) Served(name string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.served[name]
}

// file serves an artifact (see File).
func (s *Site) file(w http.ResponseWriter, r *http.Request) {
	cid, name := r.PathValue("conv"), r.PathValue("name")
	s.mu.Lock()
	_, ok := s.convs[cid]
	ok = ok && s.authed(r)
	gate := ""
	switch {
	case strings.HasPrefix(name, "page-"):
		t := r.URL.Query().Get("ticket")
		if s.tickets[t] != cid+"/"+name {
			gate = "no ticket"
		}
		delete(s.tickets, t)
	case strings.HasPrefix(name, "gated-"):
		if r.Header.Get("Sec-Fetch-Site") != "same-origin" {
			gate = "not the page's own navigation"
		}
	}
	s.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	if gate != "" {
		http.Error(w, "forbidden: "+gate, http.StatusForbidden)
		return
	}
	if strings.HasPrefix(name, "page-") || strings.HasPrefix(name, "gated-") {
		w = &countingWriter{ResponseWriter: w, site: s, name: name}
	}
	base := strings.TrimPrefix(strings.TrimPrefix(name, "page-"), "gated-")
	if base == "broken.bin" {
		w.Header().Set("Content-Length", "65536")
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(make([]byte, 1000))
		panic(http.ErrAbortHandler) // the connection breaks off
	}
	b, err := File(cid, name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="`+name+`"`)
	w.Header().Set("Content-Length", fmt.Sprint(len(b)))
	if base != "slow.bin" {
		_, _ = w.Write(b)
		return
	}
	const chunks = 16
	per := time.Duration(float64(45*time.Second) / s.opts.Speed / chunks)
	fl, _ := w.(http.Flusher)
	for i := range chunks {
		_, _ = w.Write(b[i*len(b)/chunks : (i+1)*len(b)/chunks])
		if fl != nil {
			fl.Flush()
		}
		select {
		case <-time.After(per):
		case <-s.closing:
			return
		case <-r.Context().Done():
			return
		}
	}
}

// countingWriter counts what the site serves of an artifact.
type countingWriter struct {
	http.ResponseWriter
	site *Site
	name string
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.ResponseWriter.Write(b)
	c.site.mu.Lock()
	if c.site.served == nil {
		c.site.served = map[string]int64{}
	}
	c.site.served[c.name] += int64(n)
	c.site.mu.Unlock()
	return n, err
}

func (c *countingWriter) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
