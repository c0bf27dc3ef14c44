// Package client is the typed Go client of belay's HTTP API v1. The CLI
// talks to the daemon only through it, over the daemon's unix socket or
// over TCP with a bearer token. It imports only the vocabulary (packages
// belay and apitype), never the server, the runtime or a store
// (docs/architecture.md).
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
)

// Client talks to one daemon.
type Client struct {
	base  string // "http://belay" for a socket, or the TCP base URL
	addr  string // the socket path or base URL, for messages
	token string
	hc    *http.Client
}

// Options say how to reach the daemon: a unix socket, or a base URL
// ("http://127.0.0.1:7070") with a token.
type Options struct {
	Socket  string
	BaseURL string
	Token   string
}

// New returns a client.
func New(opts Options) *Client {
	tr := &http.Transport{
		MaxIdleConns: 16, IdleConnTimeout: 30 * time.Second,
		ResponseHeaderTimeout: 0, // long polls and streams wait by design
		ReadBufferSize:        64 << 10,
	}
	base := strings.TrimRight(opts.BaseURL, "/")
	addr := base
	if opts.Socket != "" {
		addr = opts.Socket
		sock := opts.Socket
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}
		base = "http://belay"
	}
	return &Client{base: base, addr: addr, token: opts.Token, hc: &http.Client{Transport: tr}}
}

// Error is an error response of the API.
type Error struct {
	Status  int
	Code    string
	Message string
	Details map[string]any
	// RetryAfter is the wait a 503 overloaded answer asked for.
	RetryAfter time.Duration
	// health is the body of a degraded /healthz (503).
	health *apitype.Health
}

// ErrOverloaded matches an answer that the daemon is at its connection or
// watcher limit (errors.Is); the request was not processed.
var ErrOverloaded = errors.New("client: the daemon is overloaded")

func (e *Error) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("the daemon answered HTTP %d %s without a message", e.Status, e.Code)
	}
	return e.Message
}

// Is maps API codes onto belay's sentinel errors, so callers can use
// errors.Is(err, belay.ErrNotFound) across the wire.
func (e *Error) Is(target error) bool {
	switch e.Code {
	case apitype.CodeInvalid:
		return target == belay.ErrInvalid
	case apitype.CodeNotFound:
		return target == belay.ErrNotFound
	case apitype.CodeExists:
		return target == belay.ErrExists
	case apitype.CodeStaleEpoch:
		return target == belay.ErrStaleEpoch
	case apitype.CodeLeaseExpired:
		return target == belay.ErrLeaseExpired || target == belay.ErrStaleEpoch
	case apitype.CodeLeaseHeld:
		return target == belay.ErrLeaseHeld
	case apitype.CodeNotLeased:
		return target == belay.ErrNotLeased
	case apitype.CodeTerminal:
		return target == belay.ErrTerminal
	case apitype.CodeConversationBusy:
		return target == belay.ErrActive
	case apitype.CodeReadOnly:
		return target == belay.ErrReadOnly
	case apitype.CodeDiskFull:
		return target == belay.ErrDiskFull
	case apitype.CodeUnavailable:
		return target == belay.ErrStoreClosed
	case apitype.CodeStoreUnreachable:
		return target == belay.ErrStoreUnreachable
	case apitype.CodeSideEffects:
		return target == belay.ErrSideEffects
	case apitype.CodeOverloaded:
		return target == ErrOverloaded
	case apitype.CodeTooLarge:
		return target == belay.ErrTooLarge
	}
	return false
}

// UnreachableError says the daemon did not answer.
type UnreachableError struct {
	// Addr is the socket path or base URL tried.
	Addr string
	Err  error
}

// Error says where and why in words, not as a raw network error.
func (e *UnreachableError) Error() string {
	msg := "the belay daemon is not reachable"
	if e.Addr != "" {
		msg += " at " + e.Addr
	}
	return msg + " (" + why(e.Err) + ")"
}
func (e *UnreachableError) Unwrap() error { return e.Err }

