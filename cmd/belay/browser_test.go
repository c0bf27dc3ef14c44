package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/remote"
	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/client"
	"github.com/belayhq/belay/internal/chatsite"
	"github.com/belayhq/belay/provider/browser"
)

// browserSetup starts a loopback chat site at speed and writes a daemon
// config whose browser provider polls fast. It returns the site, the data
// dir and the belay binary.
func browserSetup(t *testing.T, speed float64) (*chatsite.Site, string, string) {
	t.Helper()
	if _, err := exec.LookPath("chromium"); err != nil {
		t.Skip("no chromium: apt-get install -y chromium")
	}
	site, err := chatsite.Start(chatsite.Options{Speed: speed})
	require.NoError(t, err)
	t.Cleanup(func() { site.Close() })
	dir := t.TempDir()
	cfg := "[providers.browser]\ntype = \"browser\"\npoll_interval = \"50ms\"\nsettle = \"150ms\"\nprogress_every = \"1s\"\nstart_timeout = \"45s\"\n" +
		"[retry]\nbase = \"100ms\"\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.toml"), []byte(cfg), 0o600))
	bin := filepath.Join(t.TempDir(), "belay")
	require.NoError(t, os.Symlink(os.Args[0], bin))
	t.Cleanup(func() { killBrowsers(dir) })
	return site, dir, bin
}

