package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/provider/browser"
)

// failureText says, for people, why a run did not complete (the provider's
// error: class, HTTP status, message as the provider scrubbed it,
// Retry-After) and the exact command to run next.
func failureText(run belay.Run) string {
	var b strings.Builder
	fmt.Fprintf(&b, "run %s %s", run.ID, run.Status)
	if e := run.Error; e != nil {
		fmt.Fprintf(&b, " (%s", e.Class)
		if e.Status > 0 {
			fmt.Fprintf(&b, ", HTTP %d", e.Status)
		}
		b.WriteString(")")
		if e.Message != "" {
			b.WriteString(": " + oneLine(e.Message, 600))
		}
	}
	if run.Reason != "" && (run.Error == nil || !strings.Contains(run.Error.Message, run.Reason)) {
		b.WriteString("; " + oneLine(run.Reason, 300))
	}
	if next := nextStep(run); next != "" {
		b.WriteString("\n" + next)
	}
	return b.String()
}

// nextStep is what to do about a failed or stranded run.
func nextStep(run belay.Run) string {
	retry := "belay runs retry " + run.ID
	doctor := "belay sessions doctor " + run.Session
	if run.Status == belay.RunStranded {
		return "Side effects may have run, so belay did not go on by itself. See what happened: " + doctor
	}
	if run.Status != belay.RunFailed {
		return ""
	}
	var class belay.ErrorClass
	var after time.Duration
	if e := run.Error; e != nil {
		class, after = e.Class, time.Duration(e.RetryAfterSeconds*float64(time.Second))
	}
	if next := browserStep(run, class, retry); next != "" {
		return next
	}
	switch class {
	case belay.ClassAuth:
		return "The provider refused the credentials: check its API key (api_key_env in config.toml, or OPENAI_API_KEY / ANTHROPIC_API_KEY), then: " + retry
	case belay.ClassQuota:
		return "The provider refused for quota or billing: add credit or raise the limit with the provider, then: " + retry
	case belay.ClassChallenge:
		return "The provider shows a challenge: solve it in its window, then: " + retry
	case belay.ClassRateLimited, belay.ClassOverloaded, belay.ClassTransient:
		if after > 0 {
			return fmt.Sprintf("The provider asked to wait %s; after that: %s", after.Round(time.Second), retry)
		}
		return "Try again: " + retry
	case belay.ClassTimeout, belay.ClassInternal:
		return "Try again: " + retry
	case belay.ClassInvalidRequest, belay.ClassContextOverflow, belay.ClassPermissionDenied:
		return "The request itself was refused: change the prompt, --model or options and send it again. Details: " + doctor
	}
	return "Details: " + doctor
}

// browserStep is the next step of a failed browser run, when it differs
// from other providers': logging in and challenges happen in belay
// browser login's window, and a run that sent its prompt is retried by
// reading the site's answer, not by asking again.
func browserStep(run belay.Run, class belay.ErrorClass, retry string) string {
	if run.Ref.Kind != browser.RefKind {
		return ""
	}
	c, err := browser.ParseCursor(run.Ref.Cursor)
	if err != nil || c.Site == "" {
		return ""
	}
	switch {
	case class == belay.ClassAuth:
		return fmt.Sprintf("The site is not logged in: log in once with %s, then: %s", browser.LoginCommand(run.Provider, c.Site, c.SiteURL), retry)
	case class == belay.ClassChallenge:
		return fmt.Sprintf("The site shows a challenge: solve it in the window of %s, then: %s", browser.LoginCommand(run.Provider, c.Site, c.SiteURL), retry)
	case class == belay.ClassUIDrift:
		return fmt.Sprintf("The page did not match the site profile: diagnose with %s, fix the profile, then: %s", browser.CheckCommand(run.Provider, c.Site, c.SiteURL), retry)
	case c.Run == run.ID && c.Phase == "intent" && run.Ref.ID == "":
		// Its conversation was never seen: a retry would refuse to ask
		// again (the prompt may be on the site already).
		return fmt.Sprintf("The prompt may have been sent to a new conversation belay never saw; belay will not send it again in this session. Look at the site; to ask again, send it in a new session: belay send --site %s 'PROMPT'", c.Site)
	case c.Run == run.ID && (c.Phase == "sent" || c.Phase == "intent"):
		return fmt.Sprintf("The prompt was sent; the site may still finish the answer. This reads it without sending the prompt again: %s", retry)
	}
	return ""
}

// oneLine puts text on one line, cut at n bytes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		cut := n
		for cut > 0 && s[cut]&0xC0 == 0x80 {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}
