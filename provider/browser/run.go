package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/provider"
)

// runState is one attempt of a run.
type runState struct {
	// ctx is the attempt's: cancelled when the run is cancelled or the
	// daemon detaches (lost tells those from a browser that went away).
	ctx    context.Context
	p      *Provider
	req    provider.Request
	emit   func(provider.Event) error
	site   *Site
	runDir string
	settle time.Duration
	// attachments are uploaded before the intent.
	attachments []string

	cur     cursor
	b       *chrome
	t       *tab
	url     string // the conversation URL (or the page's before the send)
	conv    string // the conversation id
	emitted int    // bytes of answer text the journal holds
	done    bool
	// adopted: the run reads the answer to its prompt that an earlier run
	// of the session sent (see adopt).
	adopted bool
}

// execute is the attempt: reattach or launch, send at most once, follow.
func (r *runState) execute(ctx context.Context, prev, follow *cursor, siteURL string) error {
	if prev != nil && (prev.Phase == phaseIntent || prev.Phase == phaseSent || prev.Phase == phaseDone || prev.Phase == phaseStopped) {
		r.cur = *prev
		r.url, r.conv = r.req.Ref.URL, r.req.Ref.ID
		if err := r.reattach(ctx); err != nil {
			return err
		}
		if r.cur.Phase == phaseIntent {
			found, err := r.findPrompt(ctx)
			if err != nil {
				return err
			}
			if !found {
				if err := r.sendPrompt(ctx); err != nil {
					return err
				}
			} else if err := r.settleSend(ctx); err != nil {
				return err
			}
		}
		return r.follow(ctx)
	}
	if prev != nil && prev.Phase == phaseOpen {
		// The earlier attempt opened a browser and typed nothing.
		old := prev.Chrome
		old.kill()
		_ = removeProfile(old.Profile)
	}
	r.cur = cursor{Run: r.req.Run, Site: r.site.Name, SiteURL: siteURL, Phase: phaseOpen}
	start := r.site.StartURL
	if follow != nil && follow.Site == r.site.Name && r.req.SessionRef.URL != "" && r.site.Conversation(r.req.SessionRef.URL) != "" {
		// A follow-up continues the session's conversation.
		start = r.req.SessionRef.URL
	}
	if start == r.site.StartURL && follow != nil && follow.Site == r.site.Name && follow.Run != r.req.Run &&
		follow.Phase == phaseIntent && follow.Hash == PromptHash(r.req.Prompt) {
		// An earlier run of the session may have sent this prompt to a
		// new conversation it never saw (its intent has no conversation
		// URL): a new conversation cannot show it, so it is not asked
		// again here.
		return provider.Errorf(belay.ClassTargetLost, "browser: run %s recorded its intent to send this prompt in a new conversation belay never saw: it may have been sent; not sending it again (look at the site; to ask again, start a new session)", follow.Run)
	}
	adopt := start != r.site.StartURL && follow.Run != r.req.Run && follow.Hash == PromptHash(r.req.Prompt) &&
		(follow.Phase == phaseIntent || follow.Phase == phaseSent)
	if err := r.launch(ctx, start); err != nil {
		return err
	}
	if err := r.ref(); err != nil {
		return err
	}
	if err := r.ready(ctx); err != nil {
		return err
	}
	if adopt {
		found, err := r.adopt(ctx, follow)
		if err != nil {
			return err
		}
		if found {
			return r.follow(ctx)
		}
	} else {
		// The conversation's turns render after the page loads: the
		// baseline is taken once they are all there (a follow-up's page
		// shows at least the turns of the run before).
		minA, minU := 0, 0
		if start != r.site.StartURL && follow != nil && (follow.Phase == phaseSent || follow.Phase == phaseDone || follow.Phase == phaseStopped) {
			minA, minU = follow.Baseline+1, follow.Users+1
		}
		if err := r.settleTurns(ctx, minA, minU); err != nil {
			return err
		}
	}
	if r.req.Model != "" {
		// Before the intent: choosing a model sends nothing.
		if err := r.t.selectModel(ctx, r.site, r.req.Model); err != nil {
			var missing *modelMissingError
			if errors.As(err, &missing) {
				return &provider.Error{Class: belay.ClassInvalidRequest, Message: fmt.Sprintf("browser: %s offers no model %q (it offers: %s); send with one of those as --model", r.site.Name, missing.model, strings.Join(missing.offered, ", ")), Err: err}
			}
			return &provider.Error{Class: belay.ClassUIDrift, Message: fmt.Sprintf("browser: choose model %q: %v; diagnose with: %s", r.req.Model, err, CheckCommand(r.p.name, r.site.Name, r.cur.SiteURL)), Err: err}
		}
	}
	if len(r.attachments) > 0 {
		// Also before the intent: an upload sends no message.
		if err := r.upload(ctx); err != nil {
			return err
		}
	}
	if err := r.sendPrompt(ctx); err != nil {
		return err
	}
	return r.follow(ctx)
}