// why describes a failure to reach the daemon.
func why(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ENOENT):
		return "no socket there: no daemon is running"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused: no daemon is listening"
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return "permission denied: the socket belongs to another user"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "the connection broke: the daemon stopped or restarted"
	case errors.As(err, &ne) && ne.Timeout():
		return "it did not answer in time"
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return "unknown host " + dns.Name
	}
	return "cannot connect"
}

func (c *Client) unreachable(err error) error {
	return &UnreachableError{Addr: c.addr, Err: err}
}

// IsUnreachable reports whether err means no daemon answered.
func IsUnreachable(err error) bool {
	var u *UnreachableError
	return errors.As(err, &u)
}

// overloadRetries is how many times a request the daemon refused as
// overloaded (and so did not process) is sent again, after the wait it
// asked for.
const overloadRetries = 3

// do sends a request and decodes a JSON answer into out (if not nil).
func (c *Client) do(ctx context.Context, method, path string, hdr http.Header, in, out any) error {
	var payload []byte
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		payload = b
	}
	for attempt := 0; ; attempt++ {
		err := c.once(ctx, method, path, hdr, payload, in != nil, out)
		var e *Error
		if attempt == overloadRetries || !errors.As(err, &e) || e.Code != apitype.CodeOverloaded {
			return err
		}
		t := time.NewTimer(min(max(e.RetryAfter, 100*time.Millisecond), 2*time.Second))
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

func (c *Client) once(ctx context.Context, method, path string, hdr http.Header, payload []byte, hasBody bool, out any) error {
	var body io.Reader
	if hasBody {
		body = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if hasBody {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return c.unreachable(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return decodeError(resp)
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if w, ok := out.(io.Writer); ok {
		_, err := io.Copy(w, resp.Body)
		return err
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("client: decode %s %s: %w", method, path, err)
	}
	return nil
}

func decodeError(resp *http.Response) error {
	var e apitype.Error
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if json.Unmarshal(raw, &e) != nil || e.Error.Code == "" {
		var h apitype.Health
		if resp.StatusCode == http.StatusServiceUnavailable && json.Unmarshal(raw, &h) == nil && h.Status == apitype.HealthDegraded {
			return &Error{Status: resp.StatusCode, Code: apitype.CodeStoreUnreachable, Message: "the daemon is degraded: " + strings.Join(h.Problems, "; "), health: &h}
		}
		return &Error{Status: resp.StatusCode, Code: apitype.CodeInternal, Message: fmt.Sprintf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(raw)))}
	}
	out := &Error{Status: resp.StatusCode, Code: e.Error.Code, Message: e.Error.Message, Details: e.Error.Details}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
		out.RetryAfter = time.Duration(s) * time.Second
	}
	return out
}

func keyHeader(key string) http.Header {
	h := http.Header{}
	if key != "" {
		h.Set("Idempotency-Key", key)
	}
	return h
}

// Health checks the daemon. A daemon that accepts the connection but does
// not answer before ctx's deadline (stopped, wedged) is unreachable too. A
// degraded daemon (it answers, but cannot write: its store is
// unreachable) is not an error: the Health says so (Status
// apitype.HealthDegraded, Problems).
func (c *Client) Health(ctx context.Context) (apitype.Health, error) {
	var h apitype.Health
	err := c.do(ctx, http.MethodGet, "/healthz", nil, nil, &h)
	var e *Error
	if errors.As(err, &e) && e.health != nil {
		return *e.health, nil
	}
	if errors.Is(err, context.DeadlineExceeded) {
		err = &UnreachableError{Err: fmt.Errorf("no answer to a health check: %w", err)}
	}
	return h, err
}

// CreateSession creates a session; key makes it idempotent.
func (c *Client) CreateSession(ctx context.Context, req apitype.CreateSessionRequest, key string) (belay.Session, error) {
	var s belay.Session
	return s, c.do(ctx, http.MethodPost, "/v1/sessions", keyHeader(key), req, &s)
}

// Session returns one session.
func (c *Client) Session(ctx context.Context, id string) (belay.Session, error) {
	var s belay.Session
	return s, c.do(ctx, http.MethodGet, "/v1/sessions/"+url.PathEscape(id), nil, nil, &s)
}

// Sessions lists sessions, newest first, following the pages of the
// list up to f.Limit sessions (all of them if 0).
func (c *Client) Sessions(ctx context.Context, f belay.SessionFilter) ([]belay.Session, error) {
	var all []belay.Session
	cursor := f.Before
	for {
		page, err := c.SessionsPage(ctx, f, cursor)
		all = append(all, page.Sessions...)
		if err != nil || page.NextCursor == "" || f.Limit > 0 && len(all) >= f.Limit {
			if f.Limit > 0 && len(all) > f.Limit {
				all = all[:f.Limit]
			}
			return all, err
		}
		cursor = page.NextCursor
	}
}

// SessionsPage returns one page of sessions after cursor ("" for the
// first): at most f.Limit (the daemon's default page if 0), and the next
// page's cursor.
func (c *Client) SessionsPage(ctx context.Context, f belay.SessionFilter, cursor string) (apitype.SessionList, error) {
	q := url.Values{}
	if f.State != "" {
		q.Set("state", string(f.State))
	}
	if f.Provider != "" {
		q.Set("provider", f.Provider)
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(min(f.Limit, apitype.MaxPage)))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	var out apitype.SessionList
	return out, c.do(ctx, http.MethodGet, "/v1/sessions?"+q.Encode(), nil, nil, &out)
}

// Runs lists a session's runs in creation order, following the pages.
func (c *Client) Runs(ctx context.Context, session string) ([]apitype.Run, error) {
	var all []apitype.Run
	cursor := ""
	for {
		q := url.Values{"limit": {strconv.Itoa(apitype.MaxPage)}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var out apitype.RunList
		err := c.do(ctx, http.MethodGet, "/v1/sessions/"+url.PathEscape(session)+"/runs?"+q.Encode(), nil, nil, &out)
		all = append(all, out.Runs...)
		if err != nil || out.NextCursor == "" {
			return all, err
		}
		cursor = out.NextCursor
	}
}

// ListRuns lists runs across sessions, one page at a time: pass the
// NextCursor of a page as q.Cursor for the next.
func (c *Client) ListRuns(ctx context.Context, q apitype.RunQuery) (apitype.RunPage, error) {
	var out apitype.RunPage
	return out, c.do(ctx, http.MethodGet, "/v1/runs?"+url.Values(q.Values()).Encode(), nil, nil, &out)
}

// CreateRun submits a run; key makes it idempotent.
func (c *Client) CreateRun(ctx context.Context, req apitype.CreateRunRequest, key string) (apitype.Run, error) {
	var r apitype.Run
	return r, c.do(ctx, http.MethodPost, "/v1/runs", keyHeader(key), req, &r)
}

// CreateRuns submits runs in one request (POST /v1/runs:batch, at most
// api.MaxBatchRuns): each has its own idempotency key, and the results
// come back in the order given, each with its run or its error (AsError
// turns one into an error). The error is for the batch as a whole: too
// large, daemon unreachable.
func (c *Client) CreateRuns(ctx context.Context, runs []apitype.BatchRun) ([]apitype.BatchResult, error) {
	var out apitype.BatchResponse
	if err := c.do(ctx, http.MethodPost, "/v1/runs:batch", nil, apitype.BatchRequest{Runs: runs}, &out); err != nil {
		return nil, err
	}
	if len(out.Results) != len(runs) {
		return nil, fmt.Errorf("client: the daemon answered %d results for %d runs", len(out.Results), len(runs))
	}
	return out.Results, nil
}

// AsError returns the error of one result of a batch (nil if it made a
// run), matching belay's sentinels like any API error.
func AsError(r apitype.BatchResult) error {
	if r.Error == nil {
		return nil
	}
	return &Error{Status: r.Status, Code: r.Error.Code, Message: r.Error.Message, Details: r.Error.Details}
}

// Run returns one run.
func (c *Client) Run(ctx context.Context, id string) (apitype.Run, error) {
	var r apitype.Run
	return r, c.do(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(id), nil, nil, &r)
}

// WaitRun long-polls until the run ends or timeout (at most a minute)
// passes, and returns the run as it is then.
func (c *Client) WaitRun(ctx context.Context, id string, timeout time.Duration) (apitype.Run, error) {
	var r apitype.Run
	return r, c.do(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(id)+"/wait?timeout="+timeout.String(), nil, nil, &r)
}

// CancelRun cancels a run.
func (c *Client) CancelRun(ctx context.Context, id, reason string) (apitype.Run, error) {
	var r apitype.Run
	var body any
	if reason != "" {
		body = map[string]string{"reason": reason}
	}
	return r, c.do(ctx, http.MethodPost, "/v1/runs/"+url.PathEscape(id)+"/cancel", nil, body, &r)
}

// Events long-polls a page of a session's events after seq after.
func (c *Client) Events(ctx context.Context, session string, after uint64, limit int, wait time.Duration) (apitype.EventList, error) {
	q := url.Values{"after": {strconv.FormatUint(after, 10)}}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if wait > 0 {
		q.Set("wait", wait.String())
	}
	var out apitype.EventList
	return out, c.do(ctx, http.MethodGet, "/v1/sessions/"+url.PathEscape(session)+"/events?"+q.Encode(), nil, nil, &out)
}

// Doctor diagnoses a session.
func (c *Client) Doctor(ctx context.Context, session string) (apitype.DoctorReport, error) {
	var r apitype.DoctorReport
	return r, c.do(ctx, http.MethodGet, "/v1/sessions/"+url.PathEscape(session)+"/doctor", nil, nil, &r)
}

// DaemonDoctor reports on the daemon, its store and locks.
func (c *Client) DaemonDoctor(ctx context.Context) (json.RawMessage, error) {
	var r json.RawMessage
	return r, c.do(ctx, http.MethodGet, "/v1/doctor", nil, nil, &r)
}

// Transcript writes a session's transcript in a format to w.
func (c *Client) Transcript(ctx context.Context, session, format string, w io.Writer) (apitype.ExportSummary, error) {
	var sum apitype.ExportSummary
	tr, err := c.streamTrailer(ctx, "/v1/sessions/"+url.PathEscape(session)+"/transcript?format="+url.QueryEscape(format), w)
	if v := tr.Get(apitype.TrailerExportNotes); v != "" {
		if jerr := json.Unmarshal([]byte(v), &sum); jerr != nil && err == nil {
			err = fmt.Errorf("client: the export's notes do not decode: %w", jerr)
		}
	}
	return sum, err
}

// Answer writes a run's answer text as it is now to w, streamed: memory
// does not grow with the answer. It fails if the stream did not end whole
// (a damaged journal, a lost connection), after writing what came.
func (c *Client) Answer(ctx context.Context, run string, w io.Writer) error {
	return c.stream(ctx, "/v1/runs/"+url.PathEscape(run)+"/answer", w)
}

// ErrCutOff says a streamed body ended without its status trailer.
var ErrCutOff = errors.New("client: the stream ended before its end (connection lost)")

// stream copies a streamed body to w and checks its status trailer.
func (c *Client) stream(ctx context.Context, path string, w io.Writer) error {
	_, err := c.streamTrailer(ctx, path, w)
	return err
}

// streamTrailer is stream that also returns the body's trailers (nil
// when there was no body).
func (c *Client) streamTrailer(ctx context.Context, path string, w io.Writer) (http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, &UnreachableError{Err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return nil, decodeError(resp)
	}
	buf := make([]byte, 256<<10)
	if _, err := io.CopyBuffer(w, struct{ io.Reader }{resp.Body}, buf); err != nil {
		if ctx.Err() != nil {
			return resp.Trailer, context.Cause(ctx)
		}
		return resp.Trailer, err
	}
	switch resp.Trailer.Get(apitype.TrailerStatus) {
	case "ok":
		return resp.Trailer, nil
	case "error":
		var e apitype.ErrorBody
		if json.Unmarshal([]byte(resp.Trailer.Get(apitype.TrailerError)), &e) != nil || e.Code == "" {
			e = apitype.ErrorBody{Code: apitype.CodeInternal, Message: "the daemon stopped the stream: " + resp.Trailer.Get(apitype.TrailerError)}
		}
		return resp.Trailer, &Error{Status: resp.StatusCode, Code: e.Code, Message: e.Message}
	}
	return resp.Trailer, ErrCutOff
}

// Post adds an item to a session's inbox.
func (c *Client) Post(ctx context.Context, session string, req apitype.PostRequest) (belay.Delivery, error) {
	var d belay.Delivery
	return d, c.do(ctx, http.MethodPost, "/v1/sessions/"+url.PathEscape(session)+"/inbox", nil, req, &d)
}

// Inbox lists a session's inbox in delivery order, following the pages.
func (c *Client) Inbox(ctx context.Context, session string, status belay.DeliveryStatus) ([]belay.Delivery, error) {
	var all []belay.Delivery
	cursor := ""
	for {
		q := url.Values{"status": {string(status)}, "limit": {strconv.Itoa(apitype.MaxPage)}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var out apitype.DeliveryList
		err := c.do(ctx, http.MethodGet, "/v1/sessions/"+url.PathEscape(session)+"/inbox?"+q.Encode(), nil, nil, &out)
		all = append(all, out.Deliveries...)
		if err != nil || out.NextCursor == "" {
			return all, err
		}
		cursor = out.NextCursor
	}
}

// Lease leases deliverable items, waiting up to req.Wait.
func (c *Client) Lease(ctx context.Context, req apitype.LeaseRequest) ([]belay.Delivery, error) {
	var out apitype.DeliveryList
	return out.Deliveries, c.do(ctx, http.MethodPost, "/v1/inbox/lease", nil, req, &out)
}

// Settle acks, releases or retries a leased item.
func (c *Client) Settle(ctx context.Context, id string, req apitype.SettleRequest) (belay.Delivery, error) {
	var d belay.Delivery
	return d, c.do(ctx, http.MethodPost, "/v1/inbox/"+url.PathEscape(id)+"/settle", nil, req, &d)
}

// DeleteSession deletes one session (DELETE /v1/sessions/{id}); force
// deletes it with unsettled deliveries too.
func (c *Client) DeleteSession(ctx context.Context, id string, force bool) error {
	path := "/v1/sessions/" + url.PathEscape(id)
	if force {
		path += "?force=true"
	}
	return c.do(ctx, http.MethodDelete, path, nil, nil, nil)
}

// Prune prunes sessions by the daemon's retention policy.
func (c *Client) Prune(ctx context.Context, dryRun bool) (belay.PruneReport, error) {
	var r belay.PruneReport
	return r, c.do(ctx, http.MethodPost, "/v1/prune", nil, apitype.PruneRequest{DryRun: dryRun}, &r)
}

// RetryRun creates a new run with the input of a finished run; key
// defaults to "retry-" + id on the daemon.
func (c *Client) RetryRun(ctx context.Context, id string, req apitype.RetryRequest, key string) (apitype.RetryResponse, error) {
	var r apitype.RetryResponse
	return r, c.do(ctx, http.MethodPost, "/v1/runs/"+url.PathEscape(id)+"/retry", keyHeader(key), req, &r)
}
