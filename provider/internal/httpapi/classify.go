package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/provider"
)

// APIError is the error object of an OpenAI-style body
// ({"error":{"message","type","code","param"}}) or an Anthropic-style one
// ({"type":"error","error":{"type","message"}}); both share the shape.
type APIError struct {
	Type    string `json:"type"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// UnmarshalJSON accepts a code that is a number or null as well as a
// string (some OpenAI-compatible servers send numbers).
func (e *APIError) UnmarshalJSON(b []byte) error {
	var raw struct {
		Type    string          `json:"type"`
		Code    json.RawMessage `json:"code"`
		Message string          `json:"message"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	e.Type, e.Message = raw.Type, raw.Message
	var s string
	if json.Unmarshal(raw.Code, &s) == nil {
		e.Code = s
	} else if len(raw.Code) > 0 && string(raw.Code) != "null" {
		e.Code = string(raw.Code)
	}
	return nil
}

// ParseError extracts the error object of a response body. It returns the
// zero APIError when the body is not a known error shape; an error that is
// a bare string ({"error":"..."}, as some local servers send) becomes the
// message.
func ParseError(body []byte) APIError {
	var env struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
	}
	if json.Unmarshal(body, &env) != nil {
		return APIError{}
	}
	var e APIError
	if len(env.Error) > 0 && json.Unmarshal(env.Error, &e) != nil {
		var s string
		if json.Unmarshal(env.Error, &s) == nil {
			e.Message = s
		}
	}
	if e.Message == "" {
		e.Message = env.Message
	}
	return e
}

// Context-overflow markers. OpenAI sends a code; Anthropic only a 400
// message, so for a 400 (or a stream error of type invalid_request_error)
// the message is checked too.
var overflowCodes = map[string]bool{
	"context_length_exceeded":       true,
	"model_context_window_exceeded": true,
	"string_above_max_length":       true,
}

var overflowMessages = []string{
	"prompt is too long",
	"maximum context length",
	"context length exceeded",
	"context_length_exceeded",
	"exceeds the context window",
	"context window",
	"too many tokens",
}

func isOverflow(e APIError) bool {
	if overflowCodes[e.Code] || overflowCodes[e.Type] {
		return true
	}
	msg := strings.ToLower(e.Message)
	for _, m := range overflowMessages {
		if strings.Contains(msg, m) {
			return true
		}
	}
	return false
}

// Quota and billing failures are not retryable and need a person: they
// are their own class, quota (not auth: the key is fine).
var quotaCodes = map[string]bool{
	"insufficient_quota": true,
	"billing_error":      true,
	"billing_not_active": true,
}

// ClassifyStatus maps an HTTP status and its error body to a class.
func ClassifyStatus(status int, e APIError) belay.ErrorClass {
	if quotaCodes[e.Code] || quotaCodes[e.Type] {
		return belay.ClassQuota
	}
	switch {
	case status == http.StatusUnauthorized, status == http.StatusForbidden:
		return belay.ClassAuth
	case status == http.StatusTooManyRequests:
		return belay.ClassRateLimited
	case status == http.StatusServiceUnavailable, status == 529:
		return belay.ClassOverloaded
	case status >= 500:
		if c, ok := ClassifyType(e.Type, e.Code, e.Message); ok && c == belay.ClassOverloaded {
			return c
		}
		return belay.ClassTransient
	case status == http.StatusRequestTimeout, status == http.StatusConflict:
		return belay.ClassTransient
	case status == http.StatusRequestEntityTooLarge:
		return belay.ClassContextOverflow
	case status >= 400:
		if isOverflow(e) {
			return belay.ClassContextOverflow
		}
		return belay.ClassInvalidRequest
	}
	return belay.ClassInternal
}

// ClassifyType maps an error type or code, as sent inside a stream (no
// HTTP status), to a class. It reports false for one it does not know.
func ClassifyType(typ, code, message string) (belay.ErrorClass, bool) {
	e := APIError{Type: typ, Code: code, Message: message}
	if quotaCodes[code] || quotaCodes[typ] {
		return belay.ClassQuota, true
	}
	for _, k := range []string{code, typ} {
		switch k {
		case "":
			continue
		case "context_length_exceeded", "model_context_window_exceeded":
			return belay.ClassContextOverflow, true
		case "rate_limit_exceeded", "rate_limit_error", "rate_limited":
			return belay.ClassRateLimited, true
		case "overloaded_error", "overloaded", "server_overloaded", "slow_down":
			return belay.ClassOverloaded, true
		case "server_error", "api_error", "internal_error", "timeout_error", "timeout", "vector_store_timeout":
			return belay.ClassTransient, true
		case "authentication_error", "invalid_api_key", "permission_error", "permission_denied":
			return belay.ClassAuth, true
		case "invalid_request_error", "invalid_prompt", "not_found_error", "request_too_large", "invalid_request":
			if isOverflow(e) {
				return belay.ClassContextOverflow, true
			}
			return belay.ClassInvalidRequest, true
		}
	}
	return "", false
}