// adopt takes over the send of an earlier run of the session that ended
// (its deadline passed, it failed) after it recorded the intent to send
// the same prompt, or sent it: sending it again would ask the site a
// second time, while the site may well have answered the first. The run
// journals its own intent with the earlier run's baseline, looks for the
// prompt in the conversation past that baseline, and if it is there,
// settles without sending and reads the answer the site gives (finished
// by now, or still coming). An earlier run that never settled its send,
// with nothing past its baseline, did not send: then found is false and
// the caller sends. An earlier settled send whose prompt the conversation
// does not show is an error: it is not sent again.
func (r *runState) adopt(ctx context.Context, prev *cursor) (found bool, err error) {
	r.cur.Phase, r.cur.Hash = phaseIntent, prev.Hash
	r.cur.Baseline, r.cur.Users = prev.Baseline, prev.Users
	r.url, r.conv = r.req.SessionRef.URL, r.req.SessionRef.ID
	if err := r.ref(); err != nil {
		return false, err
	}
	found, err = r.findPrompt(ctx)
	if err != nil {
		return false, err
	}
	if !found {
		if prev.Phase == phaseSent {
			return false, provider.Errorf(belay.ClassTargetLost, "browser: run %s sent this prompt, but the conversation at %s does not show it after %d messages; not sending it again", prev.Run, r.url, prev.Users)
		}
		return false, nil
	}
	r.adopted = true
	r.cur.Evidence = fmt.Sprintf("adopted the send of run %s: its prompt is in the conversation after %d messages", prev.Run, prev.Users)
	return true, r.settleSend(ctx)
}

// upload attaches the run's files in the composer and waits until the
// site shows each one uploaded. A failed upload is transient: nothing was
// sent, so a retry starts over.
func (r *runState) upload(ctx context.Context) error {
	s := r.site.Selectors
	if s.UploadInput == "" {
		return provider.Errorf(belay.ClassInvalidRequest, "browser: the %s profile has no upload_input: it cannot attach files", r.site.Name)
	}
	if err := r.t.setFiles(ctx, s.UploadInput, r.attachments); err != nil {
		return &provider.Error{Class: belay.ClassUIDrift, Message: fmt.Sprintf("browser: attach files: %v; diagnose with: %s", err, CheckCommand(r.p.name, r.site.Name, r.cur.SiteURL)), Err: err}
	}
	deadline := time.Now().Add(r.p.cfg.ArtifactTimeout)
	n := len(r.attachments)
	stable := 0
	for {
		st, err := r.t.chips(ctx, r.site)
		if err != nil {
			return r.lost(err, "read the upload chips")
		}
		if st.Failed {
			return provider.Errorf(belay.ClassTransient, "browser: %s shows a failed upload", r.site.Name)
		}
		done := st.Chips >= n
		if s.FileChipDone != "" {
			done = st.Done >= n
		}
		if done {
			if stable++; stable >= 2 {
				return nil
			}
		} else {
			stable = 0
		}
		if time.Now().After(deadline) {
			return provider.Errorf(belay.ClassTransient, "browser: the upload did not finish in %s", r.p.cfg.ArtifactTimeout)
		}
		if err := sleep(ctx, r.p.cfg.PollInterval); err != nil {
			return err
		}
	}
}

