package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/client"
	"github.com/belayhq/belay/internal/chatsite"
	"github.com/belayhq/belay/provider/browser"
)

// BrowserConfig configures the browser benchmark.
type BrowserConfig struct {
	// Exe is the belay binary the benchmark runs daemons of.
	Exe string
	// Dir is where the scratch data directory goes.
	Dir string
	// Runs is how many runs go at once in the first part (default 2, the
	// default browser cap).
	Runs int
	// Speed is the chat site's time compression (default 60: a
	// 30-minute answer takes 30 s).
	Speed    float64
	Progress func(string)
}

// BrowserResult is `belay bench browser --json`.
type BrowserResult struct {
	Runs  int     `json:"runs"`
	Speed float64 `json:"site_speed"`
	// Send to first delta: from the submit to the first answer text in the
	// journal, including the browser start and the site's thinking time
	// (ThinkSeconds of site time, ThinkSeconds/Speed of real time).
	FirstDeltaP50Seconds float64 `json:"first_delta_p50_s"`
	FirstDeltaMaxSeconds float64 `json:"first_delta_max_s"`
	ThinkSeconds         float64 `json:"site_think_s"`
	// From the site receiving the prompt to the first answer text in the
	// journal: the site's thinking (ThinkSeconds/Speed of real time) plus
	// how long belay takes to see and journal the text. Submit to send
	// is the rest: admission, the browser's start, the page, typing.
	SiteSendToDeltaP50Seconds float64 `json:"site_send_to_first_delta_p50_s"`
	SubmitToSendP50Seconds    float64 `json:"submit_to_site_send_p50_s"`
	// Memory per browser (proportional set size), sampled while the runs
	// stream.
	BrowserMemoryMeanBytes int64 `json:"browser_memory_mean_bytes"`
	BrowserMemoryMaxBytes  int64 `json:"browser_memory_max_bytes"`
	// Recovery after a SIGKILL of the daemon mid-answer: from the kill to
	// the restarted daemon serving, to the run's next answer text, and to
	// its completion.
	RestartSeconds        float64 `json:"restart_s"`
	RecoveryDeltaSeconds  float64 `json:"recovery_first_delta_s"`
	RecoveryFinishSeconds float64 `json:"recovery_complete_s"`
	// ExactlyOnce: after the kill, the stored answer equals the site's and
	// the site received each prompt once.
	ExactlyOnce bool `json:"exactly_once"`
}

