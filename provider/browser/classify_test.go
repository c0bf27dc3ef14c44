package browser

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/chatsite"
	"github.com/belayhq/belay/provider"
)

// TestPageStates loads each failure story of the chat site in one real
// browser and checks the classifier's verdict and its error class.
func TestPageStates(t *testing.T) {
	t.Parallel()
	b := setup(t, 8)
	ctx := context.Background()
	tb := b.ownTab(t, "p")
	site, err := b.p.sites.Get("loopback")
	if err != nil {
		t.Fatal(err)
	}
	site, err = site.WithStartURL(b.site.URL() + "/")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mode  chatsite.Mode
		state PageState
		class belay.ErrorClass
	}{
		{chatsite.ModeReady, StateReady, ""},
		{chatsite.ModeLogin, StateLoginRequired, belay.ClassAuth},
		{chatsite.ModeExpired, StateLoginRequired, belay.ClassAuth},
		{chatsite.ModeLoggedOut, StateLoginRequired, belay.ClassAuth},
		{chatsite.ModeChallenge, StateChallenge, belay.ClassChallenge},
		{chatsite.ModeRateLimited, StateRateLimited, belay.ClassRateLimited},
		{chatsite.ModeOutage, StateOutage, belay.ClassTransient},
		{chatsite.Mode5xxOnce, StateOutage, belay.ClassTransient},
		{chatsite.ModeModal, StateModal, belay.ClassUIDrift},
		{chatsite.ModeDrift, StateUnknown, belay.ClassUIDrift},
	} {
		if err := b.site.SetMode(tc.mode); err != nil {
			t.Fatal(err)
		}
		if err := tb.navigate(ctx, site.StartURL); err != nil {
			t.Fatalf("%s: %v", tc.mode, err)
		}
		pr, err := tb.probe(ctx, site)
		if err != nil {
			t.Fatalf("%s: %v", tc.mode, err)
		}
		v := classify(site, pr)
		if v.State != tc.state {
			t.Errorf("%s: state %s (%s), want %s", tc.mode, v.State, v.Reason, tc.state)
		}
		if got := provider.ClassOf(v.Error("browser", "loopback", "")); got != tc.class {
			t.Errorf("%s: class %q, want %q", tc.mode, got, tc.class)
		}
		if err := v.Error("work", "loopback", "http://127.0.0.1:9/x y"); err != nil && tc.class != belay.ClassTransient && tc.class != belay.ClassRateLimited &&
			!strings.Contains(err.Error(), "loopback --provider work --url 'http://127.0.0.1:9/x y'") {
			t.Errorf("%s: %v does not name the provider and the start URL", tc.mode, err)
		}
	}
	// The second UI version matches its own profile.
	v2, err := b.p.sites.Get("loopback-v2")
	if err != nil {
		t.Fatal(err)
	}
	v2, _ = v2.WithStartURL(site.StartURL)
	_ = b.site.SetMode(chatsite.ModeDrift)
	if err := tb.navigate(ctx, site.StartURL); err != nil {
		t.Fatal(err)
	}
	pr, err := tb.probe(ctx, v2)
	if err != nil {
		t.Fatal(err)
	}
	if v := classify(v2, pr); v.State != StateReady {
		t.Errorf("drift with the v2 profile: %+v", v)
	}
}

// run runs req to its end on the bundle's provider.
func (b *bundle) run(t *testing.T, req provider.Request) (*recorder, error) {
	t.Helper()
	var rec recorder
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := b.p.Run(ctx, req, rec.emit)
	return &rec, err
}

func TestRunFailsBeforeTypingWhenNotReady(t *testing.T) {
	t.Parallel()
	b := setup(t, 8)
	_ = b.site.SetMode(chatsite.ModeChallenge)
	prompt := "Never typed."
	_, err := b.run(t, provider.Request{Session: "ses_f", Run: "run_f", Prompt: prompt, Attempt: 1})
	if provider.ClassOf(err) != belay.ClassChallenge {
		t.Fatalf("err %v", err)
	}
	if n := len(b.site.Prompts()); n != 0 {
		t.Fatalf("%d sends", n)
	}
}

