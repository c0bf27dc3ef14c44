package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/belayhq/belay/internal/cmdline"
)

// SelectorMatch is how many elements one selector of a site profile
// matches on the page.
type SelectorMatch struct {
	Key      string `json:"key"`
	Selector string `json:"selector"`
	Count    int    `json:"count"`
	// Ready: the page is not ready without it.
	Ready bool `json:"ready,omitempty"`
	// InTurn: looked up inside the last assistant turn (0 when there is
	// none is expected on a new chat).
	InTurn bool `json:"inTurn,omitempty"`
}

// SignalMatch is a text or URL signal of a page state found on the page.
type SignalMatch struct {
	State  PageState `json:"state"`
	Signal string    `json:"signal"`
}

// CheckReport is what `belay browser check` finds.
type CheckReport struct {
	Site      string          `json:"site"`
	Source    string          `json:"source"`
	StartURL  string          `json:"startUrl"`
	URL       string          `json:"url"`
	Title     string          `json:"title"`
	Verdict   Verdict         `json:"verdict"`
	Selectors []SelectorMatch `json:"selectors"`
	Signals   []SignalMatch   `json:"signals,omitempty"`
	Seed      SeedInfo        `json:"seed"`
	// MemoryBytes is the browser's resident memory after the load.
	MemoryBytes int64   `json:"memoryBytes"`
	LoadSeconds float64 `json:"loadSeconds"`
}

// Check loads the site's start page (or url, if set) in a headless
// browser on a copy of the seed profile and reports which selectors and
// signals match, so that UI drift is diagnosed in one command. It waits
// up to the ready timeout for the page to be ready.
func (p *Provider) Check(ctx context.Context, siteName, url string) (*CheckReport, error) {
	site, err := p.sites.Get(siteName)
	if err != nil {
		return nil, err
	}
	if url != "" {
		if site, err = site.WithStartURL(url); err != nil {
			return nil, err
		}
	}
	chromium, err := findChromium(p.cfg.Chromium)
	if err != nil {
		return nil, err
	}
	root := filepath.Join(p.cfg.Dir, "check")
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, err
	}
	profile, err := os.MkdirTemp(root, site.Name+"-")
	if err != nil {
		return nil, err
	}
	defer removeProfile(profile)
	if err := cloneSeed(p.cfg.Dir, site.Name, profile); err != nil {
		return nil, err
	}
	start := time.Now()
	b, err := startChrome(ctx, chromium, profile, true, p.cfg.Args, filepath.Join(profile, "chrome.log"), p.cfg.StartTimeout)
	if err != nil {
		return nil, err
	}
	defer b.kill()
	t, err := attach(ctx, b, "", p.cfg.StartTimeout)
	if err != nil {
		return nil, err
	}
	defer t.close()
	if err := t.navigate(ctx, site.StartURL); err != nil {
		return nil, loadError(ctx, p.name, site, url, "check", err)
	}
	rep := &CheckReport{Site: site.Name, Source: site.Source, StartURL: site.StartURL, Seed: seedInfo(p.cfg.Dir, site.Name)}
	// A page that is not ready may still be loading: wait until the
	// verdict holds for a second (or is ready), at most the ready timeout.
	deadline := time.Now().Add(p.cfg.ReadyTimeout)
	var pr probe
	var since time.Time
	for {
		if pr, err = t.probe(ctx, site); err != nil {
			return nil, err
		}
		v := classify(site, pr)
		if v.State != rep.Verdict.State {
			since = time.Now()
		}
		rep.Verdict = v
		if v.State == StateReady || time.Now().After(deadline) || (v.State != StateUnknown && time.Since(since) >= time.Second) {
			break
		}
		if err := sleep(ctx, p.cfg.PollInterval); err != nil {
			return nil, err
		}
	}
	rep.LoadSeconds = time.Since(start).Seconds()
	rep.URL, rep.Title, rep.MemoryBytes = pr.URL, pr.Title, b.memory()
	ready := map[string]bool{}
	for _, k := range site.Signals.Ready {
		ready[k] = true
	}
	inTurn := map[string]bool{"turn_text": true, "thinking": true, "action_bar": true, "copy": true, "error_turn": true, "retry": true, "artifact": true}
	for k, sel := range site.Selectors.byKey() {
		if sel == "" {
			continue
		}
		rep.Selectors = append(rep.Selectors, SelectorMatch{Key: k, Selector: sel, Count: pr.Match[jsonKey(k)], Ready: ready[k], InTurn: inTurn[k]})
	}
	sort.Slice(rep.Selectors, func(i, j int) bool { return rep.Selectors[i].Key < rep.Selectors[j].Key })
	text := strings.ToLower(pr.Text + " " + pr.Title)
	for _, g := range []struct {
		state PageState
		list  []string
	}{
		{StateLoginRequired, site.Signals.LoginText}, {StateChallenge, site.Signals.ChallengeText},
		{StateOutage, site.Signals.OutageText}, {StateRateLimited, site.Signals.RateLimitText},
	} {
		for _, sig := range g.list {
			if sig != "" && strings.Contains(text, strings.ToLower(sig)) {
				rep.Signals = append(rep.Signals, SignalMatch{State: g.state, Signal: sig})
			}
		}
	}
	return rep, nil
}

// ErrPageLoad is a site's start page that did not load at all (no
// server, a DNS name that does not resolve, a refused connection): a
// page that loads, whatever it shows, is judged by its verdict instead.
var ErrPageLoad = errors.New("browser: the page did not load")

