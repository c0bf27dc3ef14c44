package client

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/api"
)

// TestAnswerWholeOrFails: a streamed body counts only with its ok trailer;
// an error trailer or none at all (a cut connection) fails the call (G14).
func TestAnswerWholeOrFails(t *testing.T) {
	cases := map[string]struct {
		trailer map[string]string
		check   func(error) bool
	}{
		"ok":      {map[string]string{api.TrailerStatus: "ok"}, func(err error) bool { return err == nil }},
		"cut off": {nil, func(err error) bool { return errors.Is(err, ErrCutOff) }},
		"quarantine": {map[string]string{api.TrailerStatus: "error", api.TrailerError: `{"code":"read_only","message":"journal damaged at offset 42"}`},
			func(err error) bool {
				return errors.Is(err, belay.ErrReadOnly) && err.Error() == "journal damaged at offset 42"
			}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Trailer", api.TrailerStatus+", "+api.TrailerError)
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
