package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/client"
	"github.com/belayhq/belay/internal/app/daemon"
	"github.com/belayhq/belay/internal/app/mcpserver"
	"github.com/belayhq/belay/internal/testpg"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startDaemon runs a daemon in-process on a fresh data directory until
// the test ends.
func startDaemon(t testing.TB) (dir string, c *client.Client) {
	t.Helper()
	return startDaemonOn(t, "")
}

// startDaemonOn runs a daemon on the given store setting ("": the file
// store in its data directory).
func startDaemonOn(t testing.TB, storeURL string) (dir string, c *client.Client) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "d")
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- daemon.Run(ctx, daemon.Options{DataDir: dir, Store: storeURL, Version: "test", Ready: func() { close(ready) }, Logger: slog.New(slog.DiscardHandler)})
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
	return dir, client.New(client.Options{Socket: filepath.Join(dir, daemon.SocketName)})
}

// agent is an MCP client session that records the resource updates it gets.
type agent struct {
	cs *mcp.ClientSession

	mu      sync.Mutex
	updates []string
	got     chan string
}

func newAgent() (*agent, *mcp.Client) {
	a := &agent{got: make(chan string, 16)}
	c := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "1"}, &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			a.mu.Lock()
			a.updates = append(a.updates, req.Params.URI)
			a.mu.Unlock()
			a.got <- req.Params.URI
		},
	})
	return a, c
}

func (a *agent) count(uri string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, u := range a.updates {
		if u == uri {
			n++
		}
	}
	return n
}

// connectInMemory serves a Server to an agent over the SDK's in-memory
// transport (what stdio carries).
func connectInMemory(t testing.TB, c *client.Client, scope mcpserver.Scope) *agent {
	t.Helper()
	srv, err := mcpserver.New(mcpserver.Options{Client: c, Scope: scope, Version: "test", Subscriber: "inmemory-agent"})
	require.NoError(t, err)
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.MCP().Connect(ctx, st, nil)
	require.NoError(t, err)
	srv.Start(ctx)
	a, mc := newAgent()
	cs, err := mc.Connect(ctx, ct, nil)
	require.NoError(t, err)
	a.cs = cs
	t.Cleanup(func() {
		_ = cs.Close()
		_ = ss.Wait()
		srv.Stop()
	})
	return a
}

// connectHTTP connects an agent to the daemon's /mcp over its socket.
func connectHTTP(t *testing.T, dir, query string) *agent {
	t.Helper()
	sock := filepath.Join(dir, daemon.SocketName)
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	a, mc := newAgent()
	cs, err := mc.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: "http://belay/mcp" + query, HTTPClient: hc}, nil)
	require.NoError(t, err)
	a.cs = cs
	t.Cleanup(func() {
		_ = cs.Close()
		hc.CloseIdleConnections()
	})
	return a
}

// call calls a tool and decodes its structured result; it fails the test
// on a tool error.
func call[T any](t *testing.T, a *agent, name string, args map[string]any) T {
	t.Helper()
	res, err := a.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	require.NoError(t, err)
	require.False(t, res.IsError, "tool %s failed: %s", name, text(res))
	var out T
	b, err := json.Marshal(res.StructuredContent)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &out))
	return out
}