// killBrowsers ends the browsers a failed test left under dir.
func killBrowsers(dir string) {
	out, _ := exec.Command("pgrep", "-f", "--", "--user-data-dir="+dir).Output()
	for _, f := range strings.Fields(string(out)) {
		var pid int
		if _, err := fmt.Sscan(f, &pid); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// belayCmd runs the belay binary on dir and returns its stdout.
func belayCmd(t *testing.T, bin, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "BELAY_HOME="+dir, "BELAY_NO_AUTOSTART=1")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	require.NoError(t, cmd.Run(), "belay %s: %s", strings.Join(args, " "), errb.String())
	return out.String()
}

// browserEnv is a loopback site and a daemon configured for it, with a
// client and a deadline for the test.
type browserEnv struct {
	site     *chatsite.Site
	dir, bin string
	daemon   *exec.Cmd
	c        *client.Client
	ctx      context.Context
}

// newBrowserEnv starts a site at speed and a daemon; the daemon (the one
// running when the test ends) is killed at cleanup.
func newBrowserEnv(t *testing.T, speed float64, timeout time.Duration) *browserEnv {
	t.Helper()
	site, dir, bin := browserSetup(t, speed)
	e := &browserEnv{site: site, dir: dir, bin: bin, c: client.New(client.Options{Socket: filepath.Join(dir, "belay.sock")})}
	e.daemon = startServe(t, bin, dir)
	t.Cleanup(func() { _ = e.daemon.Process.Kill(); _ = e.daemon.Wait() })
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	e.ctx = ctx
	return e
}

// sendLoopback sends prompt to the loopback site with belay send --json
// (and the extra flags) and returns the run and its session.
func sendLoopback(t *testing.T, bin, dir string, site *chatsite.Site, prompt string, extra ...string) (run, session string) {
	t.Helper()
	args := append([]string{"send", "--site", "loopback", "--site-url", site.URL() + "/", "--json"}, extra...)
	out := belayCmd(t, bin, dir, append(args, prompt)...)
	var res struct{ Run, Session string }
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	return res.Run, res.Session
}

// requireAnswer checks that the journal holds the site's whole answer to
// prompt for run, streamed as the page's text, and as the run's answer
// the site's copy of it (markdown), and that the site received the prompt
// once.
func requireAnswer(t *testing.T, c *client.Client, site *chatsite.Site, session, run, prompt string) {
	t.Helper()
	want, err := chatsite.AnswerText(prompt)
	require.NoError(t, err)
	require.Equal(t, want, runText(t, c, session, run))
	require.Equal(t, answerMarkdown(t, prompt), runAnswer(t, c, run))
	require.Equal(t, 1, site.Count(prompt), "the site received the prompt %d times", site.Count(prompt))
}

// answerMarkdown is the site's copy of its answer to prompt.
func answerMarkdown(t *testing.T, prompt string) string {
	t.Helper()
	md, err := chatsite.AnswerMarkdown(prompt)
	require.NoError(t, err)
	text, err := chatsite.AnswerText(prompt)
	require.NoError(t, err)
	require.NotEqual(t, text, md, "the site's copy equals its text: the test proves nothing")
	return md
}

// runAnswer is the run's answer as the API serves it (belay read).
func runAnswer(t *testing.T, c *client.Client, run string) string {
	t.Helper()
	var b strings.Builder
	require.NoError(t, c.Answer(context.Background(), run, &b))
	return b.String()
}

// runText is the answer text the journal holds for a run.
func runText(t *testing.T, c *client.Client, session, run string) string {
	t.Helper()
	evs, err := c.Events(context.Background(), session, 0, 0, 0)
	require.NoError(t, err)
	var b strings.Builder
	for _, e := range evs.Events {
		if e.Run == run && e.Type == "run.text" {
			var d struct{ Text string }
			require.NoError(t, json.Unmarshal(e.Data, &d))
			b.WriteString(d.Text)
		}
	}
	return b.String()
}

// TestBrowserSendThroughTheCLI sends with `belay send --site` through a
// real daemon and reads the answer with `belay read`.
func TestBrowserSendThroughTheCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test")
	}
	t.Parallel()
	site, dir, bin := browserSetup(t, 8)
	daemon := startServe(t, bin, dir)
	defer func() { _ = daemon.Process.Signal(syscall.SIGTERM); _ = daemon.Wait() }()
	prompt := "What is a fencing token? [[think=2s stream=2s words=30 artifacts=notes.txt]]"
	out := belayCmd(t, bin, dir, "send", "--site", "loopback", "--site-url", site.URL()+"/", "--json", "--wait", "--timeout", "60s", prompt)
	var res struct {
		Run, Session, Status string
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	require.Equal(t, "complete", res.Status, out)
	// The answer streamed as the page showed it (what watch printed);
	// the run's answer is the site's copy of it (markdown), for belay
	// read, belay read --json and the session's export.
	c := client.New(client.Options{Socket: filepath.Join(dir, "belay.sock")})
	requireAnswer(t, c, site, res.Session, res.Run, prompt)
	md := answerMarkdown(t, prompt)
	got := belayCmd(t, bin, dir, "read", res.Run)
	require.Equal(t, md, strings.TrimRight(got, "\n"))
	var rj struct{ Answer string }
	out = belayCmd(t, bin, dir, "read", "--json", res.Run)
	require.NoError(t, json.Unmarshal([]byte(out), &rj), out)
	require.Equal(t, md, rj.Answer)

	// The answer's file is in the run's artifact directory.
	var arts struct {
		Dir       string
		Answer    *browser.Answer
		Artifacts []browser.Artifact
	}
	out = belayCmd(t, bin, dir, "read", "--artifacts", "--json", res.Run)
	require.NoError(t, json.Unmarshal([]byte(out), &arts), out)
	require.Len(t, arts.Artifacts, 1, out)
	// The final answer's file is the same copy.
	require.NotNil(t, arts.Answer, out)
	require.Equal(t, browser.SourceCopy, arts.Answer.Source)
	copied, err := os.ReadFile(filepath.Join(arts.Dir, arts.Answer.File))
	require.NoError(t, err)
	require.Equal(t, md, string(copied))
	a := arts.Artifacts[0]
	r, err := client.New(client.Options{Socket: filepath.Join(dir, "belay.sock")}).Run(context.Background(), res.Run)
	require.NoError(t, err)
	content, err := chatsite.File(r.Ref.ID, "notes.txt")
	require.NoError(t, err)
	require.Equal(t, browser.PromptHash(string(content)), a.SHA256)
	onDisk, err := os.ReadFile(filepath.Join(arts.Dir, a.File))
	require.NoError(t, err)
	require.Equal(t, content, onDisk)
	require.Equal(t, filepath.Join(dir, "sessions", res.Session, "artifacts", res.Run), arts.Dir)

	// A follow-up in the session continues the same conversation.
	follow := "And a follow-up. [[think=1s stream=1s words=12]]"
	out = belayCmd(t, bin, dir, "send", "--session", res.Session, "--json", "--wait", "--timeout", "60s", follow)
	var res2 struct{ Run, Status string }
	require.NoError(t, json.Unmarshal([]byte(out), &res2), out)
	require.Equal(t, "complete", res2.Status, out)
	want2, err := chatsite.AnswerText(follow)
	require.NoError(t, err)
	require.Equal(t, answerMarkdown(t, follow), strings.TrimRight(belayCmd(t, bin, dir, "read", res2.Run), "\n"))
	// The export holds the copies, not the streamed text.
	var exported []struct{ Role, Content string }
	out = belayCmd(t, bin, dir, "sessions", "export", "--format", "openai", res.Session)
	require.NoError(t, json.Unmarshal([]byte(out), &exported), out)
	require.Len(t, exported, 4, out)
	require.Equal(t, md, exported[1].Content)
	require.Equal(t, answerMarkdown(t, follow), exported[3].Content)
	r2, err := client.New(client.Options{Socket: filepath.Join(dir, "belay.sock")}).Run(context.Background(), res2.Run)
	require.NoError(t, err)
	require.Equal(t, r.Ref.ID, r2.Ref.ID, "the follow-up went to another conversation")
	text, done, err := site.Answer(r.Ref.ID, 1)
	require.NoError(t, err)
	require.True(t, done)
	require.Equal(t, want2, text)
	require.Equal(t, 1, site.Count(follow))

	// The doctor names the binding, without prompt or answer text.
	out = belayCmd(t, bin, dir, "sessions", "doctor", "--json", res.Session)
	require.NotContains(t, out, "follow-up")
	var rep struct {
		Browser struct {
			Site, SendPhase, SeedLock, ConversationURL string
		}
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	require.Equal(t, "loopback", rep.Browser.Site)
	require.Equal(t, "done", rep.Browser.SendPhase)
	require.Equal(t, "free", rep.Browser.SeedLock)
	require.Contains(t, rep.Browser.ConversationURL, "/c/")
}

// TestBrowserRunSurvivesDaemonKill SIGKILLs the daemon while a long
// (time-compressed: 30 minutes of site time) answer streams, restarts it,
// and checks that the run reattached to the same target and conversation,
// stored the site's answer exactly, and sent the prompt once.
func TestBrowserRunSurvivesDaemonKill(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test")
	}
	t.Parallel()
	e := newBrowserEnv(t, 400, 2*time.Minute)
	site, dir, bin, c, ctx := e.site, e.dir, e.bin, e.c, e.ctx

	// 30 minutes of site time: 20 thinking, 10 streaming 300 words.
	prompt := "Prove the scheduler fair. [[think=20m pause=1m stream=9m words=300]]"
	out := belayCmd(t, bin, dir, "send", "--site", "loopback", "--site-url", site.URL()+"/", "--json", prompt)
	var res struct{ Run, Session string }
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)

	// Kill the daemon once the answer streams into the journal.
	require.Eventually(t, func() bool {
		r, err := c.Run(ctx, res.Run)
		require.NoError(t, err)
		require.False(t, r.Status.Terminal(), "the run ended before the kill: %s: %+v", r.Status, r.Error)
		return len(runText(t, c, res.Session, res.Run)) > 40
	}, time.Minute, 20*time.Millisecond, "the answer never streamed")
	before, err := c.Run(ctx, res.Run)
	require.NoError(t, err)
	require.NoError(t, e.daemon.Process.Signal(syscall.SIGKILL))
	_ = e.daemon.Wait()
	killedAt := time.Now()
	e.daemon = startServe(t, bin, dir)

	r, err := c.WaitRun(ctx, res.Run, time.Minute)
	require.NoError(t, err)
	require.Equal(t, belay.RunComplete, r.Status, r.Reason)
	t.Logf("recovered and finished %s after the kill", time.Since(killedAt).Round(time.Millisecond))

	want, err := chatsite.AnswerText(prompt)
	require.NoError(t, err)
	requireAnswer(t, c, site, res.Session, res.Run, prompt)
	require.True(t, resumed(t, c, res.Session, res.Run), "the restarted daemon did not resume the run")
	// The same conversation and target: reattached, not rebound.
	require.Equal(t, before.Ref.ID, r.Ref.ID)
	require.Equal(t, before.Ref.Target, r.Ref.Target)
	cur, err := browser.ParseCursor(r.Ref.Cursor)
	require.NoError(t, err)
	require.Zero(t, cur.Rebinds, cur.Evidence)
	text, done, err := site.Answer(r.Ref.ID, 0)
	require.NoError(t, err)
	require.True(t, done)
	require.Equal(t, want, text)
}

