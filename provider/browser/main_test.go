package browser

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/belayhq/belay/internal/chatsite"
	"github.com/belayhq/belay/provider"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// needChromium skips a test when no browser is installed (CI installs
// Debian's chromium).
func needChromium(t *testing.T) {
	t.Helper()
	if _, err := findChromium(""); err != nil {
		t.Skip(err)
	}
}

type bundle struct {
	site *chatsite.Site
	p    *Provider
	dir  string
}

// setup starts a loopback chat site at speed and a provider bound to it;
// each tweak changes the provider's config first.
func setup(t *testing.T, speed float64, tweak ...func(*Config)) *bundle {
	t.Helper()
	needChromium(t)
	site, err := chatsite.Start(chatsite.Options{Speed: speed})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { site.Close() })
	dir := t.TempDir()
	cfg := Config{
		Site: "loopback", SiteURL: site.URL() + "/", Dir: dir,
		PollInterval: 50 * time.Millisecond, Settle: 150 * time.Millisecond, ProgressEvery: time.Second,
		SendTimeout: 5 * time.Second, ReadyTimeout: 10 * time.Second,
	}
	for _, f := range tweak {
		f(&cfg)
	}
	p, err := New("browser", cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{site: site, p: p, dir: dir}
}

// ownTab starts a browser of the test's own on profile dir name under the
// bundle's directory and returns its tab; both end with the test.
func (b *bundle) ownTab(t *testing.T, name string) *tab {
	t.Helper()
	chromium, err := findChromium("")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	br, err := startChrome(ctx, chromium, filepath.Join(b.dir, name), true, nil, filepath.Join(b.dir, name+".log"), DefaultStartTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(br.kill)
	tb, err := attach(ctx, br, "", DefaultStartTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tb.close)
	return tb
}

// answeredOnce fails t unless got is the site's whole answer to prompt and
// the site received prompt exactly once.
func (b *bundle) answeredOnce(t *testing.T, prompt, got string) {
	t.Helper()
	if want, _ := chatsite.AnswerText(prompt); got != want {
		t.Fatalf("answer:\n got %q\nwant %q", got, want)
	}
	if n := b.site.Count(prompt); n != 1 {
		t.Fatalf("the site received the prompt %d times", n)
	}
}

// recorder collects a run's events like the runtime journals them.
type recorder struct {
	mu     sync.Mutex
	events []provider.Event
	text   strings.Builder
	ref    provider.Event
	final  []provider.Event // FinalAnswer events
	onRef  func(c cursor)
}

func (r *recorder) emit(ev provider.Event) error {
	r.mu.Lock()
	r.events = append(r.events, ev)
	switch ev.Kind {
	case provider.TextDelta:
		r.text.WriteString(ev.Text)
	case provider.RefUpdate:
		r.ref = mergeRef(r.ref, ev)
	case provider.FinalAnswer:
		r.final = append(r.final, ev)
	}
	hook := r.onRef
	r.mu.Unlock()
	if ev.Kind == provider.RefUpdate && hook != nil {
		if c := refCursor(*ev.Ref); c != nil {
			hook(*c)
		}
	}
	return nil
}

func mergeRef(old, ev provider.Event) provider.Event {
	if old.Ref == nil {
		c := *ev.Ref
		return provider.Event{Kind: provider.RefUpdate, Ref: &c}
	}
	c := *old.Ref
	if ev.Ref.ID != "" {
		c.ID = ev.Ref.ID
	}
	if ev.Ref.URL != "" {
		c.URL = ev.Ref.URL
	}
	if ev.Ref.Target != "" {
		c.Target = ev.Ref.Target
	}
	if ev.Ref.Cursor != "" {
		c.Cursor = ev.Ref.Cursor
	}
	return provider.Event{Kind: provider.RefUpdate, Ref: &c}
}

func (r *recorder) answer() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.text.String()
}

// chromiumCount counts the running browsers whose profile lives under dir.
func chromiumCount(t *testing.T, dir string) int {
	out, _ := exec.Command("pgrep", "-f", "--", "--user-data-dir="+dir).Output()
	return len(strings.Fields(string(out)))
}

var _ = context.Background