// toolError calls a tool that must fail and returns its error.
func toolError(t *testing.T, a *agent, name string, args map[string]any) mcpserver.ToolError {
	t.Helper()
	res, err := a.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	require.NoError(t, err, "a tool failure is a tool result, never a protocol error")
	require.True(t, res.IsError, "tool %s succeeded: %s", name, text(res))
	var e struct{ Error mcpserver.ToolError }
	require.NoError(t, json.Unmarshal([]byte(text(res)), &e), text(res))
	return e.Error
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

const reply = "The sky is blue because air scatters short wavelengths more: Rayleigh scattering. Ünïcödé ✓ survives paging."

func fakeScript() map[string]any {
	return map[string]any{"reply": reply, "tokens": 40, "rate": 400, "firstToken": "100ms"}
}

func TestAgentIsWokenOverBothTransports(t *testing.T) {
	t.Parallel()
	dir, c := startDaemon(t)
	agentIsWoken(t, dir, c)
}

// TestAgentIsWokenOnPostgres: the same over a daemon whose store is
// PostgreSQL (addressed, held wake-ups and run tags in the database).
func TestAgentIsWokenOnPostgres(t *testing.T) {
	t.Parallel()
	pg := testpg.Start(t, testpg.Options{})
	dir, c := startDaemonOn(t, pg.Database(t))
	agentIsWoken(t, dir, c)
}

// agentIsWoken: over both transports an agent lists the tools, sends a
// run, subscribes, is woken once when it ends, reads the answer, and the
// wake-up is recorded in the daemon.
func agentIsWoken(t *testing.T, dir string, c *client.Client) {
	for name, connect := range map[string]func() *agent{
		"inmemory": func() *agent { return connectInMemory(t, c, mcpserver.Scope{}) },
		"http":     func() *agent { return connectHTTP(t, dir, "") },
	} {
		t.Run(name, func(t *testing.T) {
			a := connect()
			tools, err := a.cs.ListTools(context.Background(), nil)
			require.NoError(t, err)
			var names []string
			for _, tl := range tools.Tools {
				names = append(names, tl.Name)
				require.NotEmpty(t, tl.Description, tl.Name)
				require.NotNil(t, tl.InputSchema, tl.Name)
			}
			require.Subset(t, names, []string{"send", "status", "read", "wait", "cancel", "doctor", "runs_list", "inbox_post", "inbox_poll", "inbox_ack", "retry"})

			run := call[mcpserver.RunInfo](t, a, "send", map[string]any{"prompt": "why is the sky blue?", "provider": "fake", "script": fakeScript(), "meta": map[string]any{"ticket": "T-1"}})
			require.Equal(t, "belay://runs/"+run.Run, run.URI)
			require.Contains(t, run.Tags, mcpserver.DefaultTag, "a run sent here carries the scope's tag")

			require.NoError(t, a.cs.Subscribe(context.Background(), &mcp.SubscribeParams{URI: run.URI}))

			select {
			case uri := <-a.got:
				require.Equal(t, run.URI, uri)
			case <-time.After(30 * time.Second):
				ds, _ := c.Inbox(context.Background(), run.Session, "")
				t.Fatalf("no notifications/resources/updated for the run; inbox: %+v", ds)
			}
			res, err := a.cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: run.URI})
			require.NoError(t, err)
			var rr mcpserver.RunResource
			require.NoError(t, json.Unmarshal([]byte(res.Contents[0].Text), &rr))
			require.Equal(t, "complete", rr.Run.Status)
			require.Equal(t, reply, rr.Answer)
			require.Equal(t, "T-1", rr.Run.Meta["ticket"])

			// Paged reads put the answer back together, never splitting a rune.
			var got strings.Builder
			cursor := ""
			for i := 0; ; i++ {
				require.Less(t, i, 100)
				page := call[mcpserver.ReadOut](t, a, "read", map[string]any{"run": run.Run, "cursor": cursor, "maxBytes": 7})
				got.WriteString(page.Text)
				cursor = page.Cursor
				if !page.More {
					require.True(t, page.Final)
					break
				}
			}
			require.Equal(t, reply, got.String())

			// The wake-up is recorded in the daemon: who and when, once.
			ds, err := c.Inbox(context.Background(), run.Session, "")
			require.NoError(t, err)
			var wakes []belay.Delivery
			for _, d := range ds {
				if d.Type == mcpserver.WakeType {
					wakes = append(wakes, d)
				}
			}
			require.Len(t, wakes, 1)
			require.Equal(t, belay.DeliveryDone, wakes[0].Status)
			require.Contains(t, wakes[0].Result, "notified test-agent/")
			require.False(t, wakes[0].SettledAt.IsZero())
			require.Equal(t, 1, a.count(run.URI))

			// Subscribing again (as after a restart) makes no second wake-up.
			require.NoError(t, a.cs.Subscribe(context.Background(), &mcp.SubscribeParams{URI: run.URI}))
			ds, err = c.Inbox(context.Background(), run.Session, "")
			require.NoError(t, err)
			n := 0
			for _, d := range ds {
				if d.Type == mcpserver.WakeType {
					n++
					require.Equal(t, belay.DeliveryDone, d.Status)
				}
			}
			require.Equal(t, 1, n)

			list := call[mcpserver.ListOut](t, a, "runs_list", map[string]any{"limit": 50})
			require.NotEmpty(t, list.Runs)
			found := false
			for _, r := range list.Runs {
				found = found || r.Run == run.Run
			}
			require.True(t, found)

			doc := call[mcpserver.DoctorOut](t, a, "doctor", map[string]any{"run": run.Run})
			require.Equal(t, run.Session, doc.Session)
			require.NotEmpty(t, doc.NextAction)
		})
	}
}

