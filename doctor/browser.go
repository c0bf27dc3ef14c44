package doctor

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/belayhq/belay"
)

// BrowserReport is the binding of a browser session (a ref of kind
// "browser"): the site, how far the send got, the target and the
// conversation, and the page state the last failure showed. It holds no
// prompt or answer text.
type BrowserReport struct {
	Site string `json:"site"`
	// SendPhase is open (nothing typed), intent (the prompt may have been
	// sent), sent (verified: never sent again) or done.
	SendPhase       string `json:"sendPhase"`
	ConversationURL string `json:"conversationUrl,omitempty"`
	Target          string `json:"target,omitempty"`
	// BrowserPID is the run's browser process (started detached).
	BrowserPID int `json:"browserPid,omitempty"`
	// Rebinds counts reopenings of the conversation in a new tab or
	// browser after the bound target was lost.
	Rebinds int `json:"rebinds,omitempty"`
	// PageState is what the last failure of the session's run says the
	// page showed: login_required, challenge_blocking, rate_limited,
	// transient_outage, unknown (UI drift), target_lost; "" if none.
	PageState string `json:"pageState,omitempty"`
	// The seed profile of the site, as the command line sees it in the
	// data directory (the pure diagnosis cannot): when a login last
	// finished, its age, and whether a login holds its lock now.
	SeedLoggedAt   time.Time `json:"seedLoggedAt,omitzero"`
	SeedAgeSeconds *int64    `json:"seedAgeSeconds,omitempty"`
	SeedLock       string    `json:"seedLock,omitempty"`

	run string // the run the binding is of
}

// browserCursor is the part of the browser provider's cursor the doctor
// reads.
type browserCursor struct {
	Run     string `json:"run"`
	Site    string `json:"site"`
	Phase   string `json:"phase"`
	Rebinds int    `json:"rebinds"`
	Chrome  struct {
		PID int `json:"pid"`
	} `json:"chrome"`
}

// browserReport describes the session's browser binding, if the browser
// provider made its ref.
func (d *diagnosis) browserReport() *BrowserReport {
	ref := d.in.Session.Ref
	if ref.Kind != "browser" {
		return nil
	}
	var c browserCursor
	if json.Unmarshal([]byte(ref.Cursor), &c) != nil || c.Site == "" {
		return nil // not the browser provider's cursor
	}
	b := &BrowserReport{
		Site: token(c.Site), SendPhase: token(c.Phase), ConversationURL: redactURL(ref.URL),
		Target: shorten(ref.Target), BrowserPID: c.Chrome.PID, Rebinds: c.Rebinds, run: c.Run,
	}
	r := d.last
	if d.active != nil {
		r = d.active
	}
	if r != nil && r.Error != nil {
		b.PageState = map[belay.ErrorClass]string{
			belay.ClassAuth: "login_required", belay.ClassChallenge: "challenge_blocking",
			belay.ClassRateLimited: "rate_limited", belay.ClassTransient: "transient_outage",
			belay.ClassUIDrift: "unknown", belay.ClassTargetLost: "target_lost",
		}[r.Error.Class]
	}
	return b
}

// browserCommand is the command that fixes a browser session's problem,
// in place of the generic one: logging in again or solving a challenge
// happens in belay browser login's window, and UI drift is diagnosed with
// belay browser check.
func browserCommand(b *BrowserReport, failed *belay.Run, action Action, reason string) (string, string) {
	if b == nil || b.Site == "" {
		return "", reason
	}
	switch {
	case action == ActionResend && failed != nil && b.run == failed.ID && (b.SendPhase == "sent" || b.SendPhase == "intent"):
		// The prompt reached the site (or may have): a retry does not ask
		// again, it adopts the send and reads the site's answer.
		id := token(failed.ID)
		return cmdRetry(id), fmt.Sprintf("Run %s failed with %s after its prompt was sent to %s, which may have finished the answer since; retrying it reads that answer from the conversation without sending the prompt again.",
			id, errorClass(failed), b.Site)
	case action == ActionReauth:
		return cmdBrowserLogin(b.Site), reason + fmt.Sprintf(" Log in to %s once in the window it opens; the next run copies that profile.", b.Site)
	case action == ActionSolveChallenge:
		return cmdBrowserLogin(b.Site), reason + fmt.Sprintf(" Solve the %s challenge in the window it opens.", b.Site)
	case b.PageState == "unknown" && (action == ActionResend || action == ActionResolveManually):
		return cmdBrowserCheck(b.Site), reason + fmt.Sprintf(" The page did not match the %s site profile: check it, fix the profile, then resend.", b.Site)
	}
	return "", reason
}