// maxErrorBody caps how much of an error response is read.
const maxErrorBody = 64 << 10

// maxMessage caps the server message kept in an error, maxCode its
// error code or type and its request id.
const (
	maxMessage = 500
	maxCode    = 100
)

// FromResponse reads (up to a cap) and closes an error response and
// returns its *provider.Error, scrubbed. what names the call ("chat
// completions").
func FromResponse(resp *http.Response, what string, scrub *Scrubber, now time.Time) *provider.Error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	_ = resp.Body.Close()
	e := ParseError(body)
	class := ClassifyStatus(resp.StatusCode, e)
	msg := e.Message
	if msg == "" {
		msg = strings.TrimSpace(string(body))
		if !json.Valid(body) && strings.Contains(strings.ToLower(msg), "<html") {
			msg = "" // a proxy's HTML page says nothing useful
		}
	}
	detail := fmt.Sprintf("%s: HTTP %d", what, resp.StatusCode)
	if k := firstNonEmpty(e.Code, e.Type); k != "" {
		detail += " " + scrub.clip(k, maxCode)
	}
	if msg != "" {
		detail += ": " + scrub.clip(msg, maxMessage)
	}
	if id := firstNonEmpty(resp.Header.Get("x-request-id"), resp.Header.Get("request-id")); id != "" {
		detail += " (request " + scrub.clip(id, maxCode) + ")"
	}
	pe := &provider.Error{Class: class, Message: scrub.String(detail), Status: resp.StatusCode}
	if class == belay.ClassRateLimited || class == belay.ClassOverloaded || class == belay.ClassTransient {
		pe.RetryAfter = RetryAfter(resp.Header, now)
	}
	return pe
}

// StreamError returns the *provider.Error for an error reported inside a
// stream. Unknown types are transient: the stream broke on the server.
func StreamError(what, typ, code, message string, scrub *Scrubber) *provider.Error {
	class, ok := ClassifyType(typ, code, message)
	if !ok {
		class = belay.ClassTransient
	}
	detail := what + ": stream error"
	if k := firstNonEmpty(code, typ); k != "" {
		detail += " " + scrub.clip(k, maxCode)
	}
	if message != "" {
		detail += ": " + scrub.clip(message, maxMessage)
	}
	return &provider.Error{Class: class, Message: scrub.String(detail)}
}

// maxRetryAfter bounds a server's Retry-After: a longer wait is the
// run's deadline's business.
const maxRetryAfter = time.Hour

// RetryAfter returns the delay a response asks for: retry-after-ms
// (milliseconds), else retry-after in seconds (fractions allowed) or as an
// HTTP date. It returns 0 when there is none or it is in the past.
func RetryAfter(h http.Header, now time.Time) time.Duration {
	var d time.Duration
	if v := strings.TrimSpace(h.Get("retry-after-ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			d = time.Duration(ms * float64(time.Millisecond))
		}
	}
	if v := strings.TrimSpace(h.Get("retry-after")); d == 0 && v != "" {
		if s, err := strconv.ParseFloat(v, 64); err == nil {
			if s > 0 {
				d = time.Duration(s * float64(time.Second))
			}
		} else if t, err := http.ParseTime(v); err == nil {
			d = t.Sub(now)
		}
	}
	return min(max(d, 0), maxRetryAfter)
}

// ErrIdle is the cause of a stream cut by the idle timeout.
var ErrIdle = errors.New("no data from the server within the idle timeout")

// NetworkError maps a failure to reach the server or to read its stream.
// When ctx is done it returns ctx's error (cancellation is the caller's,
// not the server's); otherwise a transient *provider.Error whose message is
// scrubbed and whose Err keeps only a well-known cause (io.ErrUnexpectedEOF,
// ErrIdle, a timeout), never the raw error that may name a URL.
func NetworkError(ctx context.Context, what string, err error, scrub *Scrubber) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var cause error
	msg := err.Error()
	var ne net.Error
	switch {
	case errors.Is(err, ErrIdle):
		cause, msg = ErrIdle, ErrIdle.Error()
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		cause, msg = io.ErrUnexpectedEOF, "the connection closed mid-stream"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		cause = errTimeout
	}
	return &provider.Error{
		Class:   belay.ClassTransient,
		Message: scrub.String(what + ": " + scrub.clip(msg, maxMessage)),
		Err:     cause,
	}
}

var errTimeout = errors.New("network timeout")

func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}