func TestWaitIsBoundedAndCancel(t *testing.T) {
	t.Parallel()
	_, c := startDaemon(t)
	a := connectInMemory(t, c, mcpserver.Scope{Tags: []string{"team-a"}})
	run := call[mcpserver.RunInfo](t, a, "send", map[string]any{"prompt": "long", "provider": "fake",
		"script": map[string]any{"reply": "slow", "firstToken": "1h"}})
	w := call[mcpserver.WaitOut](t, a, "wait", map[string]any{"run": run.Run, "timeoutSeconds": 0.2})
	require.Equal(t, "still_running", w.State)
	require.Equal(t, "0", w.Cursor)
	require.Contains(t, w.Next, run.URI)

	got := call[mcpserver.RunInfo](t, a, "cancel", map[string]any{"run": run.Run, "reason": "test"})
	require.Equal(t, "cancelled", got.Status)
	w = call[mcpserver.WaitOut](t, a, "wait", map[string]any{"run": run.Run, "timeoutSeconds": 5})
	require.Equal(t, "ended", w.State)

	// retry sends the cancelled run again, once.
	r1 := call[mcpserver.RetryOut](t, a, "retry", map[string]any{"run": run.Run})
	require.Equal(t, run.Run, r1.Retries)
	require.Equal(t, run.Session, r1.Session)
	require.NotEqual(t, run.Run, r1.Run)
	r2 := call[mcpserver.RetryOut](t, a, "retry", map[string]any{"run": run.Run})
	require.Equal(t, r1.Run, r2.Run, "a second retry is the first")
	call[mcpserver.RunInfo](t, a, "cancel", map[string]any{"run": r1.Run})

	// A retry may name its own deadline; a bad one is refused.
	e := toolError(t, a, "retry", map[string]any{"run": run.Run, "deadline": "-5m", "idempotencyKey": "r3"})
	require.Equal(t, apitype.CodeInvalid, e.Code)
	r3 := call[mcpserver.RetryOut](t, a, "retry", map[string]any{"run": run.Run, "deadline": "3h", "idempotencyKey": "r3"})
	got3, err := c.Run(context.Background(), r3.Run)
	require.NoError(t, err)
	require.WithinDuration(t, got3.CreatedAt.Add(3*time.Hour), got3.Deadline, time.Second, "the retry's own deadline")
	call[mcpserver.RunInfo](t, a, "cancel", map[string]any{"run": r3.Run})
}

