package command

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/belayhq/belay/internal/proc"
)

// Files in a run directory.
const (
	fileStdout    = "stdout"    // the agent's stdout: the stream the provider decodes
	fileStderr    = "stderr"    // the agent's stderr
	filePrompt    = "prompt"    // the prompt, the agent's stdin in stdin mode
	filePID       = "pid"       // the wrapper's pid, written by the launcher
	fileID        = "id"        // the process identity (the ref's ID)
	fileExit      = "exit"      // the agent's exit status, written by the wrapper
	fileCancelled = "cancelled" // present once the provider killed the group
)

// handle names one agent: the wrapper's identity and the run directory.
type handle struct {
	pid   int    // the wrapper
	pgid  int    // the process group (and session) of the wrapper and the agent
	token string // the wrapper's proc.StartTime; "" if unknown
	dir   string
}

func (h handle) id() string { return fmt.Sprintf("%d:%d:%s", h.pid, h.pgid, h.token) }

func (h handle) path(name string) string { return filepath.Join(h.dir, name) }

// parseID reads an identity written by handle.id.
func parseID(id string) (pid, pgid int, token string, err error) {
	parts := strings.SplitN(id, ":", 3)
	if len(parts) == 3 {
		pid, err = strconv.Atoi(parts[0])
		if err == nil {
			pgid, err = strconv.Atoi(parts[1])
		}
		if err == nil && pid > 0 && pgid > 0 {
			return pid, pgid, parts[2], nil
		}
	}
	return 0, 0, "", fmt.Errorf("command: malformed process id %q (want pid:pgid:start)", id)
}

// procState is what became of an agent's wrapper process.
type procState int

const (
	stateRunning procState = iota
	stateGone              // it exited
	stateForeign           // its pid names another process now
)

// state checks the wrapper. A PID is only the wrapper if its start time
// matches: a reused PID is never adopted. When the platform cannot tell
// (or the start time was unknown at launch), existence decides. An
// unknown answer counts as running: the next poll asks again.
func (h handle) state() procState {
	alive, err := proc.Alive(h.pid)
	if err != nil {
		return stateRunning
	}
	if !alive {
		return stateGone
	}
	if h.token == "" {
		return stateRunning
	}
	tok, err := proc.StartTime(h.pid)
	switch {
	case errors.Is(err, proc.ErrNoProcess):
		return stateGone
	case err != nil:
		return stateRunning
	case tok != h.token:
		return stateForeign
	}
	return stateRunning
}

// exitStatus returns the status the wrapper recorded, if it did.
func (h handle) exitStatus() (int, bool) {
	b, err := os.ReadFile(h.path(fileExit))
	if err != nil {
		return 0, false
	}
	code, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, false
	}
	return code, true
}
