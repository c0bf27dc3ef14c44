package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/client"
	"github.com/belayhq/belay/lock"
	"github.com/belayhq/belay/provider/openai/openaitest"
	"github.com/belayhq/belay/store/fsstore"
)

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"belay": func() { os.Exit(run()) },
	})
}

// TestScripts runs the end-to-end scripts in testdata/script against the
// real binary.
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir: "testdata/script",
		Setup: func(env *testscript.Env) error {
			home := filepath.Join(env.WorkDir, "home")
			env.Setenv("BELAY_HOME", home)
			// A daemon a script started (or left running on failure) is
			// stopped at the end.
			env.Defer(func() { stopDaemon(home) })
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			// exitcode N cmd args...: run a command and require exit code N.
			"exitcode": func(ts *testscript.TestScript, neg bool, args []string) {
				if neg || len(args) < 2 {
					ts.Fatalf("usage: exitcode N command args...")
				}
				want, err := strconv.Atoi(args[0])
				if err != nil {
					ts.Fatalf("bad exit code %q", args[0])
				}
				err = ts.Exec(args[1], args[2:]...)
				got := 0
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					got = ee.ExitCode()
				} else if err != nil {
					ts.Fatalf("%v", err)
				}
				if got != want {
					ts.Fatalf("exit code %d, want %d", got, want)
				}
			},
			// openaiserver REPLY: start a loopback OpenAI-compatible server
			// answering REPLY; its base URL is in $OPENAI_BASE_URL.
			"openaiserver": func(ts *testscript.TestScript, neg bool, args []string) {
				if neg || len(args) != 1 {
					ts.Fatalf("usage: openaiserver REPLY")
				}
				srv := openaitest.NewServer(openaitest.Options{Reply: args[0]})
				ts.Defer(srv.Close)
				ts.Setenv("OPENAI_BASE_URL", srv.URL)
			},
			// waitwatchers N: wait until the daemon of $BELAY_HOME has at
			// least N open event streams or long polls.
			"waitwatchers": func(ts *testscript.TestScript, neg bool, args []string) {
				if len(args) != 1 {
					ts.Fatalf("usage: waitwatchers N")
				}
				n, err := strconv.Atoi(args[0])
				ts.Check(err)
				c := client.New(client.Options{Socket: filepath.Join(ts.Getenv("BELAY_HOME"), "belay.sock")})
				pollUntil(ts, func() (bool, error) {
					h, err := c.Health(context.Background())
					return err == nil && h.Watchers >= n, nil
				}, fmt.Sprintf("the daemon never had %d watchers", n))
			},
			// waitresumable FILE: wait until the run whose id FILE holds is
			// streaming and its provider reported where it is (a ref the
			// next daemon can resume from), so that a crash after it
			// leads to a resume, not a resend.
			"waitresumable": func(ts *testscript.TestScript, neg bool, args []string) {
				if neg || len(args) != 1 {
					ts.Fatalf("usage: waitresumable RUN-ID-FILE")
				}
				id := strings.TrimSpace(ts.ReadFile(args[0]))
				c := client.New(client.Options{Socket: filepath.Join(ts.Getenv("BELAY_HOME"), "belay.sock")})
				pollUntil(ts, func() (bool, error) {
					run, err := c.Run(context.Background(), id)
					if err == nil && run.Status.Terminal() {
						return false, fmt.Errorf("run %s ended (%s) before it was resumable", id, run.Status)
					}
					return err == nil && run.Phase == belay.PhaseStreaming && (run.Ref.Cursor != "" || run.Ref.ID != ""), nil
				}, "run "+id+" never became resumable")
			},
			// killdaemon: SIGKILL the daemon of $BELAY_HOME, as a crash would.
			"killdaemon": func(ts *testscript.TestScript, neg bool, args []string) {
				pid := daemonPID(ts.Getenv("BELAY_HOME"))
				if pid == 0 {
					ts.Fatalf("no daemon holds the lock")
				}
				ts.Check(syscall.Kill(pid, syscall.SIGKILL))
				for i := 0; i < 200; i++ {
					if syscall.Kill(pid, 0) != nil {
						return
					}
					time.Sleep(10 * time.Millisecond)
				}
				ts.Fatalf("daemon %d did not die", pid)
			},
		},
	})
}

// pollUntil polls cond every 10 ms until it holds, fails, or 30 s pass
// (then the script fails with what).
func pollUntil(ts *testscript.TestScript, cond func() (bool, error), what string) {
	deadline := time.Now().Add(30 * time.Second)
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	for ; ; <-poll.C {
		ok, err := cond()
		switch {
		case err != nil:
			ts.Fatalf("%v", err)
		case ok:
			return
		case time.Now().After(deadline):
			ts.Fatalf("%s", what)
		}
	}
}

func daemonPID(home string) int {
	st, err := lock.Inspect(filepath.Join(home, fsstore.LockName), lock.Options{})
	if err != nil || st.Holder == nil || st.Stale {
		return 0
	}
	return st.Holder.PID
}

func stopDaemon(home string) {
	pid := daemonPID(home)
	if pid == 0 {
		return
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	for i := 0; i < 500; i++ {
		if syscall.Kill(pid, 0) != nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
}
