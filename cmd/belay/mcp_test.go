package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/client"
	"github.com/belayhq/belay/internal/app/mcpserver"
)

// belayBin returns the test binary under the name belay.
func belayBin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "belay")
	require.NoError(t, os.Symlink(os.Args[0], bin))
	return bin
}

// mcpAgent is a Go SDK client of a `belay mcp` child process.
type mcpAgent struct {
	cs  *mcp.ClientSession
	cmd *exec.Cmd

	mu      sync.Mutex
	updates []string
	got     chan string
}

func startMCPAgent(t *testing.T, bin, dir string) *mcpAgent {
	t.Helper()
	a := &mcpAgent{got: make(chan string, 16)}
	c := mcp.NewClient(&mcp.Implementation{Name: "crash-agent", Version: "1"}, &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			a.mu.Lock()
			a.updates = append(a.updates, req.Params.URI)
			a.mu.Unlock()
			a.got <- req.Params.URI
		},
	})
	a.cmd = exec.Command(bin, "mcp", "--data", dir, "--verbose")
	a.cmd.Env = append(os.Environ(), "BELAY_NO_AUTOSTART=1")
	logf, err := os.OpenFile(filepath.Join(dir, "mcp.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	require.NoError(t, err)
	t.Cleanup(func() { logf.Close() })
	a.cmd.Stderr = logf
	cs, err := c.Connect(context.Background(), &mcp.CommandTransport{Command: a.cmd}, nil)
	require.NoError(t, err)
	a.cs = cs
	return a
}

func (a *mcpAgent) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.updates)
}

func (a *mcpAgent) call(t *testing.T, name string, args map[string]any, out any) {
	t.Helper()
	res, err := a.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	require.NoError(t, err)
	require.False(t, res.IsError, "%s: %+v", name, res.Content)
	b, err := json.Marshal(res.StructuredContent)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, out))
}

func (a *mcpAgent) answer(t *testing.T, uri string) mcpserver.RunResource {
	t.Helper()
	res, err := a.cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: uri})
	require.NoError(t, err)
	var rr mcpserver.RunResource
	require.NoError(t, json.Unmarshal([]byte(res.Contents[0].Text), &rr))
	return rr
}

func waitUpdate(t *testing.T, a *mcpAgent, uri string, within time.Duration) {
	t.Helper()
	select {
	case got := <-a.got:
		require.Equal(t, uri, got)
	case <-time.After(within):
		t.Fatalf("no notifications/resources/updated for %s within %s", uri, within)
	}
}