func TestScopeAndValidation(t *testing.T) {
	t.Parallel()
	_, c := startDaemon(t)
	a := connectInMemory(t, c, mcpserver.Scope{Tags: []string{"team-a"}})
	ctx := context.Background()

	// A run sent by someone else, untagged, is out of scope.
	other, err := c.CreateRun(ctx, apitype.CreateRunRequest{Provider: "fake", Prompt: "secret"}, "")
	require.NoError(t, err)
	for _, tool := range []string{"status", "read", "wait", "cancel"} {
		e := toolError(t, a, tool, map[string]any{"run": other.ID})
		require.Equal(t, mcpserver.CodeOutOfScope, e.Code, tool)
		require.Contains(t, e.Command, "--session "+other.Session)
	}
	e := toolError(t, a, "send", map[string]any{"prompt": "x", "session": other.Session})
	require.Equal(t, mcpserver.CodeOutOfScope, e.Code)
	e = toolError(t, a, "inbox_post", map[string]any{"session": other.Session, "type": "x"})
	require.Equal(t, mcpserver.CodeOutOfScope, e.Code)
	_, err = a.cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "belay://runs/" + other.ID})
	require.Error(t, err)
	// A refused subscription records no wake-up. (Under protocol
	// 2026-07-28 the SDK client does not report the refusal.)
	_ = a.cs.Subscribe(ctx, &mcp.SubscribeParams{URI: "belay://runs/" + other.ID})
	ds, err := c.Inbox(ctx, other.Session, "")
	require.NoError(t, err)
	for _, d := range ds {
		require.NotEqual(t, mcpserver.WakeType, d.Type)
	}

	// A run tagged with the scope's tag by another client is in scope.
	mine, err := c.CreateRun(ctx, apitype.CreateRunRequest{Provider: "fake", Prompt: "hi", Tags: []string{"team-a"}}, "")
	require.NoError(t, err)
	st := call[mcpserver.StatusOut](t, a, "status", map[string]any{"run": mine.ID})
	require.Equal(t, mine.ID, st.Run.Run)

	for _, tc := range []struct {
		tool string
		args map[string]any
		code string
	}{
		{"send", map[string]any{"prompt": ""}, apitype.CodeInvalid},
		{"send", map[string]any{"prompt": "x"}, apitype.CodeInvalid},
		{"send", map[string]any{"prompt": "x", "provider": "fake", "policy": "sometimes"}, apitype.CodeInvalid},
		{"send", map[string]any{"prompt": "x", "provider": "nope"}, apitype.CodeInvalid},
		{"send", map[string]any{"prompt": "x", "provider": "fake", "tags": []string{"bad tag!"}}, apitype.CodeInvalid},
		{"status", map[string]any{"run": "../../etc"}, apitype.CodeInvalid},
		{"status", map[string]any{"run": "run_00000000000000000000000000"}, apitype.CodeNotFound},
		{"read", map[string]any{"run": mine.ID, "cursor": "-3"}, apitype.CodeInvalid},
		{"read", map[string]any{"run": mine.ID, "maxBytes": 1 << 30}, apitype.CodeInvalid},
		{"runs_list", map[string]any{"tag": "team-b"}, apitype.CodeInvalid},
		{"runs_list", map[string]any{"since": "yesterday"}, apitype.CodeInvalid},
	} {
		e := toolError(t, a, tc.tool, tc.args)
		require.Equal(t, tc.code, e.Code, "%s %v: %s", tc.tool, tc.args, e.Message)
		require.NotEmpty(t, e.NextAction)
	}
}

func TestSessionScopeAndSessionResource(t *testing.T) {
	t.Parallel()
	_, c := startDaemon(t)
	ctx := context.Background()
	granted, err := c.CreateRun(ctx, apitype.CreateRunRequest{Provider: "fake", Prompt: "hi", Script: json.RawMessage(`{"reply":"granted answer"}`)}, "")
	require.NoError(t, err)
	_, err = c.WaitRun(ctx, granted.ID, 20*time.Second)
	require.NoError(t, err)
	a := connectInMemory(t, c, mcpserver.Scope{Sessions: []string{granted.Session}})

	st := call[mcpserver.StatusOut](t, a, "status", map[string]any{"session": granted.Session})
	require.Len(t, st.Runs, 1)
	run := call[mcpserver.RunInfo](t, a, "send", map[string]any{"prompt": "again", "session": granted.Session, "script": map[string]any{"reply": "second answer"}})
	require.Equal(t, granted.Session, run.Session)
	w := call[mcpserver.WaitOut](t, a, "wait", map[string]any{"run": run.Run, "timeoutSeconds": 20})
	require.Equal(t, "ended", w.State)
	e := toolError(t, a, "send", map[string]any{"prompt": "new", "provider": "fake"})
	require.Equal(t, mcpserver.CodeOutOfScope, e.Code, "a session-scoped server starts no new session")

	list := call[mcpserver.ListOut](t, a, "runs_list", map[string]any{})
	require.Len(t, list.Runs, 2, "the granted session's runs")

	res, err := a.cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: mcpserver.SessionURI(granted.Session)})
	require.NoError(t, err)
	var sr mcpserver.SessionResource
	require.NoError(t, json.Unmarshal([]byte(res.Contents[0].Text), &sr))
	require.Len(t, sr.Runs, 2)
	require.Equal(t, "granted answer", sr.Runs[0].Answer)
	require.Equal(t, "second answer", sr.Runs[1].Answer)

	_, err = a.cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "belay://runs/nope"})
	require.Error(t, err)
}

