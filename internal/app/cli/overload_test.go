package cli

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay/internal/app/daemon"
	"github.com/belayhq/belay/runtime"
)

// TestOverloadIsExit6: when every connection the daemon allows is busy,
// the CLI says the daemon is overloaded and exits 6 (not a timeout and
// exit 1), and works again once the load is gone.
func TestOverloadIsExit6(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- daemon.Run(ctx, daemon.Options{DataDir: dir, Version: "test", MaxConns: 8, Ready: func() { close(ready) }, Logger: slog.New(slog.DiscardHandler)})
	}()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		t.Fatal(err)
	}
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	sock := filepath.Join(dir, daemon.SocketName)
	env := map[string]string{"BELAY_HOME": dir, "BELAY_NO_AUTOSTART": "1"}

	// Eight requests whose bodies never come: each holds a connection the
	// daemon is serving (the 100 Continue says the handler is reading).
	var busy []net.Conn
	for range 8 {
		c, err := net.Dial("unix", sock)
		require.NoError(t, err)
		busy = append(busy, c)
		fmt.Fprint(c, "POST /v1/sessions HTTP/1.1\r\nHost: belay\r\nContent-Type: application/json\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n")
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusContinue, resp.StatusCode)
	}
	code, _, stderr := run(t, env, "send", "--provider", "fake", "hello")
	require.Equal(t, ExitUnreachable, code, stderr)
	require.Contains(t, stderr, "overloaded")
	require.Contains(t, stderr, "limit of 8 connections")
	require.Contains(t, stderr, "Try: ")

	for _, c := range busy {
		c.Close()
	}
	code, stdout, stderr := run(t, env, "send", "--provider", "fake", "hello")
	require.Equal(t, ExitOK, code, stderr)
	require.Contains(t, stdout, "run_")
}

// TestSendRefusesWhatCannotBeStored: belay send checks the prompt against
// the journal's limit before it contacts a daemon.
func TestSendRefusesWhatCannotBeStored(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	env := map[string]string{"BELAY_HOME": t.TempDir(), "BELAY_NO_AUTOSTART": "1"}
	code := Main(context.Background(), []string{"belay", "send", "--provider", "fake", "-"}, Stdio{
		In: strings.NewReader(strings.Repeat("x", 10<<20)), Out: &out, Err: &errb,
		Getenv: func(k string) string { return env[k] },
	})
	require.Equal(t, ExitError, code, errb.String())
	require.Contains(t, errb.String(), fmt.Sprintf("at most %d bytes", runtime.MaxInput))
	require.NotContains(t, errb.String(), "not reachable", "refused before any connection")
}

// TestHungDaemonIsExit6: a daemon that accepts connections but never
// answers is unreachable (exit 6, saying so), not a timeout error (exit 1),
// and no second daemon is started on its data directory.
func TestHungDaemonIsExit6(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l, err := net.Listen("unix", filepath.Join(dir, daemon.SocketName))
	require.NoError(t, err)
	held := make(chan net.Conn, 16)
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held <- c // never answered
		}
	}()
	defer func() {
		l.Close()
		<-accepted
		close(held)
		for c := range held {
			c.Close()
		}
	}()
	code, _, stderr := run(t, map[string]string{"BELAY_HOME": dir}, "send", "--provider", "fake", "hello")
	require.Equal(t, ExitUnreachable, code, stderr)
	require.Contains(t, stderr, "did not answer within 5s")
	require.Contains(t, stderr, "Try: belay doctor")
}