// TestBrowserConcurrentRuns runs four answers at once in isolated
// browsers under the default browser cap of 2: no answer crosses into
// another run, each prompt reaches the site once, and no more than two
// browsers run at a time.
func TestBrowserConcurrentRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test")
	}
	t.Parallel()
	site, dir, bin := browserSetup(t, 8)
	daemon := startServe(t, bin, dir)
	defer func() { _ = daemon.Process.Signal(syscall.SIGTERM); _ = daemon.Wait() }()
	c := client.New(client.Options{Socket: filepath.Join(dir, "belay.sock")})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	stop := make(chan struct{})
	var most int
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if n := browsersUnder(dir); n > most {
				most = n
			}
		}
	}()
	type sent struct{ run, session, prompt string }
	var runs []sent
	for i := range 4 {
		prompt := fmt.Sprintf("Question %d from its own run. [[think=1s stream=2s words=%d]]", i, 20+i*7)
		out := belayCmd(t, bin, dir, "send", "--site", "loopback", "--site-url", site.URL()+"/", "--json", prompt)
		var res struct{ Run, Session string }
		require.NoError(t, json.Unmarshal([]byte(out), &res), out)
		runs = append(runs, sent{res.Run, res.Session, prompt})
	}
	convs := map[string]bool{}
	for _, s := range runs {
		r, err := c.WaitRun(ctx, s.run, 2*time.Minute)
		require.NoError(t, err)
		require.Equal(t, belay.RunComplete, r.Status, r.Reason)
		requireAnswer(t, c, site, s.session, s.run, s.prompt)
		convs[r.Ref.ID] = true
	}
	close(stop)
	wg.Wait()
	require.Len(t, convs, 4, "runs shared a conversation")
	require.LessOrEqual(t, most, 2, "more browsers than the cap ran at once")
	require.Positive(t, most)
}