// launch starts a browser on a fresh clone of the site's seed profile and
// opens url in it.
func (r *runState) launch(ctx context.Context, url string) error {
	chromium, err := findChromium(r.p.cfg.Chromium)
	if err != nil {
		return &provider.Error{Class: belay.ClassInvalidRequest, Message: "browser: " + err.Error(), Err: err}
	}
	if err := os.MkdirAll(r.runDir, 0o700); err != nil {
		return internal(err, "create run directory")
	}
	var (
		b *chrome
		t *tab
	)
	for try := 0; ; try++ {
		b, t, err = r.start(ctx, chromium)
		if err == nil || ctx.Err() != nil || try == 1 {
			break
		}
		var pe *provider.Error
		if !errors.As(err, &pe) || pe.Class != belay.ClassTransient {
			break
		}
		// Chromium sometimes dies while starting, or does not answer
		// in time, on a loaded machine: nothing was typed, so once more
		// with a fresh profile.
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	r.b = b
	r.cur.Chrome = *b
	r.t = t
	if err := t.navigate(ctx, url); err != nil {
		return &provider.Error{Class: belay.ClassTransient, Message: fmt.Sprintf("browser: open %s: %v", url, err), Err: err}
	}
	r.url = url
	return nil
}

// start starts one browser on a fresh clone of the site's seed profile,
// records it for the reaper and attaches to its first page. On an error
// nothing is left behind: no browser, no profile, no record.
func (r *runState) start(ctx context.Context, chromium string) (*chrome, *tab, error) {
	profile, err := os.MkdirTemp(r.runDir, fmt.Sprintf("profile%d-", max(r.req.Attempt, 1)))
	if err != nil {
		return nil, nil, internal(err, "create profile directory")
	}
	if err := cloneSeed(r.p.cfg.Dir, r.site.Name, profile); err != nil {
		_ = removeProfile(profile)
		return nil, nil, internal(err, "clone the seed profile")
	}
	b, err := startChrome(ctx, chromium, profile, !r.p.cfg.Headed, r.p.cfg.Args, filepath.Join(r.runDir, "chrome.log"), r.p.cfg.StartTimeout)
	if err != nil {
		_ = removeProfile(profile)
		return nil, nil, &provider.Error{Class: belay.ClassTransient, Message: "browser: " + err.Error(), Err: err}
	}
	if err := writeRecord(r.runDir, b); err != nil {
		b.kill()
		_ = removeProfile(profile)
		return nil, nil, internal(err, "record the browser")
	}
	t, err := attach(ctx, b, "", r.p.cfg.StartTimeout)
	if err != nil {
		r.discard(b)
		// A browser that started but does not answer (a loaded
		// machine): nothing was typed, so a retry is safe.
		return nil, nil, &provider.Error{Class: belay.ClassTransient, Message: "browser: attach to the new browser: " + err.Error(), Err: err}
	}
	return b, t, nil
}

// ref journals the run's binding and cursor (a Sync write).
func (r *runState) ref() error {
	c, err := json.Marshal(r.cur)
	if err != nil {
		return internal(err, "encode cursor")
	}
	ref := belay.ConversationRef{Kind: RefKind, ID: r.conv, URL: r.url, Cursor: string(c)}
	if r.t != nil {
		ref.Target = r.t.id
	}
	return r.emit(provider.Event{Kind: provider.RefUpdate, Ref: &ref})
}

// ready waits for the page to be ready, classifying it before anything
// is typed: a login page, a challenge or a rate limit fails at once (seen
// twice), an outage gets one reload, a modal one dismissal.
func (r *runState) ready(ctx context.Context) error {
	deadline := time.Now().Add(r.p.cfg.ReadyTimeout)
	reloaded, dismissed := false, false
	var last Verdict
	same := 0
	for {
		pr, err := r.t.probe(ctx, r.site)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return r.lost(err, "read the page")
		}
		v := classify(r.site, pr)
		if v.State == last.State {
			same++
		} else {
			same = 0
		}
		last = v
		switch v.State {
		case StateReady:
			return nil
		case StateModal:
			if !dismissed && r.site.Selectors.ModalDismiss != "" {
				dismissed = true
				if _, err := r.t.click(ctx, r.site.Selectors.ModalDismiss); err != nil {
					return r.lost(err, "dismiss a dialog")
				}
			}
		case StateOutage:
			if !reloaded {
				reloaded = true
				if err := r.t.reload(ctx); err != nil {
					return &provider.Error{Class: belay.ClassTransient, Message: "browser: reload: " + err.Error(), Err: err}
				}
				continue
			}
			if same >= 1 {
				return v.Error(r.p.name, r.site.Name, r.cur.SiteURL)
			}
		case StateLoginRequired, StateChallenge, StateRateLimited:
			if same >= 1 {
				return v.Error(r.p.name, r.site.Name, r.cur.SiteURL)
			}
		}
		if time.Now().After(deadline) {
			return v.Error(r.p.name, r.site.Name, r.cur.SiteURL)
		}
		if err := sleep(ctx, r.p.cfg.PollInterval); err != nil {
			return err
		}
	}
}

