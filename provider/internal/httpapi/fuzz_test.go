package httpapi

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/belayhq/belay"
)

// classes are the error classes of DESIGN.md §6.
var classes = map[belay.ErrorClass]bool{
	belay.ClassAuth: true, belay.ClassChallenge: true, belay.ClassRateLimited: true, belay.ClassOverloaded: true,
	belay.ClassTransient: true, belay.ClassInvalidRequest: true, belay.ClassContextOverflow: true,
	belay.ClassPermissionDenied: true, belay.ClassTargetLost: true, belay.ClassUIDrift: true,
	belay.ClassCancelled: true, belay.ClassTimeout: true, belay.ClassInternal: true,
}

// maxDetail bounds an error message built from a response: the caller's
// label, the status, a code, the message and a request id, each capped.
const maxDetail = 200 + 100 + maxMessage + 100 + 50

// checkScrubbed fails when out shows secret, whole or cut off where a
// message was truncated. A secret holding '[' or ']' can be made up of
// the text around a redaction, and one inside the marker is always shown.
func checkScrubbed(t *testing.T, out, secret, input string) {
	t.Helper()
	secret = strings.TrimSpace(secret)
	if len(secret) < 4 || strings.ContainsAny(secret, "[]") || strings.Contains(Redacted, secret) {
		return
	}
	if strings.Contains(out, secret) {
		t.Fatalf("secret %q survives in %q", secret, out)
	}
	if strings.Contains(input, "…") || !strings.Contains(input, secret) {
		return // a start of the secret, if any, is the input's own text
	}
	// A start of the secret just before a "…" that only ever appears in
	// the input as part of the whole secret is the secret cut short.
	for k := 4; k < len(secret); k++ {
		if strings.Contains(out, secret[:k]+"…") && onlyInSecret(input, secret[:k], secret) {
			t.Fatalf("the start of secret %q survives a truncation in %q", secret, out)
		}
	}
}

// onlyInSecret reports whether every occurrence of prefix in s starts an
// occurrence of secret: then prefix in the output is a secret cut short.
func onlyInSecret(s, prefix, secret string) bool {
	for i := 0; i < len(s); i++ {
		j := strings.Index(s[i:], prefix)
		if j < 0 {
			return true
		}
		i += j
		if !strings.HasPrefix(s[i:], secret) {
			return false
		}
	}
	return true
}

// FuzzScrub: a configured secret never survives, scrubbing is idempotent
// (nothing shaped like a credential is left to find), and valid UTF-8
// stays valid.
func FuzzScrub(f *testing.F) {
	f.Add("Authorization: Bearer sk-abcdefghijklmnop", "sk-abcdefghijklmnop")
	f.Add(`{"x-api-key": "k-123456", "api_key=zz&secret: a"}`, "k-123456")
	f.Add("bearer bearer abcdefgh", "")
	f.Add("key mysecretvalue in text", " mysecretvalue ")
	f.Add("[REDACTED] REDA", "REDA")
	f.Add("secret=secret=sk-000000", "secret")
	f.Fuzz(func(t *testing.T, text, secret string) {
		s := NewScrubber(secret)
		out := s.String(text)
		checkScrubbed(t, out, secret, text)
		if again := s.String(out); again != out && !strings.Contains(Redacted, strings.TrimSpace(secret)) {
			t.Fatalf("scrubbing is not idempotent:\n%q\n%q", out, again)
		}
		if utf8.ValidString(text) && !utf8.ValidString(out) {
			t.Fatalf("scrubbing broke UTF-8: %q", out)
		}
	})
}

// FuzzFromResponse classifies arbitrary error responses. The class is one
// of belay's, a retry wait is only for retryable classes and at most an
// hour, the message is bounded, valid UTF-8 for a valid UTF-8 body, and
// never shows the key, whole or cut in half.
func FuzzFromResponse(f *testing.F) {
	key := "local-server-key-0123456789"
	long := strings.Repeat("a", maxMessage-10)
	f.Add(401, []byte(`{"error":{"message":"Incorrect API key sk-proj-abcdefgh","code":"invalid_api_key"}}`), "", "", key)
	f.Add(429, []byte(`{"type":"error","error":{"type":"rate_limit_error","message":"slow"}}`), "req_1", "7", key)
	f.Add(400, []byte(`{"error":{"message":"prompt is too long","code":400}}`), "", "", key)
	f.Add(503, []byte(`<html>bad gateway</html>`), "", "Wed, 21 Oct 2015 07:28:00 GMT", key)
	f.Add(200, []byte(`{"error":"plain"}`), "", "", key)
	f.Add(500, []byte(`{"message":"x","error":null}`), "", "-1", key)
	// Regressions: a key cut by the message's truncation kept its start;
	// a code or request id of any length made the message unbounded.
	f.Add(400, []byte(`{"error":{"message":"`+long+` key `+key+`"}}`), "", "", key)
	f.Add(400, []byte(`{"error":{"code":"`+strings.Repeat("c", 5000)+`"}}`), "", "", key)
	f.Add(502, []byte(`{}`), strings.Repeat("r", 95)+key, "", key)
	f.Fuzz(func(t *testing.T, status int, body []byte, requestID, retryAfter, secret string) {
		h := http.Header{}
		h.Set("x-request-id", requestID)
		h.Set("retry-after", retryAfter)
		resp := &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(bytes.NewReader(body))}
		pe := FromResponse(resp, "chat completions", NewScrubber(secret), now)
		if !classes[pe.Class] {
			t.Fatalf("class %q", pe.Class)
		}
		if status < 400 && pe.Class != belay.ClassInternal {
			t.Fatalf("HTTP %d classed %s", status, pe.Class)
		}
		if pe.RetryAfter < 0 || pe.RetryAfter > maxRetryAfter || pe.RetryAfter > 0 && !pe.Class.Retryable() {
			t.Fatalf("retry after %v for %s", pe.RetryAfter, pe.Class)
		}
		if len(pe.Message) > maxDetail {
			t.Fatalf("message of %d bytes", len(pe.Message))
		}
		if utf8.Valid(body) && utf8.ValidString(requestID) && !utf8.ValidString(pe.Message) {
			t.Fatalf("message is not UTF-8: %q", pe.Message)
		}
		checkScrubbed(t, pe.Message, secret, string(body)+requestID)
		if got := ClassifyStatus(status, ParseError(body)); got != pe.Class {
			t.Fatalf("ClassifyStatus says %s, FromResponse %s", got, pe.Class)
		}
	})
}

// FuzzStreamError: an error reported inside a stream gets one of belay's
// classes and a bounded, scrubbed message.
func FuzzStreamError(f *testing.F) {
	f.Add("rate_limit_error", "", "slow down", "sk-abcdefgh")
	f.Add("invalid_request_error", "context_length_exceeded", "too many tokens", "")
	f.Add("", "", strings.Repeat("m", maxMessage-3)+"secretkey", "secretkey")
	f.Add(strings.Repeat("t", 3000), "", "", "")
	f.Fuzz(func(t *testing.T, typ, code, message, secret string) {
		pe := StreamError("messages stream", typ, code, message, NewScrubber(secret))
		if !classes[pe.Class] {
			t.Fatalf("class %q", pe.Class)
		}
		if len(pe.Message) > maxDetail {
			t.Fatalf("message of %d bytes", len(pe.Message))
		}
		checkScrubbed(t, pe.Message, secret, typ+code+message)
	})
}
