package chatsite

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// FuzzHandlers posts arbitrary bodies to the site's handlers (send,
// login, stop, retry, upload) in every mode: none may panic, and each
// answers with a status a page can act on.
func FuzzHandlers(f *testing.F) {
	f.Add("/api/send", `{"conv":"","text":"hi [[think=1s words=3]]","model":"pro","files":["a"]}`, "ready", "")
	f.Add("/api/send", `{"text":"[[words=0]]"}`, "auth", "")
	f.Add("/login", "next=%2Fc%2Fabc", "auth", "")
	f.Add("/login", "next=//evil.example/", "login", "")
	f.Add("/api/stop", `{"conv":"x"}`, "ready", "")
	f.Add("/api/retry", `{"conv":""}`, "rate-limited", "")
	f.Add("/api/upload?name=fail.bin", "data", "ready", "")
	f.Add("/api/send", `{"conv":"nope","text":"x"}`, "expired", "loopback_session=abc")
	s, err := Start(Options{Speed: 1e6})
	if err != nil {
		f.Fatal(err)
	}
	defer s.Close()
	f.Fuzz(func(t *testing.T, path, body, mode, cookie string) {
		if !strings.HasPrefix(path, "/") || strings.ContainsAny(path, " \r\n") {
			return
		}
		if _, err := url.ParseRequestURI(path); err != nil {
			return
		}
		if err := s.SetMode(Mode(mode)); err != nil {
			_ = s.SetMode(ModeReady)
		}
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		if path == "/login" {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		if cookie != "" {
			req.Header.Set("Cookie", cookie)
		}
		w := httptest.NewRecorder()
		s.srv.Handler.ServeHTTP(w, req)
		if w.Code < 200 || w.Code >= 600 {
			t.Fatalf("%s: status %d", path, w.Code)
		}
		if path == "/login" && w.Code == http.StatusSeeOther {
			loc := w.Header().Get("Location")
			if !strings.HasPrefix(loc, "/") || strings.HasPrefix(loc, "//") {
				t.Fatalf("login redirects off the site: %q", loc)
			}
		}
	})
}