// sendPrompt records the intent, types and sends the prompt, verifies
// the send and records the settlement. A send that never shows (the site
// dropped it) is sent once more, and only if the page did not change.
func (r *runState) sendPrompt(ctx context.Context) error {
	pr, err := r.t.probe(ctx, r.site)
	if err != nil {
		return r.lost(err, "read the page")
	}
	if r.cur.Phase != phaseIntent {
		r.cur.Phase, r.cur.Hash = phaseIntent, PromptHash(r.req.Prompt)
		r.cur.Baseline, r.cur.Users = pr.Assistant, pr.Users
		// The intent is durable before a key is typed.
		if err := r.ref(); err != nil {
			return err
		}
	}
	for try := 0; ; try++ {
		if err := r.t.typePrompt(ctx, r.site, r.req.Prompt); err != nil {
			if ctx.Err() != nil || r.gone(err) {
				return r.lost(err, "type the prompt")
			}
			return &provider.Error{Class: belay.ClassUIDrift, Message: fmt.Sprintf("browser: type the prompt: %v; diagnose with: %s", err, CheckCommand(r.p.name, r.site.Name, r.cur.SiteURL)), Err: err}
		}
		if err := r.t.submit(ctx, r.site, 10*time.Second); err != nil {
			if ctx.Err() != nil || r.gone(err) {
				return r.lost(err, "send")
			}
			return &provider.Error{Class: belay.ClassUIDrift, Message: fmt.Sprintf("browser: send: %v; diagnose with: %s", err, CheckCommand(r.p.name, r.site.Name, r.cur.SiteURL)), Err: err}
		}
		ok, changed, err := r.verifySend(ctx)
		if err != nil {
			return err
		}
		if ok {
			return r.settleSend(ctx)
		}
		if changed || try >= 1 {
			return &provider.Error{Class: belay.ClassUIDrift, Message: fmt.Sprintf("browser: the prompt never showed in the conversation after sending (page at %s); it may have been sent: check the site", r.url)}
		}
	}
}

// settleTurns waits until the page shows at least minA assistant and
// minU user turns, the same counts on two reads in a row.
func (r *runState) settleTurns(ctx context.Context, minA, minU int) error {
	deadline := time.Now().Add(r.p.cfg.ReadyTimeout)
	lastA, lastU := -1, -1
	for {
		pr, err := r.t.probe(ctx, r.site)
		if err != nil {
			return r.lost(err, "read the page")
		}
		if pr.Assistant >= minA && pr.Users >= minU && pr.Assistant == lastA && pr.Users == lastU {
			return nil
		}
		lastA, lastU = pr.Assistant, pr.Users
		if time.Now().After(deadline) {
			return provider.Errorf(belay.ClassTargetLost, "browser: the conversation at %s shows %d answers and %d messages, fewer than the %d and %d it had", pr.URL, pr.Assistant, pr.Users, minA, minU)
		}
		if err := sleep(ctx, r.p.cfg.PollInterval); err != nil {
			return err
		}
	}
}