// Browser runs the browser benchmark against a loopback chat site with
// real Chromium and real daemons (child processes of Exe).
func Browser(ctx context.Context, cfg BrowserConfig) (*BrowserResult, error) {
	if cfg.Runs <= 0 {
		cfg.Runs = 2
	}
	if cfg.Speed <= 0 {
		cfg.Speed = 60
	}
	if cfg.Progress == nil {
		cfg.Progress = func(string) {}
	}
	site, err := chatsite.Start(chatsite.Options{Speed: cfg.Speed})
	if err != nil {
		return nil, err
	}
	defer site.Close()
	root, err := os.MkdirTemp(cfg.Dir, "belay-bench-browser-")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer os.RemoveAll(root)
	conf := fmt.Sprintf("[providers.browser]\ntype = \"browser\"\nsite = \"loopback\"\nsite_url = %q\npoll_interval = \"100ms\"\nsettle = \"300ms\"\n"+
		"[limits.per_provider]\nbrowser = %d\n", site.URL()+"/", cfg.Runs)
	if err := os.WriteFile(filepath.Join(root, "config.toml"), []byte(conf), 0o600); err != nil {
		return nil, err
	}
	d := &browserDaemon{exe: cfg.Exe, dir: root}
	if err := d.start(ctx); err != nil {
		return nil, err
	}
	defer d.kill()
	defer killProfiles(filepath.Join(root, "browser"))
	c := client.New(client.Options{Socket: filepath.Join(root, "belay.sock")})
	res := &BrowserResult{Runs: cfg.Runs, Speed: cfg.Speed, ThinkSeconds: 60}

	// Part 1: concurrent runs: time to first delta and memory.
	cfg.Progress(fmt.Sprintf("%d concurrent runs", cfg.Runs))
	type sent struct {
		run, session, prompt string
		at                   time.Time
	}
	var runs []sent
	for i := range cfg.Runs {
		prompt := fmt.Sprintf("Bench question %d. [[think=1m pause=10s stream=2m words=200]]", i)
		at := time.Now()
		r, err := c.CreateRun(ctx, apitype.CreateRunRequest{Provider: "browser", Prompt: prompt}, "")
		if err != nil {
			return nil, err
		}
		runs = append(runs, sent{r.ID, r.Session, prompt, at})
	}
	firsts := make([]float64, len(runs))
	fromSend, toSend := make([]float64, len(runs)), make([]float64, len(runs))
	var mem []int64
	var memMu sync.Mutex
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(250 * time.Millisecond):
			}
			for _, m := range browser.ProfileMemory(filepath.Join(root, "browser")) {
				memMu.Lock()
				mem = append(mem, m)
				memMu.Unlock()
			}
		}
	}()
	for i, s := range runs {
		at, err := firstText(ctx, c, s.session, s.run, 0)
		if err != nil {
			close(stop)
			wg.Wait()
			return nil, err
		}
		firsts[i] = at.Sub(s.at).Seconds()
		for _, p := range site.Prompts() {
			if p.Hash == chatsite.Hash(s.prompt) {
				fromSend[i], toSend[i] = at.Sub(p.At).Seconds(), p.At.Sub(s.at).Seconds()
			}
		}
	}
	for _, s := range runs {
		if err := waitComplete(ctx, c, s.run); err != nil {
			close(stop)
			wg.Wait()
			return nil, err
		}
	}
	close(stop)
	wg.Wait()
	sort.Float64s(firsts)
	sort.Float64s(fromSend)
	sort.Float64s(toSend)
	res.FirstDeltaP50Seconds, res.FirstDeltaMaxSeconds = firsts[(len(firsts)-1)/2], firsts[len(firsts)-1]
	res.SiteSendToDeltaP50Seconds, res.SubmitToSendP50Seconds = fromSend[(len(fromSend)-1)/2], toSend[(len(toSend)-1)/2]
	var sum int64
	for _, m := range mem {
		sum += m
		res.BrowserMemoryMaxBytes = max(res.BrowserMemoryMaxBytes, m)
	}
	if len(mem) > 0 {
		res.BrowserMemoryMeanBytes = sum / int64(len(mem))
	}
	exact := true
	for _, s := range runs {
		exact = exact && verify(ctx, c, site, s.session, s.run, s.prompt)
	}

	// Part 2: SIGKILL the daemon mid-answer and measure the recovery.
	cfg.Progress("daemon kill mid-answer")
	prompt := "Bench recovery. [[think=30s pause=5s stream=5m words=400]]"
	r, err := c.CreateRun(ctx, apitype.CreateRunRequest{Provider: "browser", Prompt: prompt}, "")
	if err != nil {
		return nil, err
	}
	if _, err := firstText(ctx, c, r.Session, r.ID, 0); err != nil {
		return nil, err
	}
	evs, err := c.Events(ctx, r.Session, 0, 0, 0)
	if err != nil {
		return nil, err
	}
	last := evs.LastSeq
	d.kill()
	killed := time.Now()
	if err := d.start(ctx); err != nil {
		return nil, err
	}
	res.RestartSeconds = time.Since(killed).Seconds()
	at, err := firstText(ctx, c, r.Session, r.ID, last)
	if err != nil {
		return nil, err
	}
	res.RecoveryDeltaSeconds = at.Sub(killed).Seconds()
	if err := waitComplete(ctx, c, r.ID); err != nil {
		return nil, err
	}
	res.RecoveryFinishSeconds = time.Since(killed).Seconds()
	res.ExactlyOnce = exact && verify(ctx, c, site, r.Session, r.ID, prompt)
	d.stop()
	return res, nil
}

