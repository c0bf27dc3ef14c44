package browser

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/belayhq/belay/internal/proc"
)

// chrome is a Chromium process that belay started for one run, detached
// from the daemon so that it survives a daemon restart. It is named by
// its pid and process start token (so a reused pid is never mistaken for
// it), its DevTools websocket address and its profile directory.
type chrome struct {
	PID     int    `json:"pid"`
	Token   string `json:"token"`
	WS      string `json:"ws"`
	Profile string `json:"profile"`
}

// alive reports whether the browser process is still the one started
// (a zombie is not).
func (c *chrome) alive() bool {
	if c == nil || c.PID <= 0 {
		return false
	}
	if ok, err := proc.Alive(c.PID); err == nil && !ok {
		return false
	}
	tok, err := proc.StartTime(c.PID)
	return err == nil && tok == c.Token
}

// httpClient makes the provider's HTTP requests (the DevTools endpoint,
// artifact downloads). It keeps no idle connections: each request is one
// of few, and a pooled connection would outlive the browser or site it
// talks to.
var httpClient = &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment, DisableKeepAlives: true}}

// httpBase is the DevTools HTTP endpoint, "http://127.0.0.1:PORT".
func (c *chrome) httpBase() string {
	s := strings.TrimPrefix(c.WS, "ws://")
	if i := strings.IndexByte(s, '/'); i >= 0 {
		s = s[:i]
	}
	return "http://" + s
}

// devtoolsTarget is one entry of /json/list.
type devtoolsTarget struct {
	ID   string `json:"id"`
	Type string `json:"type"`
	URL  string `json:"url"`
}

// targets lists the browser's targets.
func (c *chrome) targets(ctx context.Context) ([]devtoolsTarget, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.httpBase()+"/json/list", nil)
	if err != nil {
		return nil, err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out []devtoolsTarget
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("devtools /json/list: %w", err)
	}
	return out, nil
}

// hasTarget reports whether the browser still has the page target id.
func (c *chrome) hasTarget(ctx context.Context, id string) bool {
	ts, err := c.targets(ctx)
	if err != nil {
		return false
	}
	for _, t := range ts {
		if t.ID == id && t.Type == "page" {
			return true
		}
	}
	return false
}

// CloseTarget closes a target of a browser through its DevTools HTTP
// endpoint (a test and harness hook: "the tab was closed").
func CloseTarget(ctx context.Context, ws, id string) error {
	c := &chrome{WS: ws}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.httpBase()+"/json/close/"+id, nil)
	if err != nil {
		return err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("browser: close target %s: %s", id, resp.Status)
	}
	return nil
}

// chromeArgs are the flags of every browser belay starts.
func chromeArgs(profile string, headless bool, extra []string) []string {
	args := []string{
		"--user-data-dir=" + profile,
		"--remote-debugging-port=0",
		"--remote-debugging-address=127.0.0.1",
		"--no-first-run", "--no-default-browser-check",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--password-store=basic", "--use-mock-keychain",
		"--disable-features=Translate,MediaRouter",
	}
	if headless {
		args = append(args, "--headless", "--disable-gpu", "--no-sandbox", "--mute-audio")
	} else if os.Geteuid() == 0 {
		// Chromium refuses to start a window as root with its sandbox on
		// (containers, CI).
		args = append(args, "--no-sandbox")
	}
	return append(append(args, extra...), "about:blank")
}

// startChrome starts a detached browser on profile and waits for its
// DevTools address, for at most timeout.
func startChrome(ctx context.Context, path, profile string, headless bool, extra []string, logPath string, timeout time.Duration) (*chrome, error) {
	_ = os.Remove(filepath.Join(profile, "DevToolsActivePort"))
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(path, chromeArgs(profile, headless, extra)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	detach(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", path, err)
	}
	exited := make(chan error, 1)
	// The browser is reaped when it exits while this process lives; after
	// a daemon restart init reaps it.
	go func() { exited <- cmd.Wait() }()
	c := &chrome{PID: cmd.Process.Pid, Profile: profile}
	c.Token, _ = proc.StartTime(c.PID)
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		b, err := os.ReadFile(filepath.Join(profile, "DevToolsActivePort"))
		if err == nil {
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			if len(lines) == 2 {
				if port, err := strconv.Atoi(lines[0]); err == nil && port > 0 {
					c.WS = fmt.Sprintf("ws://127.0.0.1:%d%s", port, lines[1])
					return c, nil
				}
			}
		}
		select {
		case err := <-exited:
			tail, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("browser exited before it listened (%v): %s", err, lastLines(tail, 5))
		case <-deadline.C:
			c.kill()
			return nil, fmt.Errorf("browser did not open its DevTools port within %s", timeout)
		case <-ctx.Done():
			c.kill()
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
}

func lastLines(b []byte, n int) string {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte(" | ")))
}

// findChromium returns the browser executable: path if set, else the
// first of chromium, chromium-browser, google-chrome on PATH.
func findChromium(path string) (string, error) {
	if path != "" {
		return exec.LookPath(path)
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	if p := "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome"; fileExists(p) {
		return p, nil
	}
	return "", errors.New("no chromium found: install it (Debian/Ubuntu: sudo apt-get install -y chromium; macOS: brew install --cask chromium) or set chromium = \"/path\" in the browser provider's config")
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