// verifySend waits until the prompt shows as a user turn past the
// baseline and the URL is a conversation URL that reads the same twice.
// It reports whether the send showed, and, if not, whether the page
// changed at all (a new turn or another URL).
func (r *runState) verifySend(ctx context.Context) (ok, changed bool, err error) {
	deadline := time.Now().Add(r.p.cfg.SendTimeout)
	startURL := r.url
	var lastURL string
	var refused PageState
	for {
		pr, err := r.t.probe(ctx, r.site)
		if err != nil {
			return false, false, r.lost(err, "read the page")
		}
		users, err := r.t.userTurns(ctx, r.site, r.cur.Users)
		if err != nil {
			return false, false, r.lost(err, "read the page")
		}
		seen := false
		for _, u := range users {
			if samePrompt(u, r.req.Prompt) {
				seen = true
			}
		}
		conv := r.site.Conversation(pr.URL)
		if seen && conv != "" && pr.URL == lastURL {
			r.url, r.conv = pr.URL, conv
			return true, true, nil
		}
		if !seen && len(users) == 0 {
			// The site refused the send (its usage cap, an expired
			// session, a challenge): seen on two reads, that is the
			// failure, not a send to try again.
			switch v := classify(r.site, pr); v.State {
			case StateRateLimited, StateLoginRequired, StateChallenge:
				if v.State == refused {
					// Nothing was sent (no message past the baseline,
					// the refusal on two reads): the run's next attempt
					// starts over and sends, even where no page could
					// show a prompt (a new conversation, its browser
					// gone).
					r.cur.Phase, r.cur.Evidence = phaseOpen, fmt.Sprintf("the site refused the send (%s): nothing was sent", v.State)
					if err := r.ref(); err != nil {
						return false, false, err
					}
					return false, false, v.Error(r.p.name, r.site.Name, r.cur.SiteURL)
				}
				refused = v.State
			default:
				refused = ""
			}
		}
		lastURL = pr.URL
		if time.Now().After(deadline) {
			if seen {
				// A site without conversation URLs: bound to the page.
				r.url = pr.URL
				return true, true, nil
			}
			return false, len(users) > 0 || pr.Assistant > r.cur.Baseline || pr.URL != startURL, nil
		}
		if err := sleep(ctx, r.p.cfg.PollInterval); err != nil {
			return false, false, err
		}
	}
}

// settleSend records that the prompt was sent: from here on it is never
// sent again.
func (r *runState) settleSend(ctx context.Context) error {
	r.cur.Phase = phaseSent
	return r.ref()
}

// findPrompt looks for the prompt in the conversation after an intent
// without a settlement. It waits a little so that a send in flight shows.
func (r *runState) findPrompt(ctx context.Context) (bool, error) {
	// The page showed this many turns before the send: until it shows
	// them again, it cannot say whether the prompt is there.
	if err := r.settleTurns(ctx, r.cur.Baseline, r.cur.Users); err != nil {
		return false, err
	}
	deadline := time.Now().Add(min(r.p.cfg.SendTimeout, 5*time.Second))
	for {
		pr, err := r.t.probe(ctx, r.site)
		if err != nil {
			return false, r.lost(err, "read the page")
		}
		users, err := r.t.userTurns(ctx, r.site, r.cur.Users)
		if err != nil {
			return false, r.lost(err, "read the page")
		}
		for _, u := range users {
			if samePrompt(u, r.req.Prompt) {
				if conv := r.site.Conversation(pr.URL); conv != "" {
					r.url, r.conv = pr.URL, conv
				}
				return true, nil
			}
		}
		if len(users) > 0 {
			// Something else was sent after the baseline: belay cannot
			// tell what happened to its prompt.
			return false, provider.Errorf(belay.ClassTargetLost, "browser: the conversation has another message after the baseline; not sending again")
		}
		if time.Now().After(deadline) {
			if r.conv == "" && r.site.Conversation(pr.URL) == "" && pr.URL != r.site.StartURL {
				return false, provider.Errorf(belay.ClassTargetLost, "browser: the prompt may have been sent but its conversation is unknown (page at %s); not sending again", pr.URL)
			}
			return false, nil
		}
		if err := sleep(ctx, r.p.cfg.PollInterval); err != nil {
			return false, err
		}
	}
}

