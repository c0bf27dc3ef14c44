package browser

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/belayhq/belay/internal/proc"
)

// deadOwner is a process that was started and has exited: the owner of
// a daemon that was killed and never restarted.
func deadOwner(t *testing.T) owner {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tok, err := proc.StartTime(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	host, _ := os.Hostname()
	return owner{Host: host, PID: cmd.Process.Pid, Token: tok}
}

// fakeBrowser is a stand-in for a run's browser: a shell leading its own
// session (as belay starts browsers), with a child in its process group
// (as a browser has helpers).
type fakeBrowser struct {
	cmd    *exec.Cmd
	child  int
	exited chan struct{}
}

func startFake(t *testing.T, profile string, setsid bool) *fakeBrowser {
	t.Helper()
	if err := os.MkdirAll(profile, 0o700); err != nil {
		t.Fatal(err)
	}
	return startShell(t, setsid, "sleep 300 & echo $!; wait", "--user-data-dir="+profile)
}

// startShell runs script in bash (its $1 is arg); the script starts a
// child and prints its pid first.
func startShell(t *testing.T, setsid bool, script, arg string) *fakeBrowser {
	t.Helper()
	cmd := exec.Command("bash", "-c", script, "bash", arg)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: setsid}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeBrowser{cmd: cmd, child: child, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(f.exited) }()
	t.Cleanup(func() {
		_ = syscall.Kill(child, syscall.SIGKILL)
		_ = cmd.Process.Kill()
		<-f.exited
	})
	return f
}

func (f *fakeBrowser) chrome(t *testing.T, profile string) chrome {
	t.Helper()
	tok, err := proc.StartTime(f.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return chrome{PID: f.cmd.Process.Pid, Token: tok, Profile: profile}
}

func (f *fakeBrowser) ended() bool {
	select {
	case <-f.exited:
	default:
		return false
	}
	ok, _ := proc.Alive(f.child)
	return !ok
}

func putRecord(t *testing.T, runDir string, rec record) {
	t.Helper()
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(runDir, recordName), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestReapEndsOnlyOrphanedBrowsers: with child processes standing in for
// browsers, Reap ends the process group of a browser whose recorded
// owner is gone (and deletes its profile), and signals nothing else: a
// browser whose owner lives, a browser of a run that will resume (when
// the caller says so), a process that reused a recorded pid (another
// start time), and a process that is not the leader of its own session.
func TestReapEndsOnlyOrphanedBrowsers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	runDir := func(run string) string { return filepath.Join(dir, "runs", "ses_r", run) }
	dead := deadOwner(t)
	cases := map[string]struct {
		owner  owner
		setsid bool
		token  string // overrides the recorded start time
	}{
		"orphan":      {owner: dead, setsid: true},
		"resumes":     {owner: dead, setsid: true},
		"followed":    {owner: self(), setsid: true},
		"pid_reused":  {owner: dead, setsid: true, token: "another-boot:1"},
		"not_leader":  {owner: dead, setsid: false},
		"exited_long": {owner: dead, setsid: true},
	}
	fakes := map[string]*fakeBrowser{}
	for run, c := range cases {
		profile := filepath.Join(runDir(run), "profile1-x")
		f := startFake(t, profile, c.setsid)
		fakes[run] = f
		br := f.chrome(t, profile)
		if c.token != "" {
			br.Token = c.token
		}
		putRecord(t, runDir(run), record{Browser: br, Owner: c.owner})
	}
	// A browser that exited on its own leaves a stale record.
	_ = syscall.Kill(fakes["exited_long"].child, syscall.SIGKILL)
	_ = fakes["exited_long"].cmd.Process.Kill()
	<-fakes["exited_long"].exited

	p, err := New("browser", Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	reaped, err := p.Reap(ReapOptions{Active: func(_, run string) bool { return run == "resumes" }})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, r := range reaped {
		got[r.Run] = r.Ended
	}
	// The recorded browsers of exited_long and pid_reused are gone (a live
	// process with a reused pid is another process): their records are
	// cleared, nothing is signalled.
	if len(got) != 3 || !got["orphan"] || got["exited_long"] || got["pid_reused"] {
		t.Fatalf("reaped %+v", reaped)
	}
	waitUntil(t, 10*time.Second, fakes["orphan"].ended, "the orphan's process group was not ended")
	if _, err := os.Stat(filepath.Join(runDir("orphan"), "profile1-x")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the orphan's profile is still there: %v", err)
	}
	for _, run := range []string{"orphan", "exited_long"} {
		if _, err := os.Stat(filepath.Join(runDir(run), recordName)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s: the record is still there: %v", run, err)
		}
	}
	for _, run := range []string{"resumes", "followed", "pid_reused", "not_leader"} {
		if fakes[run].ended() {
			t.Fatalf("%s: ended", run)
		}
	}

	// Without Active (belay browser reap, no daemon to resume anything),
	// the browser of the run that would resume is ended too; the others
	// are still left alone.
	reaped, err = p.Reap(ReapOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(reaped) != 1 || reaped[0].Run != "resumes" || !reaped[0].Ended {
		t.Fatalf("reaped %+v", reaped)
	}
	waitUntil(t, 10*time.Second, fakes["resumes"].ended, "the browser was not ended")
	for _, run := range []string{"followed", "pid_reused", "not_leader"} {
		if fakes[run].ended() {
			t.Fatalf("%s: ended", run)
		}
	}

	// A record that cannot be read is reported, and nothing is signalled
	// on its word.
	if err := os.WriteFile(filepath.Join(runDir("followed"), recordName), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Reap(ReapOptions{}); err == nil {
		t.Fatal("an unreadable record was not reported")
	}
}

// TestOrphanedBrowsersAreReaped: the real browser of a run that finished
// while its daemon was gone is ended by the provider's next run (which
// reaps with RunActive), and its profile deleted; the browser of an
// active run is left for its resume.
func TestOrphanedBrowsersAreReaped(t *testing.T) {
	t.Parallel()
	needChromium(t)
	dir := t.TempDir()
	p, err := New("browser", Config{Dir: dir, RunActive: func(_, run string) bool { return run == "run_live" }})
	if err != nil {
		t.Fatal(err)
	}
	chromium, _ := findChromium("")
	dead := deadOwner(t)
	var bs []*chrome
	for _, run := range []string{"run_done", "run_live"} {
		rd := filepath.Join(dir, "runs", "ses_k", run)
		profile := filepath.Join(rd, "profile1-x")
		if err := os.MkdirAll(profile, 0o700); err != nil {
			t.Fatal(err)
		}
		b, err := startChrome(context.Background(), chromium, profile, true, nil, filepath.Join(dir, run+".log"), DefaultStartTimeout)
		if err != nil {
			t.Fatal(err)
		}
		defer b.kill()
		putRecord(t, rd, record{Browser: *b, Owner: dead})
		bs = append(bs, b)
	}
	p.reapOrphans()
	waitUntil(t, 10*time.Second, func() bool { return !bs[0].alive() }, "the finished run's browser is still running")
	if _, err := os.Stat(bs[0].Profile); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("its profile is still there: %v", err)
	}
	if !bs[1].alive() {
		t.Fatal("the active run's browser was ended")
	}
}
