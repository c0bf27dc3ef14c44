package browser

import (
	"bufio"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/belayhq/belay/internal/proc"
)

// TestKillEndsHelpersInOtherGroups: a browser's helper in a process group
// of its own (as a browser's zygote and crash handler may be), that
// ignores SIGTERM, is ended with the browser: kill returns only once no
// process of the browser's session is left, so the profile deleted next
// has no writer (CI saw a helper still alive after kill).
func TestKillEndsHelpersInOtherGroups(t *testing.T) {
	script := "set -m\n(trap '' TERM; exec sleep 300) &\necho $!\nwait\n"
	cmd := exec.Command("bash", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	helper, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(helper, syscall.SIGKILL)
		_ = cmd.Process.Kill()
		<-exited
	})
	if pg, _ := syscall.Getpgid(helper); pg == cmd.Process.Pid {
		t.Fatalf("the helper is in the browser's process group %d: the test needs it in its own", pg)
	}
	tok, err := proc.StartTime(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	c := chrome{PID: cmd.Process.Pid, Token: tok}
	c.kill()
	<-exited
	if ok, _ := proc.Alive(helper); ok {
		t.Fatalf("helper %d outlived kill", helper)
	}
}