// reattach binds the attempt to the run's stored target: the same
// browser and target if they live, else the stored conversation URL in a
// new tab or a fresh browser.
func (r *runState) reattach(ctx context.Context) error {
	old := r.cur.Chrome
	if old.alive() {
		// This process follows the browser now (see reap.go).
		if err := writeRecord(r.runDir, &old); err != nil {
			return internal(err, "record the browser")
		}
		r.b = &old
		if r.req.Ref.Target != "" && old.hasTarget(ctx, r.req.Ref.Target) {
			t, err := attach(ctx, &old, r.req.Ref.Target, r.p.cfg.StartTimeout)
			if err == nil {
				r.t = t
				// Reattached to the same target: the binding is reported
				// again (progress for the watchdog).
				return r.ref()
			}
		}
	}
	why := "the browser of the run is gone"
	if old.alive() {
		why = fmt.Sprintf("target %s is gone", r.req.Ref.Target)
	}
	return r.rebind(ctx, why)
}

// rebind opens the stored conversation URL in a new tab of the run's
// browser, or in a fresh browser if it is gone, and journals the new
// binding with the reason.
func (r *runState) rebind(ctx context.Context, why string) error {
	if r.t != nil {
		r.t.close()
		r.t = nil
	}
	url := r.url
	if r.conv == "" || r.site.Conversation(url) == "" {
		switch r.cur.Phase {
		case phaseSent, phaseDone:
			return provider.Errorf(belay.ClassTargetLost, "browser: %s and the run has no conversation URL to reopen", why)
		case phaseIntent:
			// The prompt may have gone to a new conversation the run
			// never saw: a fresh page cannot show it.
			return provider.Errorf(belay.ClassTargetLost, "browser: %s after the run's intent to send, and the run has no conversation URL to look for its prompt in: it may have been sent; not sending it again (look at the site; to ask again, start a new session)", why)
		}
	}
	if url == "" {
		url = r.site.StartURL
	}
	if r.b != nil && r.b.alive() {
		t, err := attachNew(ctx, r.b, r.p.cfg.StartTimeout)
		if err == nil {
			r.t = t
		}
	}
	if r.t == nil {
		if r.b != nil {
			r.b.kill()
			_ = removeProfile(r.b.Profile)
		}
		if err := r.launch(ctx, url); err != nil {
			return err
		}
	} else if err := r.t.navigate(ctx, url); err != nil {
		return &provider.Error{Class: belay.ClassTransient, Message: fmt.Sprintf("browser: reopen %s: %v", url, err), Err: err}
	}
	r.url = url
	r.cur.Chrome = *r.b
	r.cur.Rebinds++
	r.cur.Evidence = fmt.Sprintf("%s; reopened %s in target %s", why, url, r.t.id)
	if err := r.ref(); err != nil {
		return err
	}
	return r.ready(ctx)
}

// follow reads the answer turn past the baseline until it is complete,
// emitting its text as it grows.
func (r *runState) follow(ctx context.Context) error {
	var (
		lastText   string
		lastChange = time.Now()
		lastWork   = time.Now()
		barPolls   int
		lastBeat   = time.Now()
		failures   int
	)
	for {
		ts, err := r.t.turn(ctx, r.site, r.cur.Baseline)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if failures++; failures > 3 {
				return r.lost(err, "read the answer")
			}
			if err := r.rebind(ctx, fmt.Sprintf("reading target %s failed: %v", r.t.id, err)); err != nil {
				return err
			}
			continue
		}
		failures = 0
		if r.conv != "" && r.site.Conversation(ts.URL) != r.conv {
			if err := r.rebind(ctx, fmt.Sprintf("the tab left the conversation for %s", ts.URL)); err != nil {
				return err
			}
			continue
		}
		if ts.Error {
			if (r.req.Attempt > 1 || r.adopted) && r.cur.Retries < 1 && r.site.Selectors.Retry != "" {
				// A later attempt (or a run that adopted the send) regenerates
				// the answer once; the prompt is not sent again.
				r.cur.Retries++
				if err := r.ref(); err != nil {
					return err
				}
				if _, err := r.t.click(ctx, r.site.Selectors.Retry); err != nil {
					return r.lost(err, "click Retry")
				}
				barPolls, lastText = 0, ""
				if err := r.waitRetried(ctx); err != nil {
					return err
				}
				continue
			}
			return provider.Errorf(belay.ClassTransient, "browser: %s answered with an error turn (it offers Retry)", r.site.Name)
		}
		text := ts.Text
		if r.placeholder(text) {
			text = ""
		}
		if text != lastText {
			lastText, lastChange, barPolls = text, time.Now(), 0
		}
		if err := r.stream(text); err != nil {
			return err
		}
		working := ts.Stop || ts.Thinking
		if ts.Exists && ts.ActionBar && !working && text != "" {
			barPolls++
		} else {
			barPolls = 0
		}
		if barPolls >= r.site.Completion.StablePolls && time.Since(lastChange) >= r.settle {
			return r.complete(ctx, text, ts)
		}
		if working {
			lastWork = time.Now()
		}
		if ts.Exists && !ts.ActionBar && text != "" && time.Since(lastChange) >= r.p.cfg.NoBarAfter && time.Since(lastWork) >= r.p.cfg.NoBarAfter {
			// The text stopped, nothing says the site still works, and
			// the mark of a complete answer never came: the profile's
			// action bar and copy button no longer match the page.
			return provider.Errorf(belay.ClassUIDrift, "browser: the answer has not changed for %s and the page shows no stop control, no thinking indicator and no action bar (selectors.action_bar %q, selectors.copy %q): the answer may be complete; diagnose with: %s",
				time.Since(lastChange).Round(time.Second), r.site.Selectors.ActionBar, r.site.Selectors.Copy, CheckCommand(r.p.name, r.site.Name, r.cur.SiteURL))
		}
		if time.Since(lastBeat) >= r.p.cfg.ProgressEvery && (working || !ts.Exists) {
			lastBeat = time.Now()
			r.cur.Beat++
			if err := r.ref(); err != nil {
				return err
			}
		}
		if err := sleep(ctx, r.p.cfg.PollInterval); err != nil {
			return err
		}
	}
}

