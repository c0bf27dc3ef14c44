package browser

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/belayhq/belay/internal/proc"
	"github.com/belayhq/belay/provider"
)

// devtoolsStub is a DevTools endpoint that lists one page target and
// answers its websocket with ws: hang holds the connection open without
// a handshake until the client gives up, refuse answers 503.
func devtoolsStub(t *testing.T, hang bool) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/json/list":
			fmt.Fprint(w, `[{"id":"STUB","type":"page","url":"about:blank"}]`)
		case hang:
			<-r.Context().Done()
		default:
			http.Error(w, "not now", http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func stubPort(srv *httptest.Server) int { return srv.Listener.Addr().(*net.TCPAddr).Port }

// TestAttachGivesUpOnABrowserThatDoesNotAnswer: a browser whose DevTools
// connection never completes is given up after the timeout, with an
// error that says so (not "context canceled").
func TestAttachGivesUpOnABrowserThatDoesNotAnswer(t *testing.T) {
	t.Parallel()
	srv := devtoolsStub(t, true)
	ws := fmt.Sprintf("ws://127.0.0.1:%d/devtools/browser/stub", stubPort(srv))
	_, err := attach(context.Background(), &chrome{WS: ws}, "", 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "the browser did not answer in 300ms") {
		t.Fatalf("err %v", err)
	}
}

// TestLaunchStartsAgainWhenTheFirstBrowserDoesNotAnswer: the first
// "browser" opens a DevTools port that refuses its connection (as a
// browser on an overloaded machine may); the run ends it, starts a real
// browser on a fresh profile and answers once.
func TestLaunchStartsAgainWhenTheFirstBrowserDoesNotAnswer(t *testing.T) {
	t.Parallel()
	needChromium(t)
	real, err := findChromium("")
	if err != nil {
		t.Fatal(err)
	}
	srv := devtoolsStub(t, false)
	tmp := t.TempDir()
	mark, pidFile := filepath.Join(tmp, "first"), filepath.Join(tmp, "first.pid")
	// The first start writes the stub's port where a browser writes its
	// own, then waits to be ended; later starts run the real browser.
	script := fmt.Sprintf(`#!/bin/sh
for a in "$@"; do case "$a" in --user-data-dir=*) dir="${a#--user-data-dir=}";; esac; done
if mkdir %q 2>/dev/null; then
	echo $$ > %q
	printf '%%s\n%%s\n' %d /devtools/browser/stub > "$dir/DevToolsActivePort"
	exec sleep 600
fi
exec %q "$@"
`, mark, pidFile, stubPort(srv), real)
	fake := filepath.Join(tmp, "chromium")
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	b := setup(t, 8, func(c *Config) { c.Chromium = fake })
	prompt := "Start again. [[think=1s stream=1s words=20]]"
	var rec recorder
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := b.p.Run(ctx, provider.Request{Session: "ses_s", Run: "run_s", Prompt: prompt, Attempt: 1}, rec.emit); err != nil {
		t.Fatal(err)
	}
	b.answeredOnce(t, prompt, rec.answer())
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("the first start did not run the stub: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, func() bool {
		ok, err := proc.Alive(pid)
		return err == nil && !ok
	}, "the browser that did not answer was not ended")
	if n := chromiumCount(t, b.dir); n != 0 {
		t.Fatalf("%d browser processes left", n)
	}
	// Only the run's own directory is left of the two profiles: the first
	// was removed when its browser was given up, the second at the end.
	profiles, _ := filepath.Glob(filepath.Join(b.dir, "runs", "*", "*", "profile*"))
	if len(profiles) != 0 {
		t.Fatalf("profiles left: %v", profiles)
	}
}
