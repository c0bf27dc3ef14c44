// Package crashtest is the harness of belay's crash tests: it runs the
// test binary again as a child that works until it is killed with
// SIGKILL, and hands the test what the child acknowledged on its stdout,
// one line at a time. The child mode is chosen by an environment variable
// that the package's TestMain checks.
package crashtest

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// Child is a running copy of the test binary.
type Child struct {
	cmd    *exec.Cmd
	stderr strings.Builder
	// Lines are the child's stdout lines; the channel is closed when the
	// child's stdout ends.
	Lines <-chan string
}

// Start runs the test binary with no test selected and env added to the
// environment (one entry of which puts it in child mode). The race
// detector's exit delay is off: a killed child does not linger.
func Start(t testing.TB, env ...string) *Child {
	t.Helper()
	c := &Child{cmd: exec.Command(os.Args[0], "-test.run=^$")}
	c.cmd.Env = append(append(os.Environ(), "GORACE=atexit_sleep_ms=0"), env...)
	c.cmd.Stderr = &c.stderr
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 4096)
	c.Lines = lines
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	return c
}

// First returns the child's first line, or fails the test with the
// child's stderr if it ended without writing one.
func (c *Child) First(t testing.TB, what string) string {
	t.Helper()
	l, ok := <-c.Lines
	if !ok {
		_ = c.cmd.Wait()
		t.Fatalf("the child ended before %s: %s", what, c.stderr.String())
	}
	return l
}

// Kill kills the child with SIGKILL and returns the lines it wrote that
// were not read yet, once it is gone.
func (c *Child) Kill(t testing.TB) []string {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var rest []string
	for l := range c.Lines {
		rest = append(rest, l)
	}
	_ = c.cmd.Wait() // killed: the error says so
	return rest
}

// Wait reads the child's remaining lines, calling line for each, and
// returns how the child ended.
func (c *Child) Wait(line func(string)) error {
	for l := range c.Lines {
		if line != nil {
			line(l)
		}
	}
	return c.cmd.Wait()
}

// Stderr is what the child wrote to its stderr; complete once Kill or
// Wait returned.
func (c *Child) Stderr() string { return c.stderr.String() }

// Process is the child's process, to kill it when it overruns.
func (c *Child) Process() *os.Process { return c.cmd.Process }