// resumed reports whether an attempt of the run resumed it.
func resumed(t *testing.T, c *client.Client, session, run string) bool {
	t.Helper()
	evs, err := c.Events(context.Background(), session, 0, 0, 0)
	require.NoError(t, err)
	for _, e := range evs.Events {
		var d struct {
			Data struct{ Resume bool } `json:"data"`
		}
		if e.Run == run && e.Type == "run.updated" && json.Unmarshal(e.Data, &d) == nil && d.Data.Resume {
			return true
		}
	}
	return false
}

// browsersUnder counts the distinct browser profiles running under dir.
func browsersUnder(dir string) int {
	out, _ := exec.Command("pgrep", "-a", "-f", "--", "--user-data-dir="+dir).Output()
	profiles := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		for _, f := range strings.Fields(line) {
			if p, ok := strings.CutPrefix(f, "--user-data-dir="); ok {
				profiles[p] = true
			}
		}
	}
	return len(profiles)
}

// TestBrowserDeadlinePassesThenRetryReads: a run's deadline passes while
// the site is still answering. The run fails with class timeout and the
// site is not stopped; the doctor names belay runs retry, which, once the
// site finished, reads the answer from the conversation without sending
// the prompt again.
func TestBrowserDeadlinePassesThenRetryReads(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test")
	}
	t.Parallel()
	e := newBrowserEnv(t, 8, 2*time.Minute)
	site, dir, bin, c, ctx := e.site, e.dir, e.bin, e.c, e.ctx

	site.HoldAnswers()
	prompt := "Think past the deadline. [[think=2s stream=2s words=40]]"
	var res struct{ Run, Session string }
	res.Run, res.Session = sendLoopback(t, bin, dir, site, prompt, "--deadline", "15s")
	r, err := c.WaitRun(ctx, res.Run, time.Minute)
	require.NoError(t, err)
	require.Equal(t, belay.RunFailed, r.Status)
	require.Equal(t, belay.ClassTimeout, r.Error.Class, r.Error.Message)
	require.Equal(t, 1, site.Count(prompt), "the deadline passed before the send: the test proves nothing")
	stopped, err := site.Stopped(r.Ref.ID, 0)
	require.NoError(t, err)
	require.False(t, stopped, "the deadline stopped the site's answer")

	out := belayCmd(t, bin, dir, "sessions", "doctor", "--json", res.Session)
	var rep struct {
		NextAction, Command, Reason string
		Browser                     struct{ SendPhase string }
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	require.Equal(t, "resend", rep.NextAction, out)
	require.Equal(t, "belay runs retry "+res.Run, rep.Command, out)
	require.Contains(t, rep.Reason, "without sending the prompt again")
	require.Equal(t, "sent", rep.Browser.SendPhase)

	site.FinishHeld()
	// The doctor's command as it says, with a deadline longer than the
	// 15 s the retry would keep: reading the answer back must not race a
	// browser start on a loaded machine (what is under test is that the
	// retry reads, not how fast).
	out = belayCmd(t, bin, dir, append(strings.Fields(rep.Command)[1:], "--deadline", "2m")...)
	retried := strings.Fields(out)[0]
	r2, err := c.WaitRun(ctx, retried, time.Minute)
	require.NoError(t, err)
	require.Equal(t, belay.RunComplete, r2.Status, r2.Reason)
	requireAnswer(t, c, site, res.Session, retried, prompt)
	require.Equal(t, r.Ref.ID, r2.Ref.ID)
	cur, err := browser.ParseCursor(r2.Ref.Cursor)
	require.NoError(t, err)
	require.Contains(t, cur.Evidence, "adopted the send of run "+res.Run)
}

