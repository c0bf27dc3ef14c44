package browser

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/provider"
)

// PageState is what a page is ready for, judged before belay touches it.
type PageState string

// Page states.
const (
	StateReady         PageState = "ready"
	StateLoginRequired PageState = "login_required"
	StateChallenge     PageState = "challenge_blocking"
	StateOutage        PageState = "transient_outage"
	StateRateLimited   PageState = "rate_limited"
	StateModal         PageState = "blocked_by_modal"
	StateUnknown       PageState = "unknown"
)

// Verdict is a page state with the signal that decided it.
type Verdict struct {
	State  PageState `json:"state"`
	Reason string    `json:"reason"`
	// Missing are the ready selectors that did not match.
	Missing []string `json:"missing,omitempty"`
}

// classify judges a probe against a site's signals. Blocking states win
// over ready: a chat shell with a composer under a "session expired"
// banner is not ready.
func classify(s *Site, p probe) Verdict {
	text := strings.ToLower(p.Text + " " + p.Title)
	has := func(list []string) string {
		for _, sig := range list {
			if sig != "" && strings.Contains(text, strings.ToLower(sig)) {
				return sig
			}
		}
		return ""
	}
	if sig := has(s.Signals.ChallengeText); sig != "" {
		return Verdict{State: StateChallenge, Reason: fmt.Sprintf("the page says %q", sig)}
	}
	if u, err := url.Parse(p.URL); err == nil {
		if u.Scheme == "chrome-error" {
			return Verdict{State: StateOutage, Reason: "the site did not answer (a browser error page)"}
		}
		full := u.Host + u.Path
		for _, sig := range s.Signals.LoginURL {
			if sig != "" && strings.Contains(full, sig) {
				return Verdict{State: StateLoginRequired, Reason: fmt.Sprintf("the URL %s is a login page", u.Path)}
			}
		}
		if start, err := url.Parse(s.StartURL); err == nil && u.Scheme != "about" && u.Host != start.Host {
			return Verdict{State: StateLoginRequired, Reason: fmt.Sprintf("the page went to another site (%s)", u.Host)}
		}
	}
	if sig := has(s.Signals.RateLimitText); sig != "" {
		return Verdict{State: StateRateLimited, Reason: fmt.Sprintf("the page says %q", sig)}
	}
	var missing []string
	for _, k := range s.Signals.Ready {
		if p.Match[jsonKey(k)] == 0 {
			missing = append(missing, k)
		}
	}
	if sig := has(s.Signals.LoginText); sig != "" {
		return Verdict{State: StateLoginRequired, Reason: fmt.Sprintf("the page says %q", sig), Missing: missing}
	}
	if sig := has(s.Signals.OutageText); sig != "" && len(missing) > 0 {
		return Verdict{State: StateOutage, Reason: fmt.Sprintf("the page says %q", sig), Missing: missing}
	}
	if p.Modal {
		return Verdict{State: StateModal, Reason: "a dialog covers the page", Missing: missing}
	}
	if len(missing) > 0 {
		return Verdict{State: StateUnknown, Reason: "the page does not match the site profile", Missing: missing}
	}
	if p.Ready != "" && p.Ready != "complete" {
		// The controls are there but the page's scripts may not be.
		return Verdict{State: StateUnknown, Reason: "the page is still loading"}
	}
	return Verdict{State: StateReady, Reason: "every ready selector matches"}
}

// jsonKey turns a TOML selector key (model_picker) into its JSON name
// (modelPicker), as the page functions see the selectors.
func jsonKey(k string) string {
	parts := strings.Split(k, "_")
	for i := 1; i < len(parts); i++ {
		if parts[i] != "" {
			parts[i] = strings.ToUpper(parts[i][:1]) + parts[i][1:]
		}
	}
	return strings.Join(parts, "")
}

// Error maps a page state that is not ready to a belay error with the
// next action a person takes; prov is the browser provider's name and
// siteURL the start URL the page was opened at when not the profile's (""
// for it), which the commands it names use too.
func (v Verdict) Error(prov, site, siteURL string) error {
	var class belay.ErrorClass
	var next string
	switch v.State {
	case StateReady:
		return nil
	case StateLoginRequired:
		class, next = belay.ClassAuth, "log in once: "+LoginCommand(prov, site, siteURL)
	case StateChallenge:
		class, next = belay.ClassChallenge, "solve the challenge in a headed window: "+LoginCommand(prov, site, siteURL)
	case StateOutage:
		class, next = belay.ClassTransient, "the site has an outage; wait and retry"
	case StateRateLimited:
		class, next = belay.ClassRateLimited, "the site's usage limit was reached; wait and retry"
	default:
		class, next = belay.ClassUIDrift, "the page does not look like the site profile; diagnose with: "+CheckCommand(prov, site, siteURL)
	}
	msg := fmt.Sprintf("browser: %s is %s: %s", site, v.State, v.Reason)
	if len(v.Missing) > 0 {
		msg += fmt.Sprintf(" (no match for %s)", strings.Join(v.Missing, ", "))
	}
	return &provider.Error{Class: class, Message: msg + "; " + next}
}
