//go:build unix

package command

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/belayhq/belay/internal/proc"
)

// launcher starts the agent double-forked: this shell is the session and
// process group leader and exits at once; the background subshell (the
// wrapper) runs the agent, waits for it and writes its exit status. $? is
// 128+N when the agent died of signal N. An asynchronous list's stdin is
// /dev/null unless redirected, so the prompt file is redirected
// explicitly.
const launcher = `d=$1; in=$2; shift 2
( "$@" <"$in"; echo $? >"$d/exit" ) &
echo $! >"$d/pid"`

// start launches argv in dir and returns its handle once the wrapper's
// pid is known. The launcher exits at once, so waiting for it is short.
func start(dir string, argv []string, stdin, workDir string, env []string) (handle, error) {
	stdout, err := os.OpenFile(filepath.Join(dir, fileStdout), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return handle{}, err
	}
	defer stdout.Close()
	stderr, err := os.OpenFile(filepath.Join(dir, fileStderr), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return handle{}, err
	}
	defer stderr.Close()
	args := append([]string{"-c", launcher, "belay-command", dir, stdin}, argv...)
	cmd := exec.Command("/bin/sh", args...)
	cmd.Dir = workDir
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Run(); err != nil {
		return handle{}, err
	}
	b, err := os.ReadFile(filepath.Join(dir, filePID))
	if err != nil {
		return handle{}, fmt.Errorf("the launcher reported no pid: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return handle{}, fmt.Errorf("the launcher reported pid %q", strings.TrimSpace(string(b)))
	}
	h := handle{pid: pid, pgid: cmd.Process.Pid, dir: dir}
	// If the wrapper already exited (a quick agent), the token stays empty:
	// it is gone, and its exit status is in the run directory.
	h.token, _ = proc.StartTime(pid)
	if err := os.WriteFile(h.path(fileID), []byte(h.id()+"\n"), 0o600); err != nil {
		return h, err
	}
	return h, nil
}

// kill stops the agent's process group: SIGTERM, up to grace for it to
// exit, then SIGKILL. The group is signalled only if the wrapper is still
// the process it launched, so a PGID reused after the group ended is
// never hit. It records that the provider stopped the agent.
func (h handle) kill(grace time.Duration) {
	// pgid 0 would signal our own group, 1 (with -1) every process.
	if h.pid <= 0 || h.pgid <= 1 || h.pgid == unix.Getpgrp() || h.state() != stateRunning {
		return
	}
	_ = os.WriteFile(h.path(fileCancelled), nil, 0o600)
	if err := unix.Kill(-h.pgid, unix.SIGTERM); err != nil {
		return
	}
	if waitGroup(h.pgid, grace) {
		return
	}
	if unix.Kill(-h.pgid, unix.SIGKILL) == nil {
		// SIGKILL cannot be caught, but dying takes the kernel a moment.
		waitGroup(h.pgid, killWait)
	}
}

// killWait bounds the wait for a SIGKILLed group to be gone.
const killWait = 5 * time.Second

// waitGroup waits up to d for process group pgid to be gone, and
// reports whether it is.
func waitGroup(pgid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for groupAlive(pgid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}