// TestBrowserReapAfterDaemonKill: the daemon is SIGKILLed mid-answer and
// not restarted; its run's browser keeps running. belay browser reap ends
// it (its owner is gone) and deletes its profile copy. When a daemon
// starts again later, the run reopens its conversation in a fresh browser
// and stores the whole answer, the prompt sent once.
func TestBrowserReapAfterDaemonKill(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test")
	}
	t.Parallel()
	e := newBrowserEnv(t, 20, 2*time.Minute)
	site, dir, bin, c, ctx := e.site, e.dir, e.bin, e.c, e.ctx
	prompt := "Outlive the daemon. [[think=2s pause=1s stream=40s words=200]]"
	var res struct{ Run, Session string }
	res.Run, res.Session = sendLoopback(t, bin, dir, site, prompt)
	require.Eventually(t, func() bool { return len(runText(t, c, res.Session, res.Run)) > 20 }, time.Minute, 20*time.Millisecond)
	require.NoError(t, e.daemon.Process.Signal(syscall.SIGKILL))
	_ = e.daemon.Wait()
	require.Equal(t, 1, browsersUnder(dir), "the browser did not outlive the daemon")

	out := belayCmd(t, bin, dir, "browser", "reap", "--json")
	var reaped struct{ Reaped []browser.Reaped }
	require.NoError(t, json.Unmarshal([]byte(out), &reaped), out)
	require.Len(t, reaped.Reaped, 1, out)
	require.Equal(t, res.Run, reaped.Reaped[0].Run)
	require.True(t, reaped.Reaped[0].Ended, out)
	require.Eventually(t, func() bool { return browsersUnder(dir) == 0 }, 10*time.Second, 20*time.Millisecond, "the browser is still running")
	profiles, err := filepath.Glob(filepath.Join(dir, "browser", "runs", res.Session, res.Run, "profile*"))
	require.NoError(t, err)
	require.Empty(t, profiles)
	// Nothing left to reap.
	out = belayCmd(t, bin, dir, "browser", "reap", "--json")
	require.JSONEq(t, `{"reaped":[]}`, out)

	e.daemon = startServe(t, bin, dir)
	r, err := c.WaitRun(ctx, res.Run, time.Minute)
	require.NoError(t, err)
	require.Equal(t, belay.RunComplete, r.Status, r.Reason)
	requireAnswer(t, c, site, res.Session, res.Run, prompt)
	cur, err := browser.ParseCursor(r.Ref.Cursor)
	require.NoError(t, err)
	require.Equal(t, 1, cur.Rebinds, cur.Evidence)
	require.Contains(t, cur.Evidence, "the browser of the run is gone")
}