// wakes returns the wake-up items of a session.
func wakes(t *testing.T, c *client.Client, session string) []belay.Delivery {
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

// untilStreaming waits until a run has streamed some text.
func untilStreaming(t *testing.T, c *client.Client, run string) {
	t.Helper()
	require.Eventually(t, func() bool {
		r, err := c.Run(context.Background(), run)
		require.NoError(t, err)
		require.False(t, r.Status.Terminal(), "the run ended before the crash: %s", r.Status)
		return r.Phase == belay.PhaseStreaming
	}, 20*time.Second, 20*time.Millisecond, "the run did not start streaming")
}

const crashReply = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen"

// TestMCPWakeAcrossDaemonCrash: an agent sends a long run through `belay
// mcp`, subscribes, and the daemon is SIGKILLed while the run streams and
// started again; the agent still gets its wake-up once and reads the
// whole answer.
func TestMCPWakeAcrossDaemonCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test")
	}
	t.Parallel()
	bin, dir := belayBin(t), t.TempDir()
	daemon := startServe(t, bin, dir)
	defer func() { _ = daemon.Process.Kill(); _ = daemon.Wait() }()
	c := client.New(client.Options{Socket: filepath.Join(dir, "belay.sock")})
	a := startMCPAgent(t, bin, dir)
	defer a.cs.Close()

	var run mcpserver.RunInfo
	a.call(t, "send", map[string]any{"prompt": "a long job", "provider": "fake", "idempotencyKey": "job-1",
		"script": map[string]any{"reply": crashReply, "tokens": 16, "rate": 4}}, &run)
	require.NoError(t, a.cs.Subscribe(context.Background(), &mcp.SubscribeParams{URI: run.URI}))
	// The subscription is recorded in the daemon before the crash (under
	// protocol 2026-07-28 the SDK client does not wait for it).
	require.Eventually(t, func() bool { return len(wakes(t, c, run.Session)) == 1 }, 20*time.Second, 10*time.Millisecond)
	untilStreaming(t, c, run.Run)

	require.NoError(t, daemon.Process.Signal(syscall.SIGKILL))
	_ = daemon.Wait()
	daemon = startServe(t, bin, dir)

	waitUpdate(t, a, run.URI, 60*time.Second)
	rr := a.answer(t, run.URI)
	require.Equal(t, "complete", rr.Run.Status)
	require.Equal(t, crashReply, rr.Answer, "the whole answer, once")

	// The wake-up is settled once in the daemon; no second one follows.
	require.Eventually(t, func() bool {
		ws := wakes(t, c, run.Session)
		require.Len(t, ws, 1)
		return ws[0].Status == belay.DeliveryDone
	}, 10*time.Second, 20*time.Millisecond, "the wake-up was not settled")
	require.Contains(t, wakes(t, c, run.Session)[0].Result, "notified crash-agent")
	require.Equal(t, 1, a.count())

	// belay runs show says who was woken and when.
	out, err := exec.Command(bin, "runs", "show", "--data", dir, "--json", run.Run).Output()
	require.NoError(t, err)
	var shown struct {
		Wakeups []struct {
			To        string
			Status    belay.DeliveryStatus
			Result    string
			SettledAt time.Time
		}
	}
	require.NoError(t, json.Unmarshal(out, &shown), "%s", out)
	require.Len(t, shown.Wakeups, 1)
	require.True(t, strings.HasPrefix(shown.Wakeups[0].To, "mcp:tag:mcp@"), shown.Wakeups[0].To)
	require.Equal(t, belay.DeliveryDone, shown.Wakeups[0].Status)
	require.Contains(t, shown.Wakeups[0].Result, "notified crash-agent")
	require.False(t, shown.Wakeups[0].SettledAt.IsZero())
}

// TestMCPWakeAcrossServerRestart: the MCP server process dies after the
// agent subscribed; a new one, subscribed to again, sends the wake-up once.
func TestMCPWakeAcrossServerRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test")
	}
	t.Parallel()
	bin, dir := belayBin(t), t.TempDir()
	daemon := startServe(t, bin, dir)
	defer func() { _ = daemon.Process.Kill(); _ = daemon.Wait() }()
	c := client.New(client.Options{Socket: filepath.Join(dir, "belay.sock")})

	a := startMCPAgent(t, bin, dir)
	var run mcpserver.RunInfo
	a.call(t, "send", map[string]any{"prompt": "p", "provider": "fake",
		"script": map[string]any{"reply": crashReply, "tokens": 16, "rate": 4}}, &run)
	require.NoError(t, a.cs.Subscribe(context.Background(), &mcp.SubscribeParams{URI: run.URI}))
	// The subscription is recorded in the daemon (under protocol 2026-07-28
	// the SDK client does not wait for the server to take it).
	require.Eventually(t, func() bool { return len(wakes(t, c, run.Session)) == 1 }, 20*time.Second, 10*time.Millisecond)
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGKILL))
	_ = a.cs.Close()

	b := startMCPAgent(t, bin, dir)
	defer b.cs.Close()
	require.NoError(t, b.cs.Subscribe(context.Background(), &mcp.SubscribeParams{URI: run.URI}))
	waitUpdate(t, b, run.URI, 60*time.Second)
	require.Equal(t, crashReply, b.answer(t, run.URI).Answer)
	ws := wakes(t, c, run.Session)
	require.Len(t, ws, 1, "subscribing again made no second wake-up")
	require.Equal(t, 0, a.count(), "the dead server sent nothing")
}