// loadError is a start page that did not load in belay browser verb
// (check, login) of provider prov, with what to do; siteURL is the --url it
// was given. An interrupted load (ctx done) is that, not a page that did
// not load.
func loadError(ctx context.Context, prov string, site *Site, siteURL, verb string, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return fmt.Errorf("%w: %s: %w; check that the URL is right and that the site answers from this machine (its network, a proxy), then run again: %s",
		ErrPageLoad, site.StartURL, err, cmdline.BrowserSite(verb, prov, site.Name, siteURL))
}

// LoginOptions configure Login.
type LoginOptions struct {
	// Import copies this Chromium profile directory into the seed instead
	// of opening a browser for a person to log in.
	Import string
	// URL replaces the site's start URL.
	URL string
	// Opened is called once the headed browser shows the site.
	Opened func(url string)
}

// Login refreshes the seed profile of a site: it opens a headed browser on
// the seed for a person to log in (and returns when they close it or ctx
// ends), or imports a profile directory. The seed lock keeps runs from
// cloning a half-written seed meanwhile. It then checks the seed.
func (p *Provider) Login(ctx context.Context, siteName string, o LoginOptions) (*CheckReport, error) {
	site, err := p.sites.Get(siteName)
	if err != nil {
		return nil, err
	}
	if o.URL != "" {
		if site, err = site.WithStartURL(o.URL); err != nil {
			return nil, err
		}
	}
	l, err := lockSeed(p.cfg.Dir, site.Name, 0)
	if err != nil {
		return nil, err
	}
	seed := seedDir(p.cfg.Dir, site.Name)
	if o.Import != "" {
		err = importSeed(o.Import, seed)
	} else {
		err = p.headedLogin(ctx, site, o.URL, seed, o.Opened)
	}
	if err == nil {
		err = writeMarker(seed, site.Name)
	}
	l.unlock()
	if err != nil {
		return nil, err
	}
	rep, err := p.Check(context.WithoutCancel(ctx), site.Name, o.URL)
	if err == nil && rep.Verdict.State == StateLoginRequired {
		// The seed is not logged in: it is not marked as if it were.
		if rerr := os.Remove(filepath.Join(seed, seedMarker)); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			return rep, rerr
		}
		rep.Seed = seedInfo(p.cfg.Dir, site.Name)
	}
	return rep, err
}

func (p *Provider) headedLogin(ctx context.Context, site *Site, siteURL, seed string, opened func(string)) error {
	chromium, err := findChromium(p.cfg.Chromium)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(seed, 0o700); err != nil {
		return err
	}
	b, err := startChrome(ctx, chromium, seed, false, p.cfg.Args, filepath.Join(p.cfg.Dir, "seeds", site.Name+"-login.log"), p.cfg.StartTimeout)
	if err != nil {
		return fmt.Errorf("browser: open a window (is there a display?): %w", err)
	}
	defer b.kill()
	t, err := attach(ctx, b, "", p.cfg.StartTimeout)
	if err != nil {
		return err
	}
	err = t.navigate(ctx, site.StartURL)
	t.close()
	if err != nil {
		return loadError(ctx, p.name, site, siteURL, "login", err)
	}
	if opened != nil {
		opened(site.StartURL)
	}
	for b.alive() {
		if err := sleep(ctx, 500*time.Millisecond); err != nil {
			return nil // interrupted: the profile is kept as it is
		}
	}
	return nil
}

// importSeed replaces the seed with a copy of a profile directory,
// keeping the previous seed as <seed>.prev.
func importSeed(src, seed string) error {
	fi, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("browser: import: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("browser: import: %s is not a directory", src)
	}
	if _, err := os.Stat(filepath.Join(src, "Preferences")); err == nil {
		if _, err := os.Stat(filepath.Join(src, "Local State")); err != nil {
			// A profile folder (Default, "Profile 1") inside a user data
			// directory: its cookies need the directory's Local State,
			// and its browser's lock is in the directory.
			parent := filepath.Dir(src)
			return fmt.Errorf("browser: import: %s is a profile folder inside a Chromium user data directory; import the directory that holds it (quit that browser first): belay browser login SITE --import %s", src, parent)
		}
	}
	if _, err := os.Lstat(filepath.Join(src, "SingletonLock")); err == nil {
		return errors.New("browser: import: the profile is in use; quit that browser first")
	}
	staged := seed + ".staging"
	if err := os.RemoveAll(staged); err != nil {
		return err
	}
	if err := os.MkdirAll(staged, 0o700); err != nil {
		return err
	}
	if err := copyTree(src, staged); err != nil {
		_ = os.RemoveAll(staged)
		return fmt.Errorf("browser: import: %w", err)
	}
	prev := seed + ".prev"
	_ = os.RemoveAll(prev)
	if _, err := os.Stat(seed); err == nil {
		if err := os.Rename(seed, prev); err != nil {
			return err
		}
	}
	return os.Rename(staged, seed)
}

func writeMarker(seed, site string) error {
	b, _ := json.Marshal(map[string]any{"site": site, "at": time.Now().UTC()})
	return os.WriteFile(filepath.Join(seed, seedMarker), b, 0o600)
}

// SeedInfo describes the seed profile of a site.
func (p *Provider) SeedInfo(site string) SeedInfo { return seedInfo(p.cfg.Dir, site) }