// TestBrowserHeadedLogin: the site needs a login. A run fails before
// typing with class auth and the doctor names belay browser login. Then
// belay browser login opens a real window (under Xvfb) on the seed
// profile; the test, as the person, logs in through the site's form and
// closes the window; login checks the seed headless and reports it ready;
// and a run, in its own copy of the seed, gets the answer.
func TestBrowserHeadedLogin(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test")
	}
	xvfb, err := exec.LookPath("xvfb-run")
	if err != nil {
		t.Skip("no xvfb-run: apt-get install -y xvfb")
	}
	t.Parallel()
	begin := time.Now()
	e := newBrowserEnv(t, 8, 3*time.Minute)
	site, dir, bin, c, ctx := e.site, e.dir, e.bin, e.c, e.ctx
	require.NoError(t, site.SetMode(chatsite.ModeAuth))

	// Not logged in: the run fails before anything is typed.
	var res struct{ Run, Session, Status string }
	res.Run, res.Session = sendLoopback(t, bin, dir, site, "never typed")
	r, err := c.WaitRun(ctx, res.Run, time.Minute)
	require.NoError(t, err)
	require.Equal(t, belay.RunFailed, r.Status)
	require.Equal(t, belay.ClassAuth, r.Error.Class, r.Error.Message)
	require.Empty(t, site.Prompts())
	out := belayCmd(t, bin, dir, "sessions", "doctor", "--json", res.Session)
	var rep struct{ NextAction, Command string }
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	require.Equal(t, "reauth", rep.NextAction)
	require.Equal(t, "belay browser login loopback --url "+site.URL()+"/", rep.Command, "the start URL the run was sent with (--site-url)")
	t.Logf("auth failure after %s", time.Since(begin).Round(time.Millisecond))

	// belay browser login, headed, in a virtual display.
	login := exec.Command(xvfb, "-a", bin, "browser", "login", "loopback", "--url", site.URL()+"/", "--json")
	login.Env = append(os.Environ(), "BELAY_HOME="+dir, "BELAY_NO_AUTOSTART=1")
	// Its own process group: a failed test ends xvfb-run, Xvfb and the
	// window together.
	login.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var lout, lerr lockedBuffer
	login.Stdout, login.Stderr = &lout, &lerr
	require.NoError(t, login.Start())
	loginDone, exited := make(chan error, 1), make(chan struct{})
	go func() { loginDone <- login.Wait(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
			// It ended (and was waited for): its group id may name another
			// process group by now.
		default:
			_ = syscall.Kill(-login.Process.Pid, syscall.SIGKILL)
		}
	})

	// The person: log in in the window, then close it.
	seed := filepath.Join(dir, "browser", "seeds", "loopback")
	var ws string
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(filepath.Join(seed, "DevToolsActivePort"))
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if err != nil || len(lines) != 2 {
			return false
		}
		ws = "ws://127.0.0.1:" + lines[0] + lines[1]
		return strings.Contains(lerr.String(), "log in to loopback in the window")
	}, time.Minute, 50*time.Millisecond, "no window opened: %s", &lerr)
	t.Logf("window open after %s", time.Since(begin).Round(time.Millisecond))
	require.NoError(t, personLogsIn(ctx, ws))
	t.Logf("logged in after %s", time.Since(begin).Round(time.Millisecond))
	select {
	case err := <-loginDone:
		require.NoError(t, err, "belay browser login: %s", lerr.String())
	case <-ctx.Done():
		t.Fatal("belay browser login did not return after the window closed")
	}
	var check struct {
		Verdict struct{ State string }
		Seed    browser.SeedInfo
	}
	require.NoError(t, json.Unmarshal([]byte(lout.String()), &check), lout.String())
	require.Equal(t, "ready", check.Verdict.State, lout.String())
	require.False(t, check.Seed.LoggedAt.IsZero())
	require.Equal(t, 1, site.Logins())
	t.Logf("login returned after %s", time.Since(begin).Round(time.Millisecond))

	// A run, in a copy of the seed, is logged in.
	prompt := "Now logged in. [[think=500ms stream=1s words=20]]"
	res.Run, res.Session = sendLoopback(t, bin, dir, site, prompt)
	r, err = c.WaitRun(ctx, res.Run, time.Minute)
	require.NoError(t, err)
	require.Equal(t, belay.RunComplete, r.Status, r.Reason)
	requireAnswer(t, c, site, res.Session, res.Run, prompt)
	require.Equal(t, 1, site.Logins(), "the run logged in again instead of using the seed")
}

