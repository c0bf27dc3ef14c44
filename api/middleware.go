package api

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/internal/ids"
)

// jsonMisses answers requests no route matches (404, or 405 with Allow)
// with a JSON error body like every other error.
func jsonMisses(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		rec := &missRecorder{header: http.Header{}}
		mux.ServeHTTP(rec, r)
		if allow := rec.header.Get("Allow"); allow != "" {
			w.Header().Set("Allow", allow)
		}
		if rec.code == http.StatusMethodNotAllowed {
			writeErrorCode(w, rec.code, apitype.CodeMethod, r.Method+" is not allowed on "+r.URL.Path, nil)
			return
		}
		writeErrorCode(w, http.StatusNotFound, apitype.CodeNotFound, "no such endpoint: "+r.Method+" "+r.URL.Path, nil)
	})
}

// missRecorder takes the mux's own answer to a request no route matches
// (its status, and the Allow header of a 405) and discards its body, so
// that jsonMisses can answer in JSON instead.
type missRecorder struct {
	header http.Header
	code   int
}

func (m *missRecorder) Header() http.Header { return m.header }

func (m *missRecorder) WriteHeader(code int) {
	if m.code == 0 {
		m.code = code
	}
}

func (m *missRecorder) Write(b []byte) (int, error) {
	m.WriteHeader(http.StatusOK)
	return len(b), nil
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