// firstText waits for the first run.text event of run after seq and
// returns when it was seen.
func firstText(ctx context.Context, c *client.Client, session, run string, after uint64) (time.Time, error) {
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		evs, err := c.Events(ctx, session, after, 0, 2*time.Second)
		if err != nil {
			return time.Time{}, err
		}
		for _, e := range evs.Events {
			after = e.Seq
			if e.Run == run && e.Type == belay.EventRunText {
				if e.TS.IsZero() {
					return time.Now(), nil
				}
				return e.TS, nil
			}
		}
		if r, err := c.Run(ctx, run); err == nil && r.Status.Terminal() {
			return time.Time{}, fmt.Errorf("bench: run %s ended %s before any text: %s", run, r.Status, r.Reason)
		}
	}
	return time.Time{}, fmt.Errorf("bench: run %s streamed nothing in 5 minutes", run)
}

func waitComplete(ctx context.Context, c *client.Client, run string) error {
	r, err := c.WaitRun(ctx, run, 10*time.Minute)
	if err != nil {
		return err
	}
	if r.Status != belay.RunComplete {
		msg := r.Reason
		if r.Error != nil {
			msg = r.Error.Message
		}
		return fmt.Errorf("bench: run %s is %s: %s", run, r.Status, msg)
	}
	return nil
}

// verify reports whether the journal holds the site's answer (streamed as
// the page's text, and as the run's answer the site's copy of it) and the
// site received the prompt once.
func verify(ctx context.Context, c *client.Client, site *chatsite.Site, session, run, prompt string) bool {
	evs, err := c.Events(ctx, session, 0, 0, 0)
	if err != nil {
		return false
	}
	var b strings.Builder
	for _, e := range evs.Events {
		if e.Run == run && e.Type == belay.EventRunText {
			var d struct{ Text string }
			if json.Unmarshal(e.Data, &d) != nil {
				return false
			}
			b.WriteString(d.Text)
		}
	}
	want, err := chatsite.AnswerText(prompt)
	if err != nil || b.String() != want || site.Count(prompt) != 1 {
		return false
	}
	md, err := chatsite.AnswerMarkdown(prompt)
	var answer strings.Builder
	return err == nil && c.Answer(ctx, run, &answer) == nil && answer.String() == md
}

// browserDaemon is a `belay serve` child process.
type browserDaemon struct {
	exe, dir string
	cmd      *exec.Cmd
}

func (d *browserDaemon) start(ctx context.Context) error {
	if d.exe == "" {
		return errors.New("bench: no belay binary to run daemons of")
	}
	logf, err := os.OpenFile(filepath.Join(d.dir, "serve.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	d.cmd = exec.Command(d.exe, "serve", "--data", d.dir)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	if err := d.cmd.Start(); err != nil {
		return fmt.Errorf("bench: start daemon: %w", err)
	}
	c := client.New(client.Options{Socket: filepath.Join(d.dir, "belay.sock")})
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err := c.Health(ctx); err == nil {
			return nil
		}
	}
	d.kill()
	return errors.New("bench: the daemon did not start in 30s")
}

// kill SIGKILLs the daemon, as a crash would.
func (d *browserDaemon) kill() {
	if d.cmd != nil && d.cmd.Process != nil {
		_ = d.cmd.Process.Kill()
		_ = d.cmd.Wait()
		d.cmd = nil
	}
}

// stop stops the daemon gracefully.
func (d *browserDaemon) stop() {
	if d.cmd != nil && d.cmd.Process != nil {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		_ = d.cmd.Wait()
		d.cmd = nil
	}
}

// killProfiles ends any browser left with a profile under root.
func killProfiles(root string) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !strings.Contains(string(b), "--user-data-dir="+root) {
			continue
		}
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