// TestWakeSettledOnceWhenTheDaemonIsAway: the daemon stops answering
// between the notification and its settlement, long enough for the lease
// to expire; when it answers again the wake-up is settled without being
// sent a second time.
func TestWakeSettledOnceWhenTheDaemonIsAway(t *testing.T) {
	t.Parallel()
	dir, c := startDaemon(t)
	// A proxy in front of the daemon that can drop settlements, as a
	// daemon that went away would.
	var blocked atomic.Bool
	var dropped atomic.Int32
	sock := filepath.Join(dir, daemon.SocketName)
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) { r.Out.URL.Scheme, r.Out.URL.Host = "http", "belay" },
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if blocked.Load() && strings.HasSuffix(r.URL.Path, "/settle") {
			dropped.Add(1)
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	ms, err := mcpserver.New(mcpserver.Options{Client: client.New(client.Options{BaseURL: srv.URL}), Version: "test", WakeTTL: time.Second})
	require.NoError(t, err)
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := ms.MCP().Connect(ctx, st, nil)
	require.NoError(t, err)
	ms.Start(ctx)
	a, mc := newAgent()
	cs, err := mc.Connect(ctx, ct, nil)
	require.NoError(t, err)
	a.cs = cs
	t.Cleanup(func() {
		_ = cs.Close()
		_ = ss.Wait()
		ms.Stop()
	})

	blocked.Store(true)
	run := call[mcpserver.RunInfo](t, a, "send", map[string]any{"prompt": "p", "provider": "fake", "script": fakeScript()})
	require.NoError(t, a.cs.Subscribe(ctx, &mcp.SubscribeParams{URI: run.URI}))
	select {
	case <-a.got:
	case <-time.After(30 * time.Second):
		t.Fatal("no wake-up")
	}
	// Keep the daemon "away" until the wake-up's lease has expired.
	require.Eventually(t, func() bool {
		for _, d := range wakesOf(t, c, run.Session) {
			if dropped.Load() > 0 && (d.Status == belay.DeliveryPending || d.Lease.Expired(time.Now())) {
				return true
			}
		}
		return false
	}, 30*time.Second, 10*time.Millisecond)
	blocked.Store(false)

	require.Eventually(t, func() bool {
		ws := wakesOf(t, c, run.Session)
		return len(ws) == 1 && ws[0].Status == belay.DeliveryDone
	}, 30*time.Second, 10*time.Millisecond)
	ws := wakesOf(t, c, run.Session)
	require.GreaterOrEqual(t, ws[0].Attempts, 2, "the item came back after its lease expired")
	require.Contains(t, ws[0].Result, "notified test-agent/")
	require.Equal(t, 1, a.count(run.URI), "settled without a second send")
}

func wakesOf(t *testing.T, c *client.Client, session string) []belay.Delivery {
	t.Helper()
	ds, err := c.Inbox(context.Background(), session, "")
	require.NoError(t, err)
	var out []belay.Delivery
	for _, d := range ds {
		if d.Type == mcpserver.WakeType {
			out = append(out, d)
		}
	}
	return out
}

// TestInboxRoundTrip: an agent posts an item with an object payload, polls
// it back with the run's end notice (whose data is an object too) and acks
// both, through a real MCP client that checks every tool's schemas; the
// payload reaches the daemon byte for byte.
func TestInboxRoundTrip(t *testing.T) {
	t.Parallel()
	_, c := startDaemon(t)
	a := connectInMemory(t, c, mcpserver.Scope{})
	ctx := context.Background()

	sent := call[mcpserver.RunInfo](t, a, "send", map[string]any{"prompt": "hi", "provider": "fake"})
	require.Eventually(t, func() bool {
		w := call[mcpserver.WaitOut](t, a, "wait", map[string]any{"run": sent.Run, "timeoutSeconds": 30})
		return w.State == "ended"
	}, time.Minute, 10*time.Millisecond)

	payload := json.RawMessage(`{"n":12345678901234567890,"list":[1,"two",null],"nested":{"ok":true}}`)
	posted := call[belay.Delivery](t, a, "inbox_post", map[string]any{"session": sent.Session, "type": "review.request", "key": "k1", "data": payload})
	require.Equal(t, "review.request", posted.Type)
	ds, err := c.Inbox(ctx, sent.Session, "")
	require.NoError(t, err)
	var stored json.RawMessage
	for _, d := range ds {
		if d.ID == posted.ID {
			stored = d.Data
		}
	}
	require.JSONEq(t, string(payload), string(stored), "the payload is stored as sent")
	require.Contains(t, string(stored), "12345678901234567890", "no number is rounded on the way")

	got := call[mcpserver.DeliveriesOut](t, a, "inbox_poll", map[string]any{"session": sent.Session, "max": 10})
	types := map[string]belay.Delivery{}
	for _, d := range got.Deliveries {
		types[d.Type] = d
	}
	require.Contains(t, types, "review.request")
	require.Contains(t, types, belay.DeliveryRunCompleted, "the run's end notice, whose data is an object")
	require.Contains(t, string(types[belay.DeliveryRunCompleted].Data), sent.Run)
	for _, d := range got.Deliveries {
		acked := call[belay.Delivery](t, a, "inbox_ack", map[string]any{"session": sent.Session, "delivery": d.ID, "epoch": d.Epoch})
		require.Equal(t, belay.DeliveryDone, acked.Status, d.Type)
	}
}

