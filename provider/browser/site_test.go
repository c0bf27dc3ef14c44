package browser

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestEmbeddedSitesParse(t *testing.T) {
	t.Parallel()
	ss := NewSites("")
	names, err := ss.Names()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"chatgpt", "claude", "gemini", "grok", "loopback", "loopback-v2"} {
		s, err := ss.Get(want)
		if err != nil {
			t.Fatalf("%s: %v", want, err)
		}
		if s.Name != want || s.Source != "embedded" {
			t.Fatalf("%s: %+v", want, s)
		}
	}
	if len(names) != 6 {
		t.Fatalf("names %v", names)
	}
	s, _ := ss.Get("chatgpt")
	for url, id := range map[string]string{
		"https://chatgpt.com/c/68a1b2c3-0000-4000-8000-00000000beef":         "68a1b2c3-0000-4000-8000-00000000beef",
		"https://chatgpt.com/g/g-abc/c/68a1b2c3-0000-4000-8000-00000000beef": "68a1b2c3-0000-4000-8000-00000000beef",
		"https://chatgpt.com/": "",
		"https://evil.example/c/68a1b2c3-0000-4000-8000-00000000beef":        "",
		"https://chatgpt.com/c/68a1b2c3-0000-4000-8000-00000000beef?model=x": "68a1b2c3-0000-4000-8000-00000000beef",
	} {
		if got := s.Conversation(url); got != id {
			t.Errorf("Conversation(%s) = %q, want %q", url, got, id)
		}
	}
}

func TestSiteOverridesAndErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ss := NewSites(dir)
	base, err := embedded.ReadFile("sites/loopback.toml")
	if err != nil {
		t.Fatal(err)
	}
	// An override replaces the built-in profile, read again on every Get.
	fixed := strings.Replace(string(base), `composer = "#prompt"`, `composer = "#prompt-v3"`, 1)
	if err := os.WriteFile(filepath.Join(dir, "loopback.toml"), []byte(fixed), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := ss.Get("loopback")
	if err != nil {
		t.Fatal(err)
	}
	if s.Selectors.Composer != "#prompt-v3" || s.Source != filepath.Join(dir, "loopback.toml") {
		t.Fatalf("override not used: %+v", s)
	}
	// A new site is added without a rebuild.
	added := strings.Replace(string(base), `name = "loopback"`, `name = "mychat"`, 1)
	if err := os.WriteFile(filepath.Join(dir, "mychat.toml"), []byte(added), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ss.Get("mychat"); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{
		"typo":    strings.Replace(string(base), "[completion]", "[completion]\nsettel = \"1s\"", 1),
		"noready": strings.Replace(string(base), `ready = ["composer", "send", "model_picker"]`, `ready = ["composr"]`, 1),
		"badre":   strings.Replace(string(base), `conversation_path = '^/c/([0-9a-f-]{8,})$'`, `conversation_path = '^/c/[0-9a-f-]+$'`, 1),
		"badurl":  strings.Replace(string(base), `start_url = "http://127.0.0.1/"`, `start_url = "file:///etc/passwd"`, 1),
	} {
		body = strings.Replace(body, `name = "loopback"`, `name = "`+name+`"`, 1)
		if err := os.WriteFile(filepath.Join(dir, name+".toml"), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := ss.Get(name); !errors.Is(err, ErrSite) {
			t.Errorf("%s: err %v, want ErrSite", name, err)
		}
	}
	if _, err := ss.Get("../etc"); !errors.Is(err, ErrSite) {
		t.Errorf("path name: %v", err)
	}
	if _, err := ss.Get("nosuch"); err == nil || !strings.Contains(err.Error(), "known:") {
		t.Errorf("unknown site: %v", err)
	}
}

func TestSeedCloneAndLock(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	seed := seedDir(root, "chatgpt")
	for _, f := range []string{"Default/Cookies", "Default/Local Storage/leveldb/000003.log", "Default/Cache/data_0", "Local State"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(seed, f)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(seed, f), []byte(f), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("host-1234", filepath.Join(seed, "SingletonLock")); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "clone")
	if err := cloneSeed(root, "chatgpt", dst); err != nil {
		t.Fatal(err)
	}
	for f, want := range map[string]bool{"Default/Cookies": true, "Default/Local Storage/leveldb/000003.log": true, "Local State": true, "Default/Cache/data_0": false, "SingletonLock": false} {
		_, err := os.Lstat(filepath.Join(dst, f))
		if (err == nil) != want {
			t.Errorf("%s in the clone: %v, want %v", f, err == nil, want)
		}
	}
	// A login holds the seed lock: cloning waits, and gives up with a
	// reason naming the lock.
	if SeedLocked(root, "gemini") {
		t.Fatal("a seed never locked reads as locked")
	}
	if _, err := os.Stat(filepath.Join(root, "seeds", "gemini.lock")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("SeedLocked created a lock file")
	}
	l, err := lockSeed(root, "chatgpt", 0)
	if err != nil {
		t.Fatal(err)
	}
	if !SeedLocked(root, "chatgpt") {
		t.Fatal("a held seed lock reads as free")
	}
	if _, err := lockSeed(root, "chatgpt", 100*time.Millisecond); err == nil || !strings.Contains(err.Error(), "locked") {
		t.Fatalf("second lock: %v", err)
	}
	l.unlock()
	if SeedLocked(root, "chatgpt") {
		t.Fatal("a released seed lock reads as held")
	}
	if l2, err := lockSeed(root, "chatgpt", 0); err != nil {
		t.Fatal(err)
	} else {
		l2.unlock()
	}
	// Import swaps a profile in and keeps the old seed.
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "Local State"), []byte("imported"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := importSeed(src, seed); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(seed, "Local State")); string(b) != "imported" {
		t.Fatalf("seed after import: %q", b)
	}
	if _, err := os.Stat(filepath.Join(seed+".prev", "Default", "Cookies")); err != nil {
		t.Fatalf("previous seed not kept: %v", err)
	}
}

func TestClassifyWithoutABrowser(t *testing.T) {
	t.Parallel()
	s, err := NewSites("").Get("chatgpt")
	if err != nil {
		t.Fatal(err)
	}
	ready := map[string]int{"composer": 1, "modelPicker": 1}
	for _, tc := range []struct {
		p    probe
		want PageState
	}{
		{probe{URL: "https://chatgpt.com/", Match: ready, Ready: "complete"}, StateReady},
		{probe{URL: "https://chatgpt.com/", Match: ready, Ready: "interactive"}, StateUnknown},
		{probe{URL: "chrome-error://chromewebdata/", Match: map[string]int{}}, StateOutage},
		{probe{URL: "https://auth.openai.com/log-in", Match: map[string]int{}}, StateLoginRequired},
		{probe{URL: "https://accounts.example.com/", Match: map[string]int{}}, StateLoginRequired},
		{probe{URL: "https://chatgpt.com/", Title: "Just a moment...", Match: map[string]int{}}, StateChallenge},
		{probe{URL: "https://chatgpt.com/", Text: "You've reached our limit of messages", Match: ready}, StateRateLimited},
		// An answer quoting an outage is not an outage: turn text is not in
		// the probe's text, and the page is ready.
		{probe{URL: "https://chatgpt.com/c/68a1b2c3-0000-4000-8000-00000000beef", Match: ready, Ready: "complete"}, StateReady},
		{probe{URL: "https://chatgpt.com/", Text: "Something went wrong", Match: map[string]int{}}, StateOutage},
		{probe{URL: "https://chatgpt.com/", Match: ready, Modal: true}, StateModal},
		{probe{URL: "https://chatgpt.com/", Match: map[string]int{"composer": 1}}, StateUnknown},
	} {
		if v := classify(s, tc.p); v.State != tc.want {
			t.Errorf("%+v: %s (%s), want %s", tc.p, v.State, v.Reason, tc.want)
		}
	}
}

// waitUntil polls cond on a ticker until it holds, failing with msg after
// timeout.
func waitUntil(t *testing.T, timeout time.Duration, cond func() bool, msg string) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(timeout)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatal(msg)
		}
	}
}
