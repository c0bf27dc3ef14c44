package doctor

import (
	"encoding/json"
	"fmt"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
)

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
	d.browserRun = c.Run
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
func browserCommand(b *apitype.BrowserReport, bound string, failed *belay.Run, action apitype.DoctorAction, reason string) (string, string) {
	if b == nil || b.Site == "" {
		return "", reason
	}
	switch {
	case action == apitype.ActionResend && failed != nil && bound == failed.ID && (b.SendPhase == "sent" || b.SendPhase == "intent"):
		// The prompt reached the site (or may have): a retry does not ask
		// again, it adopts the send and reads the site's answer.
		id := token(failed.ID)
		return cmdRetry(id), fmt.Sprintf("Run %s failed with %s after its prompt was sent to %s, which may have finished the answer since; retrying it reads that answer from the conversation without sending the prompt again.",
			id, errorClass(failed), b.Site)
	case action == apitype.ActionReauth:
		return cmdBrowserLogin(b.Site), reason + fmt.Sprintf(" Log in to %s once in the window it opens; the next run copies that profile.", b.Site)
	case action == apitype.ActionSolveChallenge:
		return cmdBrowserLogin(b.Site), reason + fmt.Sprintf(" Solve the %s challenge in the window it opens.", b.Site)
	case b.PageState == "unknown" && (action == apitype.ActionResend || action == apitype.ActionResolveManually):
		return cmdBrowserCheck(b.Site), reason + fmt.Sprintf(" The page did not match the %s site profile: check it, fix the profile, then resend.", b.Site)
	}
	return "", reason
}