// TestHugeSeconds: a number of seconds past what a duration holds is a
// wait as long as waits go (wait, inbox_poll) or a refused argument (a
// lease's TTL, an ack's delay), never a duration wrapped round to a
// negative one.
func TestHugeSeconds(t *testing.T) {
	t.Parallel()
	_, c := startDaemon(t)
	a := connectInMemory(t, c, mcpserver.Scope{})
	sent := call[mcpserver.RunInfo](t, a, "send", map[string]any{"prompt": "hi", "provider": "fake"})
	w := call[mcpserver.WaitOut](t, a, "wait", map[string]any{"run": sent.Run, "timeoutSeconds": 1e308})
	require.Equal(t, "ended", w.State, "waits at most MaxWait, for a run that ends in milliseconds")

	got := call[mcpserver.DeliveriesOut](t, a, "inbox_poll", map[string]any{"session": sent.Session, "waitSeconds": 1e308})
	require.Len(t, got.Deliveries, 1, "the run's end notice, at once")
	d := got.Deliveries[0]
	e := toolError(t, a, "inbox_ack", map[string]any{"session": sent.Session, "delivery": d.ID, "epoch": d.Epoch, "kind": "retry", "delaySeconds": 1e308})
	require.Equal(t, apitype.CodeInvalid, e.Code)
	require.Contains(t, e.Message, "delaySeconds must be a number of seconds from 0 to")
	e = toolError(t, a, "inbox_poll", map[string]any{"session": sent.Session, "ttlSeconds": 1e308})
	require.Equal(t, apitype.CodeInvalid, e.Code)
	require.Contains(t, e.Message, "ttlSeconds must be a number of seconds from 0 to")
}

// TestHTTPScopesAreBounded: the server (and wake loop) of a scope whose
// MCP sessions all ended is stopped once it has been idle for IdleScope,
// when another scope's server is made; one with a session is kept. After
// Close, a request of a session that was open is refused.
func TestHTTPScopesAreBounded(t *testing.T) {
	t.Parallel()
	_, c := startDaemon(t)
	h := mcpserver.NewHTTP(c, "test", nil)
	t.Cleanup(h.Close)
	var mu sync.Mutex
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	h.SetNow(func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	do := func(method, query, body, session string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, "http://belay/mcp?"+query, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	open := func(query string) string {
		w := do("POST", query, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`, "")
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
		id := w.Header().Get("Mcp-Session-Id")
		require.NotEmpty(t, id)
		return id
	}
	end := func(query, id string) {
		require.Equal(t, http.StatusNoContent, do("DELETE", query, "", id).Code)
	}
	for i := range 5 {
		q := fmt.Sprintf("tag=t%d", i)
		end(q, open(q))
	}
	require.Equal(t, 5, h.Scopes())
	live := open("tag=live")
	advance(mcpserver.IdleScope)
	end("tag=t5", open("tag=t5"))
	require.Equal(t, 2, h.Scopes(), "the five idle scopes stopped; the live one and t5 kept")
	advance(mcpserver.IdleScope - time.Second)
	open("tag=t6")
	require.Equal(t, 3, h.Scopes(), "t5 is not idle for IdleScope yet")

	h.Close()
	require.Equal(t, http.StatusServiceUnavailable, do("POST", "tag=live", `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, live).Code)
	require.Equal(t, 0, h.Scopes())
}