// waitRetried waits for the error turn to give way to a new answer after
// Retry was clicked.
func (r *runState) waitRetried(ctx context.Context) error {
	deadline := time.Now().Add(r.p.cfg.SendTimeout)
	for {
		ts, err := r.t.turn(ctx, r.site, r.cur.Baseline)
		if err != nil {
			return r.lost(err, "read the answer")
		}
		if !ts.Error {
			return nil
		}
		if time.Now().After(deadline) {
			return provider.Errorf(belay.ClassTransient, "browser: %s still shows an error turn after Retry", r.site.Name)
		}
		if err := sleep(ctx, r.p.cfg.PollInterval); err != nil {
			return err
		}
	}
}

// placeholder reports whether text is a placeholder, not an answer.
func (r *runState) placeholder(text string) bool {
	n := strings.ToLower(normalize(text))
	if n == "" {
		return true
	}
	for _, p := range r.site.Signals.PlaceholderTxt {
		if n == strings.ToLower(normalize(p)) {
			return true
		}
	}
	return false
}

// stream emits the part of text past what the journal holds. Text that
// no longer extends what was emitted (the page re-rendered it) waits.
func (r *runState) stream(text string) error {
	if len(text) <= r.emitted || !utf8.RuneStart(text[r.emitted]) {
		return nil
	}
	delta := text[r.emitted:]
	if err := r.emit(provider.Event{Kind: provider.TextDelta, Text: delta}); err != nil {
		return err
	}
	r.emitted = len(text)
	return nil
}

// complete finishes the run: the streamed text is completed, the final
// answer is taken from the turn's copy button (or its text) and stored,
// and the turn's artifacts are downloaded.
func (r *runState) complete(ctx context.Context, text string, ts turnState) error {
	if err := r.stream(text); err != nil {
		return err
	}
	final, why, err := r.t.copyTurn(ctx, r.site, r.cur.Baseline, 3*time.Second)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// The answer is whole in the journal: a page that cannot be read
		// now does not undo it.
		why = fmt.Sprintf("the copy failed: %v", err)
	}
	source := SourceCopy
	if why != "" || final == "" {
		// No copy to take: the answer is the turn's text, and the journal
		// says why.
		if why == "" {
			why = "the copy button copied an empty text"
		}
		final, source = text, SourceDOM
	}
	r.cur.Answer = source
	if source == SourceDOM {
		r.cur.Answer = SourceDOM + ": " + why
	}
	if err := r.ref(); err != nil {
		return err
	}
	// The final answer is the run's answer from here on: belay read, the
	// API, exports and the session's history give it, not the rendered
	// text streamed above.
	note := why
	if source == SourceCopy {
		note = ""
	}
	if err := r.emit(provider.Event{Kind: provider.FinalAnswer, Text: final, Source: source, Note: note}); err != nil {
		return err
	}
	m := &Manifest{Session: r.req.Session, Run: r.req.Run}
	if err := r.writeAnswer(m, final, source, why, text); err != nil {
		return err
	}
	if len(ts.Artifacts) > 0 {
		if err := r.artifacts(ctx, m, ts.Artifacts); err != nil {
			return err
		}
	}
	if err := r.emit(provider.Event{Kind: provider.TurnEnd, StopReason: "end_turn"}); err != nil {
		return err
	}
	r.cur.Phase = phaseDone
	r.done = true
	return r.ref()
}

