package daemon

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/client"
)

// startLimited runs the daemon in-process with a connection cap.
func startLimited(t *testing.T, dir string, maxConns int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{DataDir: dir, Version: "test", MaxConns: maxConns, Ready: func() { close(ready) }, Logger: slog.New(slog.DiscardHandler)})
	}()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("daemon: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

// freshHealth checks /healthz on a new connection.
func freshHealth(sock string) error {
	c := client.New(client.Options{Socket: sock})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := c.Health(ctx)
	return err
}

// TestIdleAndSlowClientsCannotCrowdOut: hundreds of idle and slow
// (half-sent header) connections against a cap of 16 leave /healthz and
// the API answering, the daemon holding no more than the cap, and SSE
// streams and long polls working under the cap.
func TestIdleAndSlowClientsCannotCrowdOut(t *testing.T) {
	dir := t.TempDir()
	const maxConns = 16
	startLimited(t, dir, maxConns)
	sock := filepath.Join(dir, SocketName)
	c := client.New(client.Options{Socket: sock})
	ctx := context.Background()
	sess, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Provider: "fake"}, "")
	require.NoError(t, err)

	// Watchers first: they hold their connections for as long as they
	// stream (half the cap may watch).
	type streamed struct{ ev belay.Event }
	events := make(chan streamed, 64)
	sctx, stopStreams := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stopStreams(); wg.Wait() }()
	for range maxConns / 2 {
		wg.Add(1)
		sc := client.New(client.Options{Socket: sock})
		go func() {
			defer wg.Done()
			err := sc.Stream(sctx, sess.ID, 0, func(e belay.Event) error {
				events <- streamed{e}
				return nil
			})
			if sctx.Err() == nil {
				t.Errorf("a stream ended: %v", err)
			}
		}()
	}
	for range maxConns / 2 {
		<-events // session.created: each stream is in
	}
	// A watcher beyond the cap is refused with 503 and Retry-After.
	require.Eventually(t, func() bool {
		resp, err := rawGet(sock, "/v1/sessions/"+sess.ID+"/events", "Accept: text/event-stream")
		if err != nil {
			return false
		}
		return resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") == "1" && strings.Contains(resp.body, apitype.CodeOverloaded)
	}, 10*time.Second, 10*time.Millisecond)

	// The flood: idle connections that never send a byte, and slow ones
	// that never finish their headers.
	var flood []net.Conn
	defer func() {
		for _, fc := range flood {
			fc.Close()
		}
	}()
	for i := range 300 {
		fc, err := net.Dial("unix", sock)
		require.NoError(t, err)
		if i%3 == 0 {
			_, _ = io.WriteString(fc, "GET /healthz HTTP/1.1\r\nHost: belay\r\n")
		}
		flood = append(flood, fc)
		if i%50 == 0 {
			require.NoError(t, freshHealth(sock), "healthz during the flood (%d connections)", i)
		}
	}
	for range 20 {
		require.NoError(t, freshHealth(sock))
	}
	_, err = c.Session(ctx, sess.ID)
	require.NoError(t, err)

	// The daemon closed all but a cap's worth of the flood.
	var closed sync.WaitGroup
	var mu sync.Mutex
	open := 0
	for _, fc := range flood {
		closed.Add(1)
		go func() {
			defer closed.Done()
			_ = fc.SetReadDeadline(time.Now().Add(2 * time.Second))
			_, err := fc.Read(make([]byte, 1))
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				mu.Lock()
				open++
				mu.Unlock()
			}
		}()
	}
	closed.Wait()
	require.LessOrEqual(t, open, maxConns, "connections the daemon still holds")
	resp, err := rawGet(sock, "/metrics")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Regexp(t, `belay_connections_evicted_total [1-9]`, resp.body)
	require.Contains(t, resp.body, "belay_connections_max 16")

	// The streams still stream: an inbox post is an event they all see.
	_, err = c.Post(ctx, sess.ID, apitype.PostRequest{Type: "ui.click"})
	require.NoError(t, err)
	for range maxConns / 2 {
		select {
		case <-events:
		case <-time.After(10 * time.Second):
			t.Fatal("an SSE stream stopped under the flood")
		}
	}
	// A long poll works once a watcher slot is free.
	stopStreams()
	wg.Wait()
	require.Eventually(t, func() bool {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		l, err := c.Events(wctx, sess.ID, 0, 10, time.Second)
		return err == nil && len(l.Events) > 0
	}, 10*time.Second, 10*time.Millisecond)
}

type rawResponse struct {
	*http.Response
	body string
}

// rawGet sends one GET on a new connection and reads the answer.
func rawGet(sock, path string, headers ...string) (*rawResponse, error) {
	conn, err := net.Dial("unix", sock)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: belay\r\n%s\r\n\r\n", path, strings.Join(headers, "\r\n"))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return &rawResponse{Response: resp, body: string(body)}, nil
}

// TestClientFollowsPages: a list longer than the daemon's default page is
// returned whole by the client, which follows the cursors.
func TestClientFollowsPages(t *testing.T) {
	dir := t.TempDir()
	startLimited(t, dir, 0)
	c := client.New(client.Options{Socket: filepath.Join(dir, SocketName)})
	ctx := context.Background()
	want := map[string]bool{}
	for range apitype.DefaultPage + 30 {
		s, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Provider: "fake"}, "")
		require.NoError(t, err)
		want[s.ID] = true
	}
	page, err := c.SessionsPage(ctx, belay.SessionFilter{}, "")
	require.NoError(t, err)
	require.Len(t, page.Sessions, apitype.DefaultPage, "a default page")
	require.NotEmpty(t, page.NextCursor)
	all, err := c.Sessions(ctx, belay.SessionFilter{})
	require.NoError(t, err)
	require.Len(t, all, len(want))
	for i, s := range all {
		require.True(t, want[s.ID])
		if i > 0 {
			require.Less(t, s.ID, all[i-1].ID, "newest first, no repeats")
		}
	}
	some, err := c.Sessions(ctx, belay.SessionFilter{Limit: 7})
	require.NoError(t, err)
	require.Len(t, some, 7)
}