// personLogsIn plays the person at belay browser login's window: submits
// the site's login form, waits for the chat to show, and closes the
// browser.
func personLogsIn(ctx context.Context, ws string) error {
	port := strings.TrimPrefix(ws, "ws://")
	port = port[:strings.IndexByte(port, '/')]
	var page string
	deadline := time.Now().Add(30 * time.Second)
	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	for ; page == ""; <-poll.C {
		resp, err := http.Get("http://" + port + "/json/list")
		if err != nil {
			return err
		}
		var ts []struct{ ID, Type, URL string }
		err = json.NewDecoder(resp.Body).Decode(&ts)
		resp.Body.Close()
		if err != nil {
			return err
		}
		for _, ti := range ts {
			if ti.Type == "page" && strings.Contains(ti.URL, "/login") {
				page = ti.ID
			}
		}
		if page == "" && time.Now().After(deadline) {
			return fmt.Errorf("no login page among %+v", ts)
		}
	}
	actx, acancel := remote.NewAllocator(ctx, ws, remote.NoModifyURL)
	defer acancel()
	pctx, pcancel := chromedp.NewContext(actx, chromedp.WithTargetID(target.ID(page)))
	defer pcancel()
	if err := chromedp.Do(pctx); err != nil {
		return err
	}
	eval := func(expr string) (bool, error) {
		c, cancel := context.WithTimeout(pctx, 5*time.Second)
		defer cancel()
		return chromedp.Run(c, chromedp.Evaluate[bool](expr))
	}
	if _, err := eval(`(() => { document.querySelector("#login").click(); return true; })()`); err != nil {
		return fmt.Errorf("click Log in: %w", err)
	}
	wctx, wcancel := context.WithDeadline(pctx, deadline)
	defer wcancel()
	if _, err := chromedp.Run(wctx, chromedp.WaitVisible("#prompt")); err != nil {
		return fmt.Errorf("the chat did not show after logging in: %w", err)
	}
	// Closing the window ends the browser (and login's wait); the
	// connection drops with it.
	_, _ = chromedp.Run(pctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, cdpbrowser.Close, cdp.Empty{})
		return err
	}))
	return nil
}

// lockedBuffer is a buffer a child process writes while a test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