// TestMCPTypeScriptInterop runs the TypeScript SDK's client against `belay
// mcp` over stdio and against the daemon's /mcp over TCP with the token.
func TestMCPTypeScriptInterop(t *testing.T) {
	if testing.Short() {
		t.Skip("needs node and npm")
	}
	t.Parallel()
	modules := tsSDK(t)
	bin, dir := belayBin(t), t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	daemon := exec.Command(bin, "serve", "--data", dir, "--listen", "tcp:"+addr)
	require.NoError(t, daemon.Start())
	defer func() { _ = daemon.Process.Signal(syscall.SIGTERM); _ = daemon.Wait() }()
	c := client.New(client.Options{Socket: filepath.Join(dir, "belay.sock")})
	require.Eventually(t, func() bool { _, err := c.Health(context.Background()); return err == nil }, 20*time.Second, 20*time.Millisecond)
	token, err := os.ReadFile(filepath.Join(dir, "token"))
	require.NoError(t, err)

	script, err := filepath.Abs("testdata/mcp/interop.mjs")
	require.NoError(t, err)
	work := filepath.Dir(filepath.Dir(modules)) // the directory holding node_modules
	mjs := filepath.Join(work, "interop.mjs")
	raw, err := os.ReadFile(script)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(mjs, raw, 0o600))

	for _, mode := range []string{"stdio", "http"} {
		t.Run(mode, func(t *testing.T) {
			reply := "Answer over " + mode + ": durable ✓"
			cmd := exec.Command("node", mjs)
			cmd.Dir = work
			cmd.Env = append(os.Environ(), "MODE="+mode, "BELAY_BIN="+bin, "BELAY_DATA="+dir, "REPLY="+reply,
				"MCP_URL=http://"+addr+"/mcp?tag=interop", "MCP_TOKEN="+strings.TrimSpace(string(token)))
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			require.NoError(t, err, "node: %s", stderr.String())
			var got struct {
				Tools      []string
				Run, URI   string
				Updates    []string
				Status     string
				Answer     string
				BadIsError bool
				BadText    string
			}
			require.NoError(t, json.Unmarshal(out, &got), "%s", out)
			require.Subset(t, got.Tools, []string{"send", "status", "read", "wait", "cancel", "doctor", "runs_list", "inbox_post", "inbox_poll", "inbox_ack", "retry"})
			require.Equal(t, "belay://runs/"+got.Run, got.URI)
			require.Equal(t, []string{got.URI}, got.Updates)
			require.Equal(t, "complete", got.Status)
			require.Equal(t, reply, got.Answer)
			require.True(t, got.BadIsError, "a bad argument is a tool error, not a protocol error")
			require.Contains(t, got.BadText, `"code":"invalid_argument"`)
			r, err := c.Run(context.Background(), got.Run)
			require.NoError(t, err)
			require.Contains(t, r.Tags, "interop")
		})
	}
}

// tsSDK returns the node_modules/@modelcontextprotocol/sdk directory of
// the TypeScript SDK, installed with npm into a temporary directory (or
// found under $BELAY_TEST_NODE_PATH). Without node or npm it skips, loudly.
func tsSDK(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("BELAY_TEST_NODE_PATH"); dir != "" {
		sdk := filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk")
		if _, err := os.Stat(sdk); err == nil {
			return sdk
		}
	}
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("SKIPPED LOUDLY: %s is not installed, so the TypeScript SDK interop test cannot run", tool)
		}
	}
	work := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(work, "package.json"), []byte(`{"name":"belay-mcp-interop","private":true,"type":"module"}`), 0o600))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "install", "--no-audit", "--no-fund", "--loglevel=error", "@modelcontextprotocol/sdk@1")
	cmd.Dir = work
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Skipf("SKIPPED LOUDLY: npm could not install @modelcontextprotocol/sdk: %v\n%s", err, lastLines(string(out), 10))
	}
	return filepath.Join(work, "node_modules", "@modelcontextprotocol", "sdk")
}

func lastLines(s string, n int) string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}
