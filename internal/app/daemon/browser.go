package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/belayhq/belay/provider"
	"github.com/belayhq/belay/provider/browser"
)

// BrowserProvider is the name of the built-in browser provider.
const BrowserProvider = "browser"

// DefaultBrowserCap is the admission cap of each browser provider when
// [limits.per_provider] does not set one: every run holds a browser.
const DefaultBrowserCap = 2

func init() {
	providerTypes["browser"] = func(name string, c *Config, prim any, dataDir string) (provider.Provider, error) {
		cfg, err := decodeBrowser(c, name, prim, dataDir)
		if err != nil {
			return nil, err
		}
		return browser.New(name, cfg)
	}
}

func decodeBrowser(c *Config, name string, prim any, dataDir string) (browser.Config, error) {
	var cfg struct {
		Type string `toml:"type"`
		browser.Config
	}
	if prim != nil {
		if err := c.decode(name, prim, &cfg); err != nil {
			return cfg.Config, err
		}
	}
	if cfg.Dir == "" {
		cfg.Dir = BrowserDir(dataDir)
	}
	cfg.ArtifactDir = func(session, run string) string { return ArtifactDir(dataDir, session, run) }
	if st := c.store; st != nil {
		cfg.RunActive = func(_, run string) bool {
			r, err := st.Run(context.Background(), run)
			return err != nil || !r.Status.Terminal()
		}
	}
	return cfg.Config, nil
}

// reapBrowsers ends, as the daemon starts and before it resumes any run,
// the browsers that runs of an earlier daemon left running and that no
// run will reattach to (their run ended while no daemon followed it).
// The browsers of runs that will resume are kept for them.
func reapBrowsers(reg provider.Registry, log *slog.Logger) {
	for name, p := range reg {
		bp, ok := p.(*browser.Provider)
		if !ok || bp.Config().RunActive == nil {
			continue
		}
		reaped, err := bp.Reap(browser.ReapOptions{Active: bp.Config().RunActive})
		for _, r := range reaped {
			log.Info("reaped a browser", "provider", name, "session", r.Session, "run", r.Run, "pid", r.PID, "ended", r.Ended, "why", r.Why)
		}
		if err != nil {
			// Hygiene, not correctness: what could not be judged is left
			// running, and belay browser reap reports it.
			log.Warn("reap browsers", "provider", name, "err", err)
		}
	}
}

// BrowserDir is where the browser providers keep seed profiles, site
// profile overrides and run profiles: <data>/browser.
func BrowserDir(dataDir string) string { return filepath.Join(dataDir, "browser") }

// ArtifactDir is where a run's artifacts go:
// <data>/sessions/<session>/artifacts/<run>.
func ArtifactDir(dataDir, session, run string) string {
	return filepath.Join(dataDir, "sessions", session, "artifacts", run)
}

// addBrowsers adds the built-in browser provider (unless the config names
// a provider "browser") and gives every browser provider its default
// admission cap.
func addBrowsers(c *Config, reg provider.Registry, dataDir string) error {
	if _, ok := reg[BrowserProvider]; !ok {
		cfg, err := decodeBrowser(c, BrowserProvider, nil, dataDir)
		if err != nil {
			return err
		}
		p, err := browser.New(BrowserProvider, cfg)
		if err != nil {
			return fmt.Errorf("config: built-in browser provider: %w", err)
		}
		reg[BrowserProvider] = p
	}
	for name, p := range reg {
		if _, ok := p.(*browser.Provider); !ok {
			continue
		}
		if _, set := c.Limits.PerProvider[name]; set {
			continue
		}
		if c.Limits.PerProvider == nil {
			c.Limits.PerProvider = map[string]int{}
		}
		c.Limits.PerProvider[name] = DefaultBrowserCap
	}
	return nil
}

// BrowserConfig returns the configuration of the browser provider name
// (BrowserProvider if empty) as the daemon in dataDir would run it, for
// the commands that drive a browser outside a run (check, login).
func BrowserConfig(dataDir, name string) (browser.Config, error) {
	if name == "" {
		name = BrowserProvider
	}
	c, err := LoadConfig(dataDir)
	if err != nil {
		return browser.Config{}, err
	}
	prim, ok := c.Providers[name]
	if !ok {
		if name != BrowserProvider {
			return browser.Config{}, fmt.Errorf("config: no provider %q", name)
		}
		return decodeBrowser(c, name, nil, dataDir)
	}
	var head struct {
		Type string `toml:"type"`
	}
	if err := c.md.PrimitiveDecode(prim, &head); err != nil || head.Type != "browser" {
		return browser.Config{}, fmt.Errorf("config: provider %q is not of type browser", name)
	}
	return decodeBrowser(c, name, prim, dataDir)
}