// finish closes the attempt: on a detach the browser goes on for a later
// resume; otherwise it is closed and its profile deleted. A cancel stops
// the answer on the site too; a passed deadline does not: belay stopped
// waiting, but the site's answer, once asked for, is left to finish, and
// a later run with the same prompt reads it (adopt).
func (r *runState) finish(ctx context.Context, err error) {
	detach := provider.Detached(ctx) || errors.Is(err, provider.ErrDetach)
	cancelled := !detach && !r.done && ctx.Err() != nil && !provider.PastDeadline(ctx)
	if cancelled && r.t != nil && r.cur.Phase == phaseSent && r.site.Selectors.Stop != "" {
		r.stop()
	}
	if r.t != nil {
		r.t.close()
	}
	if detach || r.b == nil {
		return
	}
	r.discard(r.b)
}

// discard ends browser b of this run and deletes its profile and record.
func (r *runState) discard(b *chrome) {
	b.kill()
	_ = removeProfile(b.Profile)
	removeRecord(r.runDir)
}

// stopWait bounds the stop click of a cancelled run and the wait for the
// site to take it.
const stopWait = 10 * time.Second

// stop clicks the site's stop control and waits, at most stopWait, for the
// page to drop it: the click only starts the page's own request to its
// server, and a browser closed at once can take that request with it. The
// answer is noted stopped once clicked, so no retry adopts it.
func (r *runState) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), stopWait)
	defer cancel()
	if ok, _ := r.t.click(ctx, r.site.Selectors.Stop); !ok {
		return
	}
	r.cur.Phase = phaseStopped
	r.cur.Evidence = fmt.Sprintf("stop clicked; the site did not drop its stop control in %s", stopWait)
	for {
		ts, err := r.t.turn(ctx, r.site, r.cur.Baseline)
		if err == nil && !ts.Stop {
			r.cur.Evidence = "stop clicked; the site stopped the answer"
			break
		}
		if sleep(ctx, r.p.cfg.PollInterval) != nil {
			break
		}
	}
	_ = r.ref() // a note: without it, a retry would find the stopped answer and read it
}

// lost is a failure to talk to the bound target. The attempt's own
// cancellation (a cancel, a detach) goes up as it is; a browser or tab
// that went away (its DevTools connection cancels the tab's context) is
// target_lost, whose message says whether the prompt may have been sent.
func (r *runState) lost(err error, what string) error {
	if errors.Is(err, provider.ErrDetach) || r.ctx != nil && r.ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return err
	}
	msg := fmt.Sprintf("browser: %s: %v", what, err)
	if errors.Is(err, context.Canceled) {
		msg = fmt.Sprintf("browser: %s: the browser or its tab went away", what)
	}
	if r.cur.Phase == phaseIntent {
		msg += "; the prompt may have been sent: not sending it again"
	}
	return &provider.Error{Class: belay.ClassTargetLost, Message: msg, Err: err}
}

// gone says whether err, from driving the page, came from the browser or
// its tab going away (not from the page itself); the attempt's own
// cancellation is not that.
func (r *runState) gone(err error) bool {
	if r.ctx != nil && r.ctx.Err() != nil {
		return false
	}
	return errors.Is(err, context.Canceled) || r.b != nil && !r.b.alive()
}

func internal(err error, what string) error {
	return &provider.Error{Class: belay.ClassInternal, Message: "browser: " + what + ": " + err.Error(), Err: err}
}
