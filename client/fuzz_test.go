package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/belayhq/belay"
)

// reply is what the fuzz server answers next.
type reply struct {
	mu     sync.Mutex
	status int
	ctype  string
	body   []byte
}

func (r *reply) set(status int, ctype string, body []byte) {
	r.mu.Lock()
	r.status, r.ctype, r.body = status, ctype, body
	r.mu.Unlock()
}

func (r *reply) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	r.mu.Lock()
	status, ctype, body := r.status, r.ctype, r.body
	r.mu.Unlock()
	w.Header().Set("Content-Type", ctype)
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// FuzzResponse answers client calls with arbitrary statuses and bodies
// over a real loopback connection. A JSON call either decodes or fails;
// an error answer is an *Error with its status, a code and a message
// that says something; a stream delivers only the events whose data
// blocks decode, in order, and ends with io.EOF at the end of the body,
// a bad-event error, or the *Error of an error event, with a message.
func FuzzResponse(f *testing.F) {
	f.Add(200, []byte(`{"id":"run_x","status":"running"}`), []byte("id: 1\nevent: event\ndata: {\"seq\":1,\"type\":\"a\",\"data\":{}}\n\n: keepalive\n\n"))
	f.Add(404, []byte(`{"error":{"code":"not_found","message":"no run run_x"}}`), []byte("event: error\ndata: {\"code\":\"read_only\",\"message\":\"damaged\"}\n\n"))
	f.Add(500, []byte(`<html>oops</html>`), []byte("data: {\"seq\":1,\"type\":\"a\",\"data\":null}\r\n\r\ndata: {\"seq\":2,\n\n"))
	f.Add(200, []byte(`{"id":`), []byte("data: {\"seq\":1,\"type\":\"a\"}\ndata: ,\"data\":1}\n\n"))
	// Regressions: an error without a message, in a body and in a stream,
	// became an error whose text was empty.
	f.Add(409, []byte(`{"error":{"code":"already_finished"}}`), []byte("event: error\ndata: {}\n\n"))
	f.Add(503, []byte(`{"error":{"code":"unavailable","message":""}}`), []byte("event: error\ndata: not json\n\n"))
	var srv reply
	ts := httptest.NewServer(&srv)
	defer ts.Close()
	c := New(Options{BaseURL: ts.URL})
	defer c.hc.CloseIdleConnections()
	f.Fuzz(func(t *testing.T, status int, body, stream []byte) {
		if status < 200 || status > 599 {
			status = 200 + (status%400+400)%400
		}
		srv.set(status, "application/json", body)
		_, err := c.Run(context.Background(), "run_x")
		var e *Error
		switch {
		case status >= 300:
			if !errors.As(err, &e) || e.Status != status || e.Code == "" || strings.TrimSpace(e.Error()) == "" {
				t.Fatalf("HTTP %d %q: error %#v", status, body, err)
			}
		case err != nil && !strings.HasPrefix(err.Error(), "client: decode"):
			t.Fatalf("HTTP %d %q: %v", status, body, err)
		}

		srv.set(200, "text/event-stream", stream)
		var got []belay.Event
		err = c.Stream(context.Background(), "ses_x", 0, func(ev belay.Event) error { got = append(got, ev); return nil })
		switch {
		case errors.Is(err, io.EOF):
		case errors.As(err, &e):
			if e.Code == "" || strings.TrimSpace(e.Error()) == "" {
				t.Fatalf("stream %q: error event %#v", stream, e)
			}
		case err != nil && strings.HasPrefix(err.Error(), "client: bad event in stream"):
		default:
			t.Fatalf("stream %q: %v", stream, err)
		}
		for _, ev := range got {
			if _, err := json.Marshal(ev); err != nil {
				t.Fatalf("delivered an event that does not encode: %v", err)
			}
		}
	})
}
