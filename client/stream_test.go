package client

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
)

// TestAnswerWholeOrFails: a streamed body counts only with its ok trailer;
// an error trailer or none at all (a cut connection) fails the call (G14).
func TestAnswerWholeOrFails(t *testing.T) {
	cases := map[string]struct {
		trailer map[string]string
		check   func(error) bool
	}{
		"ok":      {map[string]string{apitype.TrailerStatus: "ok"}, func(err error) bool { return err == nil }},
		"cut off": {nil, func(err error) bool { return errors.Is(err, ErrCutOff) }},
		"quarantine": {map[string]string{apitype.TrailerStatus: "error", apitype.TrailerError: `{"code":"read_only","message":"journal damaged at offset 42"}`},
			func(err error) bool {
				return errors.Is(err, belay.ErrReadOnly) && err.Error() == "journal damaged at offset 42"
			}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Trailer", apitype.TrailerStatus+", "+apitype.TrailerError)
				_, _ = w.Write([]byte("partial answer"))
				for k, v := range tc.trailer {
					w.Header().Set(k, v)
				}
			}))
			defer srv.Close()
			var out bytes.Buffer
			err := New(Options{BaseURL: srv.URL}).Answer(context.Background(), "run_x", &out)
			if !tc.check(err) {
				t.Fatalf("unexpected error %v", err)
			}
			if out.String() != "partial answer" {
				t.Fatalf("wrote %q", out.String())
			}
		})
	}
}

// TestStreamBoundsAnEvent: a stream line or event longer than the bound is
// an error, not an allocation without end and not a reconnect loop.
func TestStreamBoundsAnEvent(t *testing.T) {
	for name, body := range map[string]string{
		"one long line":   "data: " + strings.Repeat("x", maxStreamLine+1) + "\n\n",
		"many data lines": strings.Repeat("data: "+strings.Repeat("y", 60<<10)+"\n", maxStreamLine/(60<<10)+2) + "\n",
	} {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = w.Write([]byte(body))
			}))
			defer srv.Close()
			err := New(Options{BaseURL: srv.URL}).Stream(context.Background(), "ses_x", 0, func(belay.Event) error { return nil })
			if err == nil || IsUnreachable(err) || !strings.Contains(err.Error(), "larger than") && !strings.Contains(err.Error(), "longer than") {
				t.Fatalf("want a bound error, got %v", err)
			}
		})
	}
}
