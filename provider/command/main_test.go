package command

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// The test binary doubles as a scripted agent CLI: with agentEnv set it
// plays the agentScript in it; with childEnv set it is a process the agent
// spawned, which sleeps in the agent's process group.
const (
	agentEnv = "BELAY_COMMAND_TEST_AGENT"
	childEnv = "BELAY_COMMAND_TEST_CHILD"
)

// agentLimit bounds every wait of a scripted agent, so a failed test never
// leaves one behind for long.
const agentLimit = 60 * time.Second

func TestMain(m *testing.M) {
	if s := os.Getenv(agentEnv); s != "" {
		os.Exit(playAgent(s))
	}
	if f := os.Getenv(childEnv); f != "" {
		writeFile(f, strconv.Itoa(os.Getpid()))
		time.Sleep(agentLimit)
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// agentScript is what a scripted agent does.
type agentScript struct {
	Steps []agentStep `json:"steps"`
	// Stderr is written to stderr before exiting with Exit.
	Stderr string `json:"stderr,omitempty"`
	Exit   int    `json:"exit,omitempty"`
	// PIDFile, if set, receives the agent's pid first.
	PIDFile string `json:"pidFile,omitempty"`
	// TermFile, if set: SIGTERM creates it and is otherwise ignored.
	TermFile string `json:"termFile,omitempty"`
}

type agentStep struct {
	Line      string        `json:"line,omitempty"`      // written with a newline
	Raw       string        `json:"raw,omitempty"`       // written as is
	EchoStdin bool          `json:"echoStdin,omitempty"` // copies stdin to stdout
	EchoArgs  bool          `json:"echoArgs,omitempty"`  // writes the arguments after "--", a line each
	Sleep     time.Duration `json:"sleep,omitempty"`
	WaitFile  string        `json:"waitFile,omitempty"` // waits until it exists
	Touch     string        `json:"touch,omitempty"`    // creates it
	Spawn     string        `json:"spawn,omitempty"`    // starts a child that writes its pid here
	Hang      bool          `json:"hang,omitempty"`
}

func playAgent(js string) int {
	var s agentScript
	if err := json.Unmarshal([]byte(js), &s); err != nil {
		fmt.Fprintln(os.Stderr, "bad agent script:", err)
		return 98
	}
	if s.PIDFile != "" {
		writeFile(s.PIDFile, strconv.Itoa(os.Getpid()))
	}
	if s.TermFile != "" {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM)
		go func() {
			<-ch
			writeFile(s.TermFile, "term")
		}()
	}
	for _, st := range s.Steps {
		switch {
		case st.Line != "":
			fmt.Println(st.Line)
		case st.Raw != "":
			fmt.Print(st.Raw)
		case st.EchoStdin:
			_, _ = io.Copy(os.Stdout, os.Stdin)
		case st.EchoArgs:
			for i, a := range os.Args {
				if a == "--" {
					for _, b := range os.Args[i+1:] {
						fmt.Println(b)
					}
					break
				}
			}
		case st.Sleep > 0:
			time.Sleep(st.Sleep)
		case st.WaitFile != "":
			deadline := time.Now().Add(agentLimit)
			for !exists(st.WaitFile) {
				if time.Now().After(deadline) {
					return 99
				}
				time.Sleep(10 * time.Millisecond)
			}
		case st.Touch != "":
			writeFile(st.Touch, "")
		case st.Spawn != "":
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), childEnv+"="+st.Spawn, agentEnv+"=")
			if err := cmd.Start(); err != nil {
				return 97
			}
		case st.Hang:
			time.Sleep(agentLimit)
			return 99
		}
	}
	fmt.Fprint(os.Stderr, s.Stderr)
	return s.Exit
}

// writeFile creates name with content atomically.
func writeFile(name, content string) {
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err == nil {
		_ = os.Rename(tmp, name)
	}
}

func exists(name string) bool {
	_, err := os.Stat(name)
	return err == nil
}

func readPID(t *testing.T, name string) int {
	t.Helper()
	waitFor(t, func() bool { return exists(name) })
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// waitFor polls cond for up to 30 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition never held")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func tmpFile(t *testing.T, name string) string {
	return filepath.Join(t.TempDir(), name)
}