// TestRateLimitAtSendIsNotSentAgain: the page was ready, but the site
// refuses the send with its usage cap. The run fails as rate_limited at
// once, without typing the prompt a second time; the next attempt (the
// runtime's retry after its backoff) finds nothing sent and sends.
func TestRateLimitAtSendIsNotSentAgain(t *testing.T) {
	t.Parallel()
	b := setup(t, 8)
	b.site.RateLimitNext(1)
	prompt := "Capped. [[think=500ms stream=500ms words=10]]"
	req := provider.Request{Session: "ses_rl", Run: "run_rl", Prompt: prompt, Attempt: 1}
	rec, err := b.run(t, req)
	if provider.ClassOf(err) != belay.ClassRateLimited {
		t.Fatalf("err %v, want rate_limited", err)
	}
	if b.site.Refused() != 1 || b.site.Count(prompt) != 0 {
		t.Fatalf("the site refused %d sends and got the prompt %d times", b.site.Refused(), b.site.Count(prompt))
	}
	rec2 := resume(t, b, req, rec.ref, 0)
	want, _ := chatsite.AnswerText(prompt)
	if got := rec2.answer(); got != want || b.site.Count(prompt) != 1 || b.site.Refused() != 1 {
		t.Fatalf("answer %q, sent %d times, refused %d", got, b.site.Count(prompt), b.site.Refused())
	}
}

// TestRunRecoversFromSiteTrouble: a 5xx page gets one reload, a modal one
// dismissal, a silently dropped send one more send (the prompt then
// reaches the site once).
func TestRunRecoversFromSiteTrouble(t *testing.T) {
	t.Parallel()
	b := setup(t, 8)
	for i, prep := range []func(){
		func() { _ = b.site.SetMode(chatsite.Mode5xxOnce) },
		func() { _ = b.site.SetMode(chatsite.ModeModal) },
		func() { _ = b.site.SetMode(chatsite.ModeReady); b.site.DropNext(1) },
	} {
		prep()
		prompt := "Trouble " + string(rune('a'+i)) + " [[think=500ms stream=500ms words=10]]"
		rec, err := b.run(t, provider.Request{Session: "ses_g", Run: "run_g" + string(rune('a'+i)), Prompt: prompt, Attempt: 1})
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		want, _ := chatsite.AnswerText(prompt)
		if got := rec.answer(); got != want {
			t.Fatalf("case %d: answer %q, want %q", i, got, want)
		}
		if n := b.site.Count(prompt); n != 1 {
			t.Fatalf("case %d: sent %d times", i, n)
		}
	}
}

// TestErrorTurnIsTransientThenRetried: an error turn with Retry fails the
// attempt as transient; the next (resumed) attempt clicks Retry instead of
// sending again.
func TestErrorTurnIsTransientThenRetried(t *testing.T) {
	t.Parallel()
	b := setup(t, 8)
	prompt := "Fail first. [[think=500ms stream=500ms words=10 error=1]]"
	req := provider.Request{Session: "ses_h", Run: "run_h", Prompt: prompt, Attempt: 1}
	rec, err := b.run(t, req)
	var pe *provider.Error
	if !errors.As(err, &pe) || pe.Class != belay.ClassTransient {
		t.Fatalf("err %v, want transient", err)
	}
	if rec.answer() != "" {
		t.Fatalf("an error turn streamed %q", rec.answer())
	}
	rec2 := resume(t, b, req, rec.ref, 0)
	b.answeredOnce(t, prompt, rec2.answer())
}

// TestArtifactsAreDownloaded: the answer's file links (a plain file, one
// slower than 30 s of site time, a blob made in the page, and one that
// breaks off) land in the artifact directory with their sha256 in the
// manifest; the broken one is recorded with its error.
func TestArtifactsAreDownloaded(t *testing.T) {
	t.Parallel()
	b := setup(t, 20)
	prompt := "Attach files. [[think=1s stream=1s words=10 artifacts=notes.txt,slow.bin,data.blob.txt,broken.bin]]"
	rec, err := b.run(t, provider.Request{Session: "ses_i", Run: "run_i", Prompt: prompt, Attempt: 1})
	if err != nil {
		t.Fatal(err)
	}
	m, err := ReadManifest(filepath.Join(b.dir, "runs", "ses_i", "run_i", "artifacts"))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Artifacts) != 4 {
		t.Fatalf("manifest %+v", m)
	}
	conv := rec.ref.Ref.ID
	for _, a := range m.Artifacts {
		want, ferr := chatsite.File(conv, a.Name)
		if a.Name == "broken.bin" {
			if ferr == nil || a.Error == "" || a.File != "" || a.Attempts != 3 {
				t.Errorf("broken.bin: %+v", a)
			}
			continue
		}
		if a.Error != "" || a.SHA256 != PromptHash(string(want)) || a.Size != int64(len(want)) {
			t.Errorf("%s: %+v, want %d bytes", a.Name, a, len(want))
		}
	}
}

