package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/chatsite"
	"github.com/belayhq/belay/provider"
)

func TestRunAnswersOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, 8)
	prompt := "Explain fencing tokens. [[think=2s pause=1s stream=2s words=40]]"
	var rec recorder
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := b.p.Run(ctx, provider.Request{Session: "ses_a", Run: "run_a", Prompt: prompt, Attempt: 1}, rec.emit)
	if err != nil {
		t.Fatal(err)
	}
	b.answeredOnce(t, prompt, rec.answer())
	c := refCursor(*rec.ref.Ref)
	if c.Phase != phaseDone || rec.ref.Ref.ID == "" || rec.ref.Ref.Target == "" {
		t.Fatalf("final ref %+v cursor %+v", rec.ref.Ref, c)
	}
	if n := chromiumCount(t, b.dir); n != 0 {
		t.Fatalf("%d browser processes left", n)
	}
}

// detachAt runs a request whose emit detaches (as a stopping daemon
// does) at the first event for which stop returns true, given the text so
// far. It returns what the journal would hold: the last ref and the text
// before that event.
func detachAt(t *testing.T, b *bundle, req provider.Request, stop func(ev provider.Event, text string) bool) (journaled provider.Event, text string) {
	t.Helper()
	var rec recorder
	emit := func(ev provider.Event) error {
		if stop(ev, rec.answer()) {
			return provider.ErrDetach
		}
		return rec.emit(ev)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := b.p.Run(ctx, req, emit)
	if !errors.Is(err, provider.ErrDetach) {
		t.Fatalf("run ended with %v, want a detach", err)
	}
	return rec.ref, rec.answer()
}

// resume runs req again with Resume from the journaled ref and offset.
func resume(t *testing.T, b *bundle, req provider.Request, ref provider.Event, offset int) *recorder {
	t.Helper()
	req.Resume, req.Ref, req.TextOffset, req.Attempt = true, *ref.Ref, offset, req.Attempt+1
	var rec recorder
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := b.p.Run(ctx, req, rec.emit); err != nil {
		t.Fatal(err)
	}
	return &rec
}

func phaseOf(ev provider.Event) string {
	if ev.Kind != provider.RefUpdate {
		return ""
	}
	if c := refCursor(*ev.Ref); c != nil {
		return c.Phase
	}
	return ""
}

func TestResumeAfterDetachReadsOn(t *testing.T) {
	t.Parallel()
	b := setup(t, 8)
	prompt := "Resume me. [[think=1s pause=500ms stream=4s words=80]]"
	req := provider.Request{Session: "ses_b", Run: "run_b", Prompt: prompt, Attempt: 1}
	ref, text := detachAt(t, b, req, func(ev provider.Event, text string) bool { return len(text) > 40 })
	if n := chromiumCount(t, b.dir); n == 0 {
		t.Fatal("the browser did not outlive the detach")
	}
	rec := resume(t, b, req, ref, len(text))
	b.answeredOnce(t, prompt, text+rec.answer())
	if rec.ref.Ref.Target != ref.Ref.Target {
		t.Fatalf("resumed in target %s, not the bound %s", rec.ref.Ref.Target, ref.Ref.Target)
	}
	if n := chromiumCount(t, b.dir); n != 0 {
		t.Fatalf("%d browser processes left", n)
	}
}

func TestResumeAfterIntentFindsTheSentPrompt(t *testing.T) {
	t.Parallel()
	b := setup(t, 8)
	prompt := "Sent but not settled. [[think=1s stream=1s words=20]]"
	req := provider.Request{Session: "ses_c", Run: "run_c", Prompt: prompt, Attempt: 1}
	// The daemon dies after the send, before the settlement is journaled.
	ref, _ := detachAt(t, b, req, func(ev provider.Event, _ string) bool { return phaseOf(ev) == phaseSent })
	if phaseOf(ref) != phaseIntent {
		t.Fatalf("journaled phase %q", phaseOf(ref))
	}
	rec := resume(t, b, req, ref, 0)
	b.answeredOnce(t, prompt, rec.answer())
}

func TestResumeAfterIntentSendsWhatWasNotSent(t *testing.T) {
	t.Parallel()
	b := setup(t, 8)
	prompt := "Intent only. [[think=1s stream=1s words=20]]"
	req := provider.Request{Session: "ses_d", Run: "run_d", Prompt: prompt, Attempt: 1}
	// The daemon dies after journaling the intent, before typing.
	var intent provider.Event
	detachAt(t, b, req, func(ev provider.Event, _ string) bool {
		if phaseOf(ev) == phaseIntent {
			intent = ev
			return true
		}
		return false
	})
	// The journal holds the intent (the detach came after its write).
	rec := resume(t, b, req, intent, 0)
	b.answeredOnce(t, prompt, rec.answer())
}

// TestIntentWithTheBrowserGoneIsNotSentAgain: the prompt went out in a
// new conversation, but the daemon died before the run saw its URL or
// settled the send, and the browser died with it (killed, reaped). A
// fresh page of the site's start cannot show the prompt: the resumed run
// fails with target_lost instead of asking again, and so does a retry
// (a new run of the session with the same prompt).
func TestIntentWithTheBrowserGoneIsNotSentAgain(t *testing.T) {
	t.Parallel()
	b := setup(t, 8)
	prompt := "Sent, then the browser died. [[think=1s stream=1s words=20]]"
	req := provider.Request{Session: "ses_k", Run: "run_k", Prompt: prompt, Attempt: 1}
	ref, _ := detachAt(t, b, req, func(ev provider.Event, _ string) bool { return phaseOf(ev) == phaseSent })
	if phaseOf(ref) != phaseIntent || ref.Ref.ID != "" {
		t.Fatalf("journaled phase %q, conversation %q", phaseOf(ref), ref.Ref.ID)
	}
	old := refCursor(*ref.Ref).Chrome
	old.kill() // returns once it is gone

	r2 := req
	r2.Resume, r2.Ref, r2.Attempt = true, *ref.Ref, 2
	var rec recorder
	err := b.p.Run(context.Background(), r2, rec.emit)
	var pe *provider.Error
	if !errors.As(err, &pe) || pe.Class != belay.ClassTargetLost || !strings.Contains(pe.Message, "may have been sent") {
		t.Fatalf("resumed run ended with %v, want target_lost", err)
	}
	if n := b.site.Count(prompt); n != 1 {
		t.Fatalf("the site received the prompt %d times", n)
	}

	// A retry: a new run of the session, its ref the session's.
	retry := provider.Request{Session: "ses_k", Run: "run_k2", Prompt: prompt, Attempt: 1, SessionRef: *ref.Ref}
	err = b.p.Run(context.Background(), retry, (&recorder{}).emit)
	if !errors.As(err, &pe) || pe.Class != belay.ClassTargetLost || !strings.Contains(pe.Message, "run_k recorded its intent") {
		t.Fatalf("retry ended with %v, want target_lost", err)
	}
	if n := b.site.Count(prompt); n != 1 {
		t.Fatalf("the site received the prompt %d times", n)
	}
	// Another prompt in the session starts a new conversation.
	other := "Something else. [[think=100ms stream=500ms words=5]]"
	var rec3 recorder
	if err := b.p.Run(context.Background(), provider.Request{Session: "ses_k", Run: "run_k3", Prompt: other, Attempt: 1, SessionRef: *ref.Ref}, rec3.emit); err != nil {
		t.Fatal(err)
	}
	b.answeredOnce(t, other, rec3.answer())
}

// TestBrowserDyingAtTheSendIsTargetLost: the browser dies while the run
// types or sends its prompt. The run fails with target_lost, saying the
// prompt may have been sent; never "cancelled", which nobody asked for.
func TestBrowserDyingAtTheSendIsTargetLost(t *testing.T) {
	t.Parallel()
	b := setup(t, 8)
	prompt := "Kill the browser as I am sent. [[think=1s stream=1s words=20]]"
	req := provider.Request{Session: "ses_l", Run: "run_l", Prompt: prompt, Attempt: 1}
	var rec recorder
	rec.onRef = func(c cursor) {
		if c.Phase == phaseIntent {
			c.Chrome.kill()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := b.p.Run(ctx, req, rec.emit)
	var pe *provider.Error
	if !errors.As(err, &pe) || pe.Class != belay.ClassTargetLost {
		t.Fatalf("run ended with %v, want target_lost", err)
	}
	if !strings.Contains(pe.Message, "may have been sent") {
		t.Fatalf("message %q does not say the prompt may have been sent", pe.Message)
	}
	if n := b.site.Count(prompt); n > 1 {
		t.Fatalf("the site received the prompt %d times", n)
	}
}

// TestActionBarThatNeverMatchesIsUIDrift: a site renamed the marks of a
// complete answer (its action bar and copy button). Once the text stops and nothing says
// the site still works, the run fails as ui_drift naming the selector,
// with the answer it read, instead of streaming until its deadline. A
// site that shows it works (the thinking pause) is waited for.
func TestActionBarThatNeverMatchesIsUIDrift(t *testing.T) {
	t.Parallel()
	b := setup(t, 8, func(c *Config) { c.NoBarAfter = 1500 * time.Millisecond })
	base, err := embedded.ReadFile("sites/loopback.toml")
	if err != nil {
		t.Fatal(err)
	}
	drifted := strings.Replace(string(base), `action_bar = ".actions"`, `action_bar = ".never-matches"`, 1)
	drifted = strings.Replace(drifted, `copy = "button.copy"`, `copy = ".never-copy"`, 1)
	if !strings.Contains(drifted, ".never-matches") || !strings.Contains(drifted, ".never-copy") {
		t.Fatal("the profile has no action_bar or copy to break")
	}
	if err := os.MkdirAll(filepath.Join(b.dir, "sites"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b.dir, "sites", "loopback.toml"), []byte(drifted), 0o600); err != nil {
		t.Fatal(err)
	}
	// The site pauses after its preamble for longer than NoBarAfter (2 s
	// at this speed), its stop control showing: that is work, not drift.
	prompt := "No action bar. [[think=1s pause=16s stream=1s words=10]]"
	req := provider.Request{Session: "ses_n", Run: "run_n", Prompt: prompt, Attempt: 1}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var rec recorder
	start := time.Now()
	err = b.p.Run(ctx, req, rec.emit)
	var pe *provider.Error
	if !errors.As(err, &pe) || pe.Class != belay.ClassUIDrift || !strings.Contains(pe.Message, `selectors.action_bar ".never-matches"`) {
		t.Fatalf("run ended with %v after %s, want ui_drift naming the action bar", err, time.Since(start))
	}
	if !strings.Contains(pe.Message, "belay browser check loopback") {
		t.Fatalf("message %q names no check", pe.Message)
	}
	want, _ := chatsite.AnswerText(prompt)
	if got := rec.answer(); got != want {
		t.Fatalf("answer read %q, want %q", got, want)
	}
	if n := b.site.Count(prompt); n != 1 {
		t.Fatalf("the site received the prompt %d times", n)
	}
}

// TestLostTabIsRecoveredByURL: the run's tab is closed, its renderer
// crashes, or someone points it at another conversation mid-answer; the
// run reopens its own conversation URL, journals why, and stores the
// whole answer with the prompt sent once.
func TestLostTabIsRecoveredByURL(t *testing.T) {
	t.Parallel()
	b := setup(t, 8)
	for i, hook := range []struct {
		name string
		do   func(ws, target string) error
	}{
		{"close", func(ws, id string) error { return CloseTarget(context.Background(), ws, id) }},
		{"crash", func(ws, id string) error { return CrashTarget(context.Background(), ws, id) }},
		{"navigate", func(ws, id string) error {
			return NavigateTarget(context.Background(), ws, id, b.site.URL()+"/c/00000000-0000-4000-8000-000000000000")
		}},
	} {
		prompt := fmt.Sprintf("Lose my tab (%s). [[think=1s pause=500ms stream=4s words=80]]", hook.name)
		req := provider.Request{Session: "ses_e", Run: fmt.Sprintf("run_e%d", i), Prompt: prompt, Attempt: 1}
		var rec recorder
		done := false
		emit := func(ev provider.Event) error {
			if err := rec.emit(ev); err != nil {
				return err
			}
			if !done && ev.Kind == provider.TextDelta && len(rec.answer()) > 30 {
				done = true
				r := rec.ref.Ref
				if err := hook.do(refCursor(*r).Chrome.WS, r.Target); err != nil {
					t.Errorf("%s: %v", hook.name, err)
				}
			}
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		start := time.Now()
		err := b.p.Run(ctx, req, emit)
		cancel()
		t.Logf("%s: %s", hook.name, time.Since(start).Round(time.Millisecond))
		if err != nil {
			t.Fatalf("%s: %v", hook.name, err)
		}
		want, _ := chatsite.AnswerText(prompt)
		if got := rec.answer(); got != want {
			t.Fatalf("%s: answer:\n got %q\nwant %q", hook.name, got, want)
		}
		c := refCursor(*rec.ref.Ref)
		if c.Rebinds < 1 || !strings.Contains(c.Evidence, "reopened") {
			t.Fatalf("%s: no rebind recorded: %+v", hook.name, c)
		}
		if n := b.site.Count(prompt); n != 1 {
			t.Fatalf("%s: the site received the prompt %d times", hook.name, n)
		}
	}
}

// TestCancelStopsTheSite: cancelling a run (not detaching) stops the
// answer on the site too and closes the browser. The page takes its time
// (stopdelay) before it tells its server: a browser closed right after
// the click would take the stop with it.
func TestCancelStopsTheSite(t *testing.T) {
	t.Parallel()
	b := setup(t, 8)
	prompt := "Cancel me. [[think=1s pause=500ms stream=5m words=200 stopdelay=4s]]"
	var rec recorder
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	emit := func(ev provider.Event) error {
		if err := rec.emit(ev); err != nil {
			return err
		}
		if ev.Kind == provider.TextDelta && len(rec.answer()) > 30 {
			cancel()
		}
		return nil
	}
	err := b.p.Run(ctx, provider.Request{Session: "ses_j", Run: "run_j", Prompt: prompt, Attempt: 1}, emit)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
	// The stop click reaches the site's server a moment after Run returns.
	var text string
	waitUntil(t, 10*time.Second, func() bool {
		var done bool
		var err error
		text, done, err = b.site.Answer(rec.ref.Ref.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		return done
	}, "the site did not stop")
	full, _ := chatsite.AnswerText(prompt)
	if stopped, _ := b.site.Stopped(rec.ref.Ref.ID, 0); !stopped || len(text) >= len(full) {
		t.Fatalf("the site was not stopped (stopped %v, %d of %d bytes)", stopped, len(text), len(full))
	}
	// The journal says the answer was stopped: no later run adopts it.
	if c := refCursor(*rec.ref.Ref); c.Phase != phaseStopped {
		t.Fatalf("phase %q after the cancel", c.Phase)
	}
	if n := chromiumCount(t, b.dir); n != 0 {
		t.Fatalf("%d browser processes left", n)
	}
}

// TestFourConcurrentRunsDoNotCrossTalk runs four answers at once, each in
// its own browser and profile: each stores its own answer, in its own
// conversation, and each prompt reaches the site once.
func TestFourConcurrentRunsDoNotCrossTalk(t *testing.T) {
	t.Parallel()
	b := setup(t, 8)
	type result struct {
		rec    *recorder
		err    error
		prompt string
	}
	results := make([]result, 4)
	var wg sync.WaitGroup
	for i := range results {
		results[i].prompt = fmt.Sprintf("Concurrent %d. [[think=1s stream=2s words=%d]]", i, 15+10*i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var rec recorder
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			err := b.p.Run(ctx, provider.Request{Session: "ses_c4", Run: fmt.Sprintf("run_c4%d", i), Prompt: results[i].prompt, Attempt: 1}, rec.emit)
			results[i].rec, results[i].err = &rec, err
		}()
	}
	wg.Wait()
	convs, profiles := map[string]bool{}, map[string]bool{}
	for i, r := range results {
		if r.err != nil {
			t.Fatalf("run %d: %v", i, r.err)
		}
		want, _ := chatsite.AnswerText(r.prompt)
		if got := r.rec.answer(); got != want {
			t.Fatalf("run %d: answer %q, want %q", i, got, want)
		}
		if n := b.site.Count(r.prompt); n != 1 {
			t.Fatalf("run %d: sent %d times", i, n)
		}
		convs[r.rec.ref.Ref.ID] = true
		profiles[refCursor(*r.rec.ref.Ref).Chrome.Profile] = true
	}
	if len(convs) != 4 || len(profiles) != 4 {
		t.Fatalf("%d conversations, %d profiles for 4 runs", len(convs), len(profiles))
	}
}

// TestFinalAnswerIsTheCopy: the final answer is what the turn's copy
// button copies (the site's markdown, which differs from the page's
// text), taken by intercepting the page's clipboard write: through the
// Clipboard API (the current UI) and through execCommand("copy") (the
// second UI). A site profile without a copy button falls back to the
// turn's text, and the journal says why.
func TestFinalAnswerIsTheCopy(t *testing.T) {
	t.Parallel()
	b := setup(t, 8)
	nocopy := strings.Replace(strings.Replace(loopbackProfile(t), `name = "loopback"`, `name = "nocopy"`, 1), `copy = "button.copy"`, "", 1)
	if err := os.MkdirAll(filepath.Join(b.dir, "sites"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b.dir, "sites", "nocopy.toml"), []byte(nocopy), 0o600); err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		site   string
		mode   chatsite.Mode
		source string
	}{
		{"loopback", chatsite.ModeReady, SourceCopy},
		{"loopback-v2", chatsite.ModeDrift, SourceCopy},
		{"nocopy", chatsite.ModeReady, SourceDOM},
	} {
		if err := b.site.SetMode(tc.mode); err != nil {
			t.Fatal(err)
		}
		prompt := fmt.Sprintf("Copy me (%s). [[think=500ms stream=1s words=30]]", tc.site)
		in, _ := json.Marshal(map[string]any{"options": map[string]any{"site": tc.site, "site_url": b.site.URL() + "/"}})
		run := fmt.Sprintf("run_cp%d", i)
		rec, err := b.run(t, provider.Request{Session: "ses_cp", Run: run, Prompt: prompt, Input: in, Attempt: 1})
		if err != nil {
			t.Fatalf("%s: %v", tc.site, err)
		}
		text, _ := chatsite.AnswerText(prompt)
		md, _ := chatsite.AnswerMarkdown(prompt)
		if text == md {
			t.Fatal("the site's markdown equals its text: the test proves nothing")
		}
		if got := rec.answer(); got != text {
			t.Fatalf("%s: streamed %q, want the page's text %q", tc.site, got, text)
		}
		dir := filepath.Join(b.dir, "runs", "ses_cp", run, "artifacts")
		m, err := ReadManifest(dir)
		if err != nil {
			t.Fatalf("%s: %v", tc.site, err)
		}
		got, err := os.ReadFile(filepath.Join(dir, AnswerName))
		if err != nil {
			t.Fatal(err)
		}
		want := md
		if tc.source == SourceDOM {
			want = text
		}
		if m.Answer == nil || m.Answer.Source != tc.source || string(got) != want || m.Answer.SHA256 != PromptHash(want) || m.Answer.SameAsStream != (want == text) {
			t.Fatalf("%s: answer %+v %q, want %s %q", tc.site, m.Answer, got, tc.source, want)
		}
		// The run's answer (what belay read gives) is the same text.
		if len(rec.final) != 1 || rec.final[0].Text != want || rec.final[0].Source != tc.source || (tc.source == SourceDOM) != (rec.final[0].Note != "") {
			t.Fatalf("%s: final answers %+v, want one %s %q", tc.site, rec.final, tc.source, want)
		}
		if i := slices.IndexFunc(rec.events, func(e provider.Event) bool { return e.Kind == provider.FinalAnswer }); i < 0 || i > slices.IndexFunc(rec.events, func(e provider.Event) bool { return e.Kind == provider.TurnEnd }) {
			t.Fatalf("%s: the final answer comes before the turn end", tc.site)
		}
		c := refCursor(*rec.ref.Ref)
		if tc.source == SourceDOM {
			if !strings.HasPrefix(c.Answer, "dom: ") || !strings.Contains(c.Answer, "no copy button") || !strings.Contains(m.Answer.Note, "no copy button") {
				t.Fatalf("%s: journal note %q, manifest note %q", tc.site, c.Answer, m.Answer.Note)
			}
		} else if c.Answer != SourceCopy {
			t.Fatalf("%s: journal note %q", tc.site, c.Answer)
		}
	}
}

// loopbackProfile is the embedded loopback site profile.
func loopbackProfile(t *testing.T) string {
	t.Helper()
	b, err := embedded.ReadFile("sites/loopback.toml")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDeadlinePassesWhileTheSiteWorks: the run's deadline passes after
// the send while the site still thinks. The run ends without stopping the
// site (a deadline is belay giving up waiting, not a cancel); the site
// finishes later; a new run of the session with the same prompt (what
// belay runs retry makes) adopts the send and reads the finished answer,
// and the site still received the prompt once.
func TestDeadlinePassesWhileTheSiteWorks(t *testing.T) {
	t.Parallel()
	b := setup(t, 8)
	b.site.HoldAnswers()
	prompt := "Finish late. [[think=1s stream=1s words=25]]"
	req := provider.Request{Session: "ses_dl", Run: "run_dl1", Prompt: prompt, Attempt: 1}
	var rec recorder
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	rec.onRef = func(c cursor) {
		if c.Phase == phaseSent {
			cancel(fmt.Errorf("deadline at test time: %w", provider.ErrDeadline))
		}
	}
	if err := b.p.Run(ctx, req, rec.emit); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
	conv := rec.ref.Ref.ID
	if stopped, err := b.site.Stopped(conv, 0); err != nil || stopped {
		t.Fatalf("the deadline stopped the site's answer (%v)", err)
	}
	if c := refCursor(*rec.ref.Ref); c.Phase != phaseSent {
		t.Fatalf("phase %q after the deadline", c.Phase)
	}
	if n := chromiumCount(t, b.dir); n != 0 {
		t.Fatalf("%d browser processes left", n)
	}
	b.site.FinishHeld()
	if _, done, _ := b.site.Answer(conv, 0); !done {
		t.Fatal("the site did not finish")
	}

	retry := provider.Request{Session: "ses_dl", Run: "run_dl2", Prompt: prompt, Attempt: 1, SessionRef: *rec.ref.Ref}
	rec2, err := b.run(t, retry)
	if err != nil {
		t.Fatal(err)
	}
	b.answeredOnce(t, prompt, rec2.answer())
	c := refCursor(*rec2.ref.Ref)
	if c.Run != "run_dl2" || c.Phase != phaseDone || !strings.Contains(c.Evidence, "adopted the send of run run_dl1") || rec2.ref.Ref.ID != conv {
		t.Fatalf("ref %+v cursor %+v", rec2.ref.Ref, c)
	}

	// A later run with another prompt is a follow-up: it sends.
	next := "Next question. [[think=200ms stream=200ms words=5]]"
	rec3, err := b.run(t, provider.Request{Session: "ses_dl", Run: "run_dl3", Prompt: next, Attempt: 1, SessionRef: *rec2.ref.Ref})
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := chatsite.AnswerText(next); rec3.answer() != want || b.site.Count(next) != 1 {
		t.Fatalf("follow-up answer %q, sent %d times", rec3.answer(), b.site.Count(next))
	}
}

// TestDecoysAreNotTheSitesControls: the loopback page has the decoys real
// chat pages have, and a run is fooled by none of them. While the run
// follows its answer, an observer tab on the same conversation checks
// that they are there: an action bar that flashes once mid-thinking (a
// completion rule that trusts one poll would end the run with no
// answer), a dictation stop button outside the composer while the site
// works (a cancel that clicked it would not stop the site), and a "Stop
// read aloud" button in the finished turn (a stop rule that matched it
// would never see the answer finish). The run gets the whole answer,
// once, and the profile's stop selector matches no decoy.
func TestDecoysAreNotTheSitesControls(t *testing.T) {
	t.Parallel()
	b := setup(t, 8)
	// Two minutes of site thinking: the flash lasts 6 s of site time.
	prompt := "Mind the decoys. [[think=2m stream=1s words=15]]"
	site, err := b.p.sites.Get("loopback")
	if err != nil {
		t.Fatal(err)
	}
	if site, err = site.WithStartURL(b.site.URL() + "/"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	obs := b.ownTab(t, "observer")

	convURL := make(chan string, 1)
	var rec recorder
	rec.onRef = func(c cursor) {
		if c.Phase == phaseSent && rec.ref.Ref.URL != "" {
			select {
			case convURL <- rec.ref.Ref.URL:
			default:
			}
		}
	}
	done := make(chan error, 1)
	go func() {
		done <- b.p.Run(ctx, provider.Request{Session: "ses_dc", Run: "run_dc", Prompt: prompt, Attempt: 1}, rec.emit)
	}()
	var url string
	select {
	case url = <-convURL:
	case err := <-done:
		t.Fatalf("the run ended before its send settled: %v", err)
	}
	if err := obs.navigate(ctx, url); err != nil {
		t.Fatal(err)
	}
	// stopButtons counts the visible buttons a naive stop selector takes.
	stopButtons := func() int {
		var n int
		if err := obs.eval(ctx, `() => Array.from(document.querySelectorAll("button[aria-label^='Stop']")).filter((e) => !!(e.offsetWidth || e.offsetHeight)).length`, &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	var flash, decoyWhileBusy bool
	var runErr error
	finished := false
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !finished {
		select {
		case runErr = <-done:
			finished = true
		case <-tick.C:
		}
		ts, err := obs.turn(ctx, site, 0)
		if err != nil {
			t.Fatal(err)
		}
		stops := stopButtons()
		if ts.Thinking && ts.ActionBar {
			flash = true
		}
		if ts.Stop && stops >= 2 {
			decoyWhileBusy = true // the composer's stop and the dictation stop
		}
	}
	if runErr != nil {
		t.Fatal(runErr)
	}
	want, _ := chatsite.AnswerText(prompt)
	if got := rec.answer(); got != want || b.site.Count(prompt) != 1 || len(rec.final) != 1 {
		t.Fatalf("answer %q (want %q), sent %d times, %d final answers", got, want, b.site.Count(prompt), len(rec.final))
	}
	if !flash || !decoyWhileBusy {
		t.Fatalf("the observer saw the flash: %v, the dictation stop: %v: the test proves nothing", flash, decoyWhileBusy)
	}
	// The finished turn: a "Stop read aloud" button, but no stop control.
	ts, err := obs.turn(ctx, site, 0)
	if err != nil {
		t.Fatal(err)
	}
	stops := stopButtons()
	if ts.Stop || stops < 1 || ts.Text != want {
		t.Fatalf("finished turn: stop %v, %d stop-labelled buttons, text %q", ts.Stop, stops, ts.Text)
	}
}
