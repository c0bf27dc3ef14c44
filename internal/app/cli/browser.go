package cli

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/internal/app/daemon"
	"github.com/belayhq/belay/provider/browser"
)

type browserOptions struct {
	globalOptions
	Provider string
	URL      string
	Import   string
}

func newBrowserCmd(stdio Stdio) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "browser",
		Short: "Set up and diagnose the browser provider: site profiles, logins, checks",
		Long: `The browser provider drives a chat web UI (ChatGPT, Gemini, Grok,
Claude.ai) in an isolated headless Chromium. Log in to a site once with
belay browser login SITE; every run then gets its own copy of that
profile. belay browser check SITE loads the site and reports which
selectors and signals of its profile match. See docs/browser.md.`,
	}
	cmd.AddCommand(newBrowserCheckCmd(stdio), newBrowserLoginCmd(stdio), newBrowserSitesCmd(stdio), newBrowserReapCmd(stdio))
	return cmd
}

func newBrowserReapCmd(stdio Stdio) *cobra.Command {
	var o browserOptions
	cmd := &cobra.Command{
		Use:   "reap",
		Short: "End the run browsers that no daemon follows (after a daemon was killed and not restarted)",
		Long: `A run's browser outlives its daemon so that a restart can reattach to it.
If the daemon was killed and is not started again, those browsers keep
running. belay browser reap ends every run browser whose recorded owner
(the daemon that started it or last reattached to it) is gone, and
deletes its profile copy. It proves first that each process is still that
browser (pid, start time, leader of its own session): nothing else is
signalled. A run that was still going resumes at the next daemon start
by reopening its conversation in a fresh browser. A starting daemon does
the same by itself for the runs that ended, keeping the browsers of the
runs it resumes.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := browserProvider(stdio, o)
			if err != nil {
				return err
			}
			reaped, rerr := p.Reap(browser.ReapOptions{})
			if o.JSON {
				if reaped == nil {
					reaped = []browser.Reaped{}
				}
				if err := writeJSON(stdio.Out, map[string]any{"reaped": reaped}); err != nil {
					return err
				}
			} else {
				for _, r := range reaped {
					what := "ended browser"
					if !r.Ended {
						what = "cleared the record of browser"
					}
					fmt.Fprintf(stdio.Out, "%s pid %d of run %s (session %s): %s\n", what, r.PID, r.Run, r.Session, r.Why)
				}
				if len(reaped) == 0 && rerr == nil {
					fmt.Fprintln(stdio.Err, "belay: no run browser without a live owner")
				}
			}
			return rerr
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Data, "data", "", dataFlagHelp)
	f.BoolVar(&o.JSON, "json", false, "print {\"reaped\": [...]}")
	f.StringVar(&o.Provider, "provider", daemon.BrowserProvider, "the browser provider whose config to use")
	return cmd
}

func (o *browserOptions) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.Data, "data", "", dataFlagHelp)
	f.BoolVar(&o.JSON, "json", false, "print the report as JSON")
	f.StringVar(&o.Provider, "provider", daemon.BrowserProvider, "the browser provider whose config to use")
	f.StringVar(&o.URL, "url", "", "load this URL instead of the site's start URL")
}

// browserProvider builds the provider as the daemon would run it.
func browserProvider(stdio Stdio, o browserOptions) (*browser.Provider, error) {
	dir, err := o.dataDir(stdio)
	if err != nil {
		return nil, err
	}
	cfg, err := daemon.BrowserConfig(dir, o.Provider)
	if err != nil {
		return nil, err
	}
	return browser.New(o.Provider, cfg)
}

func newBrowserCheckCmd(stdio Stdio) *cobra.Command {
	var o browserOptions
	cmd := &cobra.Command{
		Use:   "check SITE",
		Short: "Load a site in a headless browser and report which selectors and signals match",
		Args:  exactSite("belay browser check chatgpt"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := browserProvider(stdio, o)
			if err != nil {
				return err
			}
			rep, err := p.Check(cmd.Context(), args[0], o.URL)
			if err != nil {
				return err
			}
			return printCheck(stdio, o.JSON, rep, o.Provider, o.URL)
		},
	}
	o.flags(cmd)
	return cmd
}

func newBrowserLoginCmd(stdio Stdio) *cobra.Command {
	var o browserOptions
	cmd := &cobra.Command{
		Use:   "login SITE",
		Short: "Log in to a site once in a window (or import a profile); runs copy that profile",
		Long: `Opens a browser window on the site's seed profile: log in there, then
close the window. With --import DIR, copies a Chromium profile directory
(the browser using it must be closed) into the seed instead. Either way the
seed is then checked headless. Runs never use the seed itself: each gets a
copy in its run directory, deleted when the run ends.`,
		Args: exactSite("belay browser login chatgpt"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := browserProvider(stdio, o)
			if err != nil {
				return err
			}
			lo := browser.LoginOptions{URL: o.URL, Opened: func(url string) {
				fmt.Fprintf(stdio.Err, "belay: log in to %s in the window that opened (%s), then close the window\n", args[0], url)
			}}
			if o.Import != "" {
				if lo.Import, err = filepath.Abs(o.Import); err != nil {
					return err
				}
			}
			rep, err := p.Login(cmd.Context(), args[0], lo)
			if err != nil {
				return err
			}
			return printCheck(stdio, o.JSON, rep, o.Provider, o.URL)
		},
	}
	o.flags(cmd)
	cmd.Flags().StringVar(&o.Import, "import", "", "copy this Chromium profile directory into the seed instead of opening a window")
	return cmd
}

func newBrowserSitesCmd(stdio Stdio) *cobra.Command {
	var o browserOptions
	cmd := &cobra.Command{
		Use:   "sites",
		Short: "List the site profiles (built in, and overrides in <data>/browser/sites)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := browserProvider(stdio, o)
			if err != nil {
				return err
			}
			names, err := p.Sites().Names()
			if err != nil {
				return err
			}
			type row struct {
				Name     string           `json:"name"`
				Source   string           `json:"source"`
				StartURL string           `json:"startUrl,omitempty"`
				Seed     browser.SeedInfo `json:"seed"`
				Error    string           `json:"error,omitempty"`
			}
			var rows []row
			for _, n := range names {
				r := row{Name: n, Seed: p.SeedInfo(n)}
				if s, err := p.Sites().Get(n); err != nil {
					r.Error = err.Error()
				} else {
					r.Source, r.StartURL = s.Source, s.StartURL
				}
				rows = append(rows, r)
			}
			if o.JSON {
				return writeJSON(stdio.Out, rows)
			}
			for _, r := range rows {
				seed := "no login"
				if !r.Seed.LoggedAt.IsZero() {
					seed = "logged in " + r.Seed.LoggedAt.Format(time.DateTime)
				}
				if r.Error != "" {
					fmt.Fprintf(stdio.Out, "%-12s error: %s\n", r.Name, r.Error)
					continue
				}
				fmt.Fprintf(stdio.Out, "%-12s %-26s %-9s %s\n", r.Name, r.StartURL, r.Source, seed)
			}
			return nil
		},
	}
	o.flags(cmd)
	return cmd
}

func exactSite(hint string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != 1 {
			return usagef(hint, "%s takes one site name (belay browser sites lists them)", cmd.CommandPath())
		}
		return nil
	}
}

// printCheck prints a check report, and fails (exit 1) when the page is
// not ready, with the next action.
func printCheck(stdio Stdio, asJSON bool, rep *browser.CheckReport, prov, siteURL string) error {
	if asJSON {
		if err := writeJSON(stdio.Out, rep); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(stdio.Out, "site     %s (%s)\nurl      %s\ntitle    %s\nstate    %s: %s\n", rep.Site, rep.Source, rep.URL, rep.Title, rep.Verdict.State, rep.Verdict.Reason)
		seed := "none (not logged in: belay browser login " + rep.Site + ")"
		if rep.Seed.Exists {
			seed = rep.Seed.Dir
			if !rep.Seed.LoggedAt.IsZero() {
				seed += fmt.Sprintf(", logged in %s ago", time.Since(rep.Seed.LoggedAt).Round(time.Minute))
			}
		}
		fmt.Fprintf(stdio.Out, "seed     %s\nloaded   in %.1fs, browser memory %d MiB (PSS)\n", seed, rep.LoadSeconds, rep.MemoryBytes>>20)
		fmt.Fprintln(stdio.Out, "selectors:")
		for _, s := range rep.Selectors {
			mark := "ok  "
			switch {
			case s.Count == 0 && s.Ready:
				mark = "MISS"
			case s.Count == 0:
				mark = "-   "
			}
			note := ""
			if s.Ready {
				note = " (needed for ready)"
			} else if s.InTurn {
				note = " (in the last answer)"
			}
			fmt.Fprintf(stdio.Out, "  %s %-14s %3d  %s%s\n", mark, s.Key, s.Count, s.Selector, note)
		}
		for _, s := range rep.Signals {
			fmt.Fprintf(stdio.Out, "signal   %s: %q\n", s.State, s.Signal)
		}
	}
	if rep.Verdict.State != browser.StateReady {
		err := rep.Verdict.Error(prov, rep.Site, siteURL)
		if rep.Verdict.State == browser.StateUnknown {
			err = fmt.Errorf("%w; fix the profile in %s", err, filepath.Join("<data>", "browser", "sites", rep.Site+".toml"))
		}
		return &exitError{code: ExitError, err: fmt.Errorf("%s", strings.TrimPrefix(err.Error(), "ui_drift: "))}
	}
	return nil
}

// printBrowserDoctor prints a browser session's binding in
// `belay sessions doctor`.
func printBrowserDoctor(stdio Stdio, b *apitype.BrowserReport) {
	if b == nil {
		return
	}
	fmt.Fprintf(stdio.Out, "browser site %s, send %s", b.Site, b.SendPhase)
	if b.ConversationURL != "" {
		fmt.Fprintf(stdio.Out, ", conversation %s", b.ConversationURL)
	}
	if b.Target != "" {
		fmt.Fprintf(stdio.Out, ", target %s", b.Target)
	}
	if b.BrowserPID != 0 {
		fmt.Fprintf(stdio.Out, ", browser pid %d", b.BrowserPID)
	}
	if b.Rebinds > 0 {
		fmt.Fprintf(stdio.Out, ", rebound %d times", b.Rebinds)
	}
	if b.PageState != "" {
		fmt.Fprintf(stdio.Out, ", page %s", b.PageState)
	}
	fmt.Fprintln(stdio.Out)
	switch {
	case b.SeedAgeSeconds != nil:
		fmt.Fprintf(stdio.Out, "seed   logged in %s ago", time.Duration(*b.SeedAgeSeconds)*time.Second)
	default:
		fmt.Fprintf(stdio.Out, "seed   never logged in (belay browser login %s)", b.Site)
	}
	if b.SeedLock != "" {
		fmt.Fprintf(stdio.Out, ", lock %s", b.SeedLock)
	}
	fmt.Fprintln(stdio.Out)
}

// addSeedFacts adds what the data directory says about a browser
// session's seed profile to its doctor report: when a login last
// finished, and whether one holds the seed's lock now. Without a data
// directory it adds nothing.
func addSeedFacts(stdio Stdio, g globalOptions, b *apitype.BrowserReport) {
	if b == nil || b.Site == "" {
		return
	}
	dir, err := g.dataDir(stdio)
	if err != nil {
		return
	}
	root := daemon.BrowserDir(dir)
	if cfg, err := daemon.BrowserConfig(dir, ""); err == nil && cfg.Dir != "" {
		root = cfg.Dir
	}
	if si := browser.Seed(root, b.Site); !si.LoggedAt.IsZero() {
		b.SeedLoggedAt = si.LoggedAt.UTC()
		age := int64(time.Since(si.LoggedAt).Seconds())
		b.SeedAgeSeconds = &age
	}
	b.SeedLock = "free"
	if browser.SeedLocked(root, b.Site) {
		b.SeedLock = "held (a login or import is open)"
	}
}