// TestArtifactsThroughThePage: links that belay cannot fetch itself are
// downloaded by clicking them in the page, Chromium's download manager
// saving them into the artifact directory (CDP download behaviour): a
// sandbox: link whose download the page's script makes (with a one-time
// ticket), a plain link that refuses belay's request (403) but not the
// page's own navigation, a slow one, and one that breaks off (recorded
// with its error after 3 attempts). Nothing is left in the download
// directory, and nothing goes to ~/Downloads.
func TestArtifactsThroughThePage(t *testing.T) {
	t.Parallel()
	b := setup(t, 20)
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"page-notes.txt", "gated-data.bin", "page-slow.bin", "page-broken.bin"}
	prompt := "Files for the page. [[think=1s stream=1s words=10 artifacts=" + strings.Join(names, ",") + "]]"
	rec, err := b.run(t, provider.Request{Session: "ses_pg", Run: "run_pg", Prompt: prompt, Attempt: 1})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(b.dir, "runs", "ses_pg", "run_pg", "artifacts")
	m, err := ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Artifacts) != len(names) {
		t.Fatalf("manifest %+v", m)
	}
	conv := rec.ref.Ref.ID
	for i, a := range m.Artifacts {
		if a.Name != names[i] || a.Via != "page" {
			t.Errorf("%s: %+v", names[i], a)
			continue
		}
		want, ferr := chatsite.File(conv, a.Name)
		if a.Name == "page-broken.bin" {
			if ferr == nil || a.Error == "" || a.File != "" || a.Attempts != 3 || b.site.Served(a.Name) == 0 {
				t.Errorf("page-broken.bin: %+v (served %d bytes)", a, b.site.Served(a.Name))
			}
			continue
		}
		got, err := os.ReadFile(filepath.Join(dir, a.File))
		if err != nil || string(got) != string(want) {
			t.Errorf("%s: %v, %d bytes on disk, want %d", a.Name, err, len(got), len(want))
		}
		if a.Error != "" || a.Attempts != 1 || a.SHA256 != PromptHash(string(want)) || a.Size != int64(len(want)) || a.Type != http.DetectContentType(want[:512]) {
			t.Errorf("%s: %+v, want %d bytes", a.Name, a, len(want))
		}
		if served := b.site.Served(a.Name); served != int64(len(want)) {
			t.Errorf("%s: the site served %d bytes, want %d: not the browser's download", a.Name, served, len(want))
		}
		if gated := strings.HasPrefix(a.Name, "gated-"); gated != strings.Contains(a.Note, "403") {
			t.Errorf("%s: note %q", a.Name, a.Note)
		}
	}
	left, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, e := range left {
		files = append(files, e.Name())
	}
	if strings.Join(files, ",") != "answer.md,gated-data.bin,manifest.json,page-notes.txt,page-slow.bin" {
		t.Errorf("artifact directory holds %v", files)
	}
	for _, n := range names {
		if _, err := os.Stat(filepath.Join(home, "Downloads", n)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("~/Downloads/%s: %v", n, err)
		}
	}
}

