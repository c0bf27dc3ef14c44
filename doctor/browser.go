package doctor

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
)

// browserCursor is the part of the browser provider's cursor the doctor
// reads.
type browserCursor struct {
	Run     string `json:"run"`
	Site    string `json:"site"`
	SiteURL string `json:"siteUrl"`
	Phase   string `json:"phase"`
	Rebinds int    `json:"rebinds"`
	Chrome  struct {
		PID int `json:"pid"`
	} `json:"chrome"`
}

// browserReport describes the session's browser binding, if the browser
// provider made its ref.
func (d *diagnosis) browserReport() *apitype.BrowserReport {
	ref := d.in.Session.Ref
	if ref.Kind != "browser" {
		return nil
	}
	var c browserCursor
	if json.Unmarshal([]byte(ref.Cursor), &c) != nil || c.Site == "" {
		return nil // not the browser provider's cursor
	}
	b := &apitype.BrowserReport{
		Site: token(c.Site), SendPhase: token(c.Phase), ConversationURL: redactURL(ref.URL),
		Target: shorten(ref.Target), BrowserPID: c.Chrome.PID, Rebinds: c.Rebinds,
	}
	d.browserRun, d.browserProvider = c.Run, token(d.in.Session.Provider)
	for _, r := range d.runs {
		if r.ID == c.Run && r.Provider != "" {
			d.browserProvider = token(r.Provider)
		}
	}
	// The start URL the run was sent with goes into the commands when
	// the report would show it as it is (redaction keeps it).
	d.browserURL, d.browserURLHidden = c.SiteURL, false
	// (A trailing slash is all redaction drops from a plain start URL.)
	if c.SiteURL != "" && redactURL(c.SiteURL) != strings.TrimSuffix(c.SiteURL, "/") {
		d.browserURL, d.browserURLHidden = "", true
	}
	r := d.last
	if d.active != nil {
		r = d.active
	}
	// The page state is the bound run's: a later run of another provider
	// in the session (an API's 429) says nothing of the site's page.
	if r != nil && r.Error != nil && r.ID == c.Run {
		b.PageState = map[belay.ErrorClass]string{
			belay.ClassAuth: "login_required", belay.ClassChallenge: "challenge_blocking",
			belay.ClassRateLimited: "rate_limited", belay.ClassTransient: "transient_outage",
			belay.ClassUIDrift: "unknown", belay.ClassTargetLost: "target_lost",
		}[r.Error.Class]
	}
	return b
}

// browserCommand is the next action, command and reason that fix a
// browser session's problem, in place of the generic ones: logging in
// again or solving a challenge happens in belay browser login's window,
// UI drift is diagnosed with belay browser check (both at the start URL
// the run was sent with, siteURL), and a prompt that may have gone to a
// conversation belay never saw is not asked again (the provider refuses
// to). urlHidden says the run had a start URL the report does not show.
// An empty command keeps the generic ones.
func (d *diagnosis) browserCommand(b *apitype.BrowserReport, failed *belay.Run, rule string, action apitype.DoctorAction, reason string) (apitype.DoctorAction, string, string) {
	if b == nil || b.Site == "" {
		return action, "", reason
	}
	bound, prov, siteURL := d.browserRun, d.browserProvider, d.browserURL
	hidden := ""
	if d.browserURLHidden {
		hidden = " The run was sent with its own start URL (--site-url), which this report does not show: add --url with it."
	}
	sentHere := failed != nil && bound == failed.ID
	switch {
	case sentHere && b.SendPhase == "intent" && b.ConversationURL == "" && (action == apitype.ActionResend || action == apitype.ActionResolveManually):
		id := token(failed.ID)
		return apitype.ActionResolveManually, cmdRead(id), fmt.Sprintf("Run %s failed with %s after recording its intent to send its prompt to %s, before belay saw the conversation: the prompt may be on the site, and belay will not send it again in this session (a retry refuses). Look at the site; to ask again, send the prompt in a new session (belay send --site %s).",
			id, errorClass(failed), b.Site, b.Site)
	case action == apitype.ActionResend && sentHere && (b.SendPhase == "sent" || b.SendPhase == "intent"):
		// The prompt reached the site (or may have): a retry does not ask
		// again, it adopts the send and reads the site's answer.
		id := token(failed.ID)
		return action, cmdRetry(id), fmt.Sprintf("Run %s failed with %s after its prompt was sent to %s, which may have finished the answer since; retrying it reads that answer from the conversation without sending the prompt again.",
			id, errorClass(failed), b.Site)
	case action == apitype.ActionReauth:
		return action, cmdBrowserLogin(prov, b.Site, siteURL), reason + fmt.Sprintf(" Log in to %s once in the window it opens; the next run copies that profile.", b.Site) + hidden
	case action == apitype.ActionSolveChallenge:
		return action, cmdBrowserLogin(prov, b.Site, siteURL), reason + fmt.Sprintf(" Solve the %s challenge in the window it opens.", b.Site) + hidden
	case rule == "failed_backoff" && sentHere && b.PageState == "rate_limited":
		return action, cmdRetry(token(failed.ID)), reason + fmt.Sprintf(" The %s page showed its usage cap, which lifts on the site's own schedule (the page may say when; %s shows it).", b.Site, cmdBrowserCheck(prov, b.Site, siteURL)) + hidden
	case rule == "failed_backoff" && sentHere && b.PageState == "transient_outage":
		return action, cmdRetry(token(failed.ID)), reason + fmt.Sprintf(" The %s page showed an outage (an error page, a network error or a 5xx) on every attempt; %s shows whether it still does.", b.Site, cmdBrowserCheck(prov, b.Site, siteURL)) + hidden
	case b.PageState == "unknown" && (action == apitype.ActionResend || action == apitype.ActionResolveManually):
		return action, cmdBrowserCheck(prov, b.Site, siteURL), reason + fmt.Sprintf(" The page did not match the %s site profile: check it, fix the profile, then resend.", b.Site) + hidden
	}
	return action, "", reason
}