// TestModelPicker: the run's model is chosen in the site's picker before
// the send; a model the picker does not offer fails before anything is
// sent.
func TestModelPicker(t *testing.T) {
	t.Parallel()
	b := setup(t, 8)
	prompt := "Use the deep model. [[think=500ms stream=500ms words=10]]"
	if _, err := b.run(t, provider.Request{Session: "ses_m", Run: "run_m", Model: "deep", Prompt: prompt, Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	ps := b.site.Prompts()
	if len(ps) != 1 || ps[0].Model != "deep" {
		t.Fatalf("prompts %+v", ps)
	}
	_, err := b.run(t, provider.Request{Session: "ses_m", Run: "run_n", Model: "gpt-9", Prompt: "never sent", Attempt: 1})
	// The picker lists what it offers: the model name is at fault, not
	// the profile.
	if provider.ClassOf(err) != belay.ClassInvalidRequest || !strings.Contains(err.Error(), `offers no model "gpt-9" (it offers: `) {
		t.Fatalf("err %v", err)
	}
	if n := len(b.site.Prompts()); n != 1 {
		t.Fatalf("%d sends", n)
	}
	// The second UI's picker is a button with a menu (as ChatGPT's is):
	// the menu item that names the model is clicked.
	_ = b.site.SetMode(chatsite.ModeDrift)
	v2, _ := json.Marshal(map[string]any{"options": map[string]any{"site": "loopback-v2", "site_url": b.site.URL() + "/"}})
	if _, err := b.run(t, provider.Request{Session: "ses_m", Run: "run_o", Model: "deep", Prompt: "Menu pick. [[think=500ms stream=500ms words=10]]", Input: v2, Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	_, err = b.run(t, provider.Request{Session: "ses_m", Run: "run_p", Model: "gpt-9", Prompt: "never sent", Input: v2, Attempt: 1})
	if provider.ClassOf(err) != belay.ClassUIDrift || !strings.Contains(err.Error(), "no menu item names gpt-9") {
		t.Fatalf("err %v", err)
	}
	if ps := b.site.Prompts(); len(ps) != 2 || ps[1].Model != "deep" {
		t.Fatalf("prompts %+v", ps)
	}
}

// TestUploads: the run's files are attached in the composer and sent with
// the prompt once every chip shows done; a failed upload fails the run
// as transient before anything is sent.
func TestUploads(t *testing.T) {
	t.Parallel()
	b := setup(t, 8)
	dir := t.TempDir()
	var files []string
	for _, name := range []string{"context.tar", "notes.md", "fail.bin"} {
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, []byte("content of "+name), 0o600); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	opts := func(files []string) []byte {
		b, _ := json.Marshal(map[string]any{"options": map[string]any{"attachments": files}})
		return b
	}
	prompt := "Read the attachments. [[think=500ms stream=500ms words=10]]"
	if _, err := b.run(t, provider.Request{Session: "ses_u", Run: "run_u", Prompt: prompt, Input: opts(files[:2]), Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	ps := b.site.Prompts()
	if len(ps) != 1 || strings.Join(ps[0].Files, ",") != "context.tar,notes.md" {
		t.Fatalf("prompts %+v", ps)
	}
	up := b.site.Uploads()
	for _, name := range []string{"context.tar", "notes.md"} {
		if up[name] != PromptHash("content of "+name) {
			t.Fatalf("upload of %s: %q", name, up[name])
		}
	}
	_, err := b.run(t, provider.Request{Session: "ses_u", Run: "run_v", Prompt: "never sent", Input: opts(files[2:]), Attempt: 1})
	if provider.ClassOf(err) != belay.ClassTransient || !strings.Contains(err.Error(), "failed upload") {
		t.Fatalf("err %v", err)
	}
	_, err = b.run(t, provider.Request{Session: "ses_u", Run: "run_w", Prompt: "never sent", Input: opts([]string{"relative.txt"}), Attempt: 1})
	if provider.ClassOf(err) != belay.ClassInvalidRequest {
		t.Fatalf("relative path: %v", err)
	}
	if n := len(b.site.Prompts()); n != 1 {
		t.Fatalf("%d sends", n)
	}
}

// TestLoginImportAndCheck: importing a profile replaces the seed under its
// lock, marks when, and checks the site with it.
func TestLoginImportAndCheck(t *testing.T) {
	t.Parallel()
	b := setup(t, 8)
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "Local State"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err := b.p.Login(context.Background(), "loopback", LoginOptions{Import: src, URL: b.site.URL() + "/"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Verdict.State != StateReady || !rep.Seed.Exists || rep.Seed.LoggedAt.IsZero() {
		t.Fatalf("report %+v", rep)
	}
	var composer SelectorMatch
	for _, s := range rep.Selectors {
		if s.Key == "composer" {
			composer = s
		}
	}
	if composer.Count != 1 || !composer.Ready {
		t.Fatalf("composer %+v", composer)
	}
	// A profile folder inside a user data directory (Default) is refused,
	// naming the directory to import; so is a profile in use (Chromium's
	// SingletonLock is a symbolic link to host-pid, dangling elsewhere).
	udd := t.TempDir()
	def := filepath.Join(udd, "Default")
	if err := os.MkdirAll(def, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{filepath.Join(udd, "Local State"), filepath.Join(def, "Preferences")} {
		if err := os.WriteFile(f, []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	_, err = b.p.Login(context.Background(), "loopback", LoginOptions{Import: def, URL: b.site.URL() + "/"})
	if err == nil || !strings.Contains(err.Error(), "import the directory that holds it") || !strings.Contains(err.Error(), "--import "+udd) {
		t.Fatalf("import of a profile folder: %v", err)
	}
	if err := os.Symlink("otherhost-12345", filepath.Join(udd, "SingletonLock")); err != nil {
		t.Fatal(err)
	}
	if _, err = b.p.Login(context.Background(), "loopback", LoginOptions{Import: udd, URL: b.site.URL() + "/"}); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("import of a profile in use: %v", err)
	}
	// A seed the check finds logged out is not marked as logged in.
	_ = b.site.SetMode(chatsite.ModeLogin)
	rep, err = b.p.Login(context.Background(), "loopback", LoginOptions{Import: src, URL: b.site.URL() + "/"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Verdict.State != StateLoginRequired || !rep.Seed.LoggedAt.IsZero() || !rep.Seed.Exists {
		t.Fatalf("logged-out import: %+v", rep)
	}
	_ = b.site.SetMode(chatsite.ModeReady)
	// Drift shows in check as the selectors that stopped matching.
	_ = b.site.SetMode(chatsite.ModeDrift)
	rep, err = b.p.Check(context.Background(), "loopback", b.site.URL()+"/")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Verdict.State != StateUnknown || strings.Join(rep.Verdict.Missing, ",") != "composer,send,model_picker" {
		t.Fatalf("drift: %+v", rep.Verdict)
	}
}

// TestCheckOfAPageThatDoesNotLoad: belay browser check on a start URL
// where nothing answers fails with ErrPageLoad, naming the URL, the
// browser's reason and the command to run once the site answers.
func TestCheckOfAPageThatDoesNotLoad(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String() + "/"
	_ = ln.Close() // nothing answers there now
	_, err = b.p.Check(context.Background(), "loopback", dead)
	if !errors.Is(err, ErrPageLoad) {
		t.Fatalf("check of %s: %v, want ErrPageLoad", dead, err)
	}
	for _, want := range []string{dead, "ERR_CONNECTION_REFUSED", "then run again: " + CheckCommand("browser", "loopback", dead)} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not say %q", err, want)
		}
	}
}

// TestSlowArtifactHasNoThirtySecondCap: an artifact that takes more than
// 30 s of real time to download (slow.bin: 45 s of site time, at 1.4
// site seconds per second) is downloaded whole, by belay's own request
// and through the page (Chromium's download manager).
func TestSlowArtifactHasNoThirtySecondCap(t *testing.T) {
	if testing.Short() {
		t.Skip("takes more than 30 s")
	}
	t.Parallel()
	b := setup(t, 1.4)
	prompt := "Two slow files. [[think=300ms stream=300ms words=5 artifacts=slow.bin,page-slow.bin]]"
	start := time.Now()
	rec, err := b.run(t, provider.Request{Session: "ses_s", Run: "run_s", Prompt: prompt, Attempt: 1})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 60*time.Second {
		t.Fatalf("the run took %s: the download was not slower than 30 s, the test proves nothing", took)
	}
	m, err := ReadManifest(filepath.Join(b.dir, "runs", "ses_s", "run_s", "artifacts"))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Artifacts) != 2 {
		t.Fatalf("manifest %+v", m.Artifacts)
	}
	for i, via := range []string{"fetch", "page"} {
		a := m.Artifacts[i]
		want, _ := chatsite.File(rec.ref.Ref.ID, a.Name)
		if a.Error != "" || a.Attempts != 1 || a.Via != via || a.SHA256 != PromptHash(string(want)) {
			t.Fatalf("manifest %+v", a)
		}
	}
}
