package daemon

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/client"
	"github.com/belayhq/belay/provider/openai/openaitest"
	"github.com/belayhq/belay/store"
	"github.com/belayhq/belay/store/fsstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startDaemon runs the daemon in-process until the test ends.
func startDaemon(t *testing.T, dir, listen string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{DataDir: dir, Listen: listen, Version: "test", Ready: func() { close(ready) }, Logger: slog.New(slog.DiscardHandler)})
	}()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("daemon: %v", err)
	case <-time.After(20 * time.Second):
		cancel()
		t.Fatal("daemon did not start")
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			require.NoError(t, <-done)
		})
	}
	t.Cleanup(stop)
	return stop
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	require.NoError(t, err)
	return fi.Mode().Perm()
}

func TestPermissionsAndTCPToken(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	startDaemon(t, dir, "tcp:"+addr)

	require.Equal(t, os.FileMode(0o700), mode(t, dir), "the data directory is private")
	require.Equal(t, os.FileMode(0o600), mode(t, filepath.Join(dir, SocketName)), "the socket is the owner's")
	require.Equal(t, os.FileMode(0o600), mode(t, filepath.Join(dir, TokenName)))

	raw, err := os.ReadFile(filepath.Join(dir, TokenName))
	require.NoError(t, err)
	token := strings.TrimSpace(string(raw))
	require.Len(t, token, 64)

	ctx := context.Background()
	for _, tc := range []struct {
		token string
		ok    bool
	}{{"", false}, {"wrong", false}, {token + "0", false}, {token[:63], false}, {token, true}} {
		_, err := client.New(client.Options{BaseURL: "http://" + addr, Token: tc.token}).Sessions(ctx, belay.SessionFilter{})
		if tc.ok {
			require.NoError(t, err)
		} else {
			var ce *client.Error
			require.ErrorAs(t, err, &ce, "token %q", tc.token)
			require.Equal(t, http.StatusUnauthorized, ce.Status)
		}
	}
	// The socket needs no token: its permissions are the protection.
	_, err = client.New(client.Options{Socket: filepath.Join(dir, SocketName)}).Sessions(ctx, belay.SessionFilter{})
	require.NoError(t, err)
}

func TestListenErrorsStartNothing(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	for _, listen := range []string{"tcp:", "udp:1.2.3.4:5", "tcp:" + busy.Addr().String()} {
		dir := t.TempDir()
		err := Run(context.Background(), Options{DataDir: dir, Listen: listen, Logger: slog.New(slog.DiscardHandler)})
		require.Error(t, err, listen)
		_, serr := os.Stat(filepath.Join(dir, SocketName))
		require.True(t, os.IsNotExist(serr), "%s: no socket is left behind", listen)
		_, lerr := os.Stat(filepath.Join(dir, fsstore.LockName))
		require.True(t, os.IsNotExist(lerr), "%s: the lock is released", listen)
	}
}

func TestSecondDaemonNamesTheHolder(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	startDaemon(t, dir, "")
	err := Run(context.Background(), Options{DataDir: dir, Logger: slog.New(slog.DiscardHandler)})
	require.ErrorIs(t, err, belay.ErrStoreLocked)
	require.Contains(t, err.Error(), "another belay daemon owns")
	require.Contains(t, err.Error(), "pid")
}

func TestBadConfigIsRefused(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]string{
		"unknown key":      "[limits]\nglobl = 3\n",
		"unknown provider": "[providers.x]\ntype = \"nope\"\n",
		"bad duration":     "[watchdog]\nstreaming = \"soon\"\n",
		"provider key":     "[providers.f]\ntype = \"fake\"\nresum = true\n",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(dir, ConfigName), []byte(cfg), 0o600))
			err := Run(context.Background(), Options{DataDir: dir, Logger: slog.New(slog.DiscardHandler)})
			require.Error(t, err)
			require.Contains(t, err.Error(), "config")
		})
	}
}

// hookServer records webhook calls; it fails the first fail calls.
type hookServer struct {
	mu    sync.Mutex
	key   []byte
	fail  int
	calls []http.Header
	ids   map[string]int
	t     *testing.T
}

func (h *hookServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	defer h.mu.Unlock()
	id := r.Header.Get("webhook-id")
	var sec int64
	_, _ = fmtSscan(r.Header.Get("webhook-timestamp"), &sec)
	want := Sign(h.key, id, time.Unix(sec, 0), body)
	if r.Header.Get("webhook-signature") != want {
		h.t.Errorf("bad signature %q, want %q", r.Header.Get("webhook-signature"), want)
	}
	h.calls = append(h.calls, r.Header.Clone())
	if h.fail > 0 {
		h.fail--
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	h.ids[id]++
	w.WriteHeader(http.StatusNoContent)
}

func (h *hookServer) delivered() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]int{}
	for k, v := range h.ids {
		out[k] = v
	}
	return out
}

func TestWebhooksAndHooksAcrossRestart(t *testing.T) {
	t.Parallel()
	key := []byte("0123456789abcdef0123456789abcdef")
	hs := &hookServer{key: key, fail: 2, ids: map[string]int{}, t: t}
	srv := httptest.NewServer(hs)
	defer srv.Close()
	dir := t.TempDir()
	hookOut := filepath.Join(t.TempDir(), "hook.jsonl")
	cfg := "[[webhooks]]\nurl = \"" + srv.URL + "\"\nsecret = \"whsec_" + base64.StdEncoding.EncodeToString(key) + "\"\ntypes = [\"run.completed\"]\n" +
		"[[hooks]]\ncommand = [\"sh\", \"-c\", \"cat >> " + hookOut + "; echo >> " + hookOut + "\"]\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, ConfigName), []byte(cfg), 0o600))

	stop := startDaemon(t, dir, "")
	c := client.New(client.Options{Socket: filepath.Join(dir, SocketName)})
	ctx := context.Background()
	run, err := c.CreateRun(ctx, apiRunRequest("hello"), "")
	require.NoError(t, err)
	_, err = c.WaitRun(ctx, run.ID, 20*time.Second)
	require.NoError(t, err)
	waitFor(t, func() bool { return len(hs.delivered()) == 1 })
	stop()

	// After a restart nothing settled is sent again; new deliveries are.
	stop = startDaemon(t, dir, "")
	run2, err := c.CreateRun(ctx, apiRunRequest("again"), "")
	require.NoError(t, err)
	_, err = c.WaitRun(ctx, run2.ID, 20*time.Second)
	require.NoError(t, err)
	waitFor(t, func() bool { return len(hs.delivered()) == 2 })
	waitFor(t, func() bool {
		raw, _ := os.ReadFile(hookOut)
		return strings.Count(strings.TrimSpace(string(raw)), "\n") == 1
	})
	// Every notification is settled in the store once it was sent; a
	// settled one is never sent again, so the counts below are final.
	waitFor(t, func() bool {
		st, err := fsstore.Open(ctx, dir, fsstore.Options{ReadOnly: true})
		require.NoError(t, err)
		defer st.Close()
		return sentSettlements(t, st, run.Session) == 2 && sentSettlements(t, st, run2.Session) == 2
	})
	stop()
	for id, n := range hs.delivered() {
		require.Equal(t, 1, n, "notification %s delivered %d times", id, n)
	}
	hs.mu.Lock()
	require.Equal(t, 4, len(hs.calls), "the first two attempts failed and were retried, then each run's notification was sent once")
	hs.mu.Unlock()

	raw, err := os.ReadFile(hookOut)
	require.NoError(t, err)
	var first map[string]any
	require.NoError(t, json.Unmarshal([]byte(strings.SplitN(string(raw), "\n", 2)[0]), &first))
	require.Equal(t, "run.completed", first["type"])
}

// sentSettlements counts the notifications of a session settled as sent
// in its journal.
func sentSettlements(t *testing.T, st store.Store, session string) int {
	t.Helper()
	evs, err := st.Events(context.Background(), session, 0, 0)
	require.NoError(t, err)
	sent := 0
	for _, e := range evs {
		if e.Type == EventNotifySettled {
			var d store.NotifySettledData
			require.NoError(t, json.Unmarshal(e.Data, &d))
			if d.Outcome == store.NotifyOutcomeSent {
				sent++
			}
		}
	}
	return sent
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition never held")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestHistoryIsReplayedRepaired sends two runs in one session through the
// openai provider: the second request carries the first exchange, built
// from the journal and repaired before it is replayed.
func TestHistoryIsReplayedRepaired(t *testing.T) {
	t.Parallel()
	// Each delta takes a while, so the follow-up is queued behind the first
	// run while it streams: it must still see the first answer.
	srv := openaitest.NewServer(openaitest.Options{Reply: "The answer is 42.", Delay: 30 * time.Millisecond})
	defer srv.Close()
	dir := t.TempDir()
	cfg := "[providers.openai]\ntype = \"openai\"\nbase_url = \"" + srv.URL + "\"\nmodel = \"m\"\napi_key = \"sk-test\"\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, ConfigName), []byte(cfg), 0o600))
	startDaemon(t, dir, "")
	c := client.New(client.Options{Socket: filepath.Join(dir, SocketName)})
	ctx := context.Background()
	first, err := c.CreateRun(ctx, apitype.CreateRunRequest{Provider: "openai", Prompt: "What is the answer?"}, "")
	require.NoError(t, err)
	second, err := c.CreateRun(ctx, apitype.CreateRunRequest{Session: first.Session, Prompt: "And why?"}, "")
	require.NoError(t, err)
	require.Equal(t, belay.RunQueued, second.Status)
	third, err := c.CreateRun(ctx, apitype.CreateRunRequest{Session: first.Session, Prompt: "And then?"}, "")
	require.NoError(t, err)
	r, err := c.WaitRun(ctx, first.ID, 20*time.Second)
	require.NoError(t, err)
	require.Equal(t, belay.RunComplete, r.Status, r.Reason)
	for _, id := range []string{second.ID, third.ID} {
		r, err = c.WaitRun(ctx, id, 20*time.Second)
		require.NoError(t, err)
		require.Equal(t, belay.RunComplete, r.Status, r.Reason)
	}
	reqs := srv.Requests()
	require.Len(t, reqs, 3)
	body := string(reqs[1].Body)
	require.Contains(t, body, "What is the answer?")
	require.Contains(t, body, "The answer is 42.")
	require.Contains(t, body, "And why?")
	require.Less(t, strings.Index(body, "What is the answer?"), strings.Index(body, "And why?"))
	// The third run's history: each follow-up, queued while the first run
	// streamed, after the answer before it (where its run started).
	body = string(reqs[2].Body)
	q1, a1 := strings.Index(body, "What is the answer?"), strings.Index(body, "The answer is 42.")
	q2, q3 := strings.Index(body, "And why?"), strings.Index(body, "And then?")
	require.True(t, q1 >= 0 && q1 < a1 && a1 < q2 && q2 < q3, "history out of order:\n%s", body)
	require.Equal(t, 2, strings.Count(body, "The answer is 42."))
	require.Less(t, strings.LastIndex(body, "The answer is 42."), q3)
	require.Less(t, q2, strings.LastIndex(body, "The answer is 42."))
}

// TestProvidersThroughTheDaemon runs a real run through each configured
// provider type: anthropic against a loopback Messages API, and command
// with a local program.
func TestProvidersThroughTheDaemon(t *testing.T) {
	t.Parallel()
	anth := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/messages" || r.Header.Get("anthropic-version") == "" || r.Header.Get("x-api-key") != "sk-ant-test" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, e := range []struct{ typ, data string }{
			{"message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude-test","usage":{"input_tokens":3,"output_tokens":1}}}`},
			{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`},
			{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Bonjour "}}`},
			{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"from Claude."}}`},
			{"content_block_stop", `{"type":"content_block_stop","index":0}`},
			{"message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":4}}`},
			{"message_stop", `{"type":"message_stop"}`},
		} {
			_, _ = io.WriteString(w, "event: "+e.typ+"\ndata: "+e.data+"\n\n")
		}
	}))
	defer anth.Close()
	dir := t.TempDir()
	cfg := "[providers.claude]\ntype = \"anthropic\"\nbase_url = \"" + anth.URL + "/v1\"\nmodel = \"claude-test\"\napi_key = \"sk-ant-test\"\n" +
		"[providers.agent]\ntype = \"command\"\nargv = [\"sh\", \"-c\", \"echo Done by the agent: {prompt}\"]\nformat = \"text\"\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, ConfigName), []byte(cfg), 0o600))
	startDaemon(t, dir, "")
	c := client.New(client.Options{Socket: filepath.Join(dir, SocketName)})
	ctx := context.Background()
	for prov, want := range map[string]string{"claude": "Bonjour from Claude.", "agent": "Done by the agent: tidy up"} {
		run, err := c.CreateRun(ctx, apitype.CreateRunRequest{Provider: prov, Prompt: "tidy up"}, "")
		require.NoError(t, err)
		r, err := c.WaitRun(ctx, run.ID, 30*time.Second)
		require.NoError(t, err)
		require.Equal(t, belay.RunComplete, r.Status, "%s: %s", prov, r.Reason)
		evs, err := c.Events(ctx, run.Session, 0, 0, 0)
		require.NoError(t, err)
		var text strings.Builder
		for _, e := range evs.Events {
			if e.Type == "run.text" {
				var d struct{ Text string }
				require.NoError(t, json.Unmarshal(e.Data, &d))
				text.WriteString(d.Text)
			}
		}
		require.Equal(t, want, strings.TrimSpace(text.String()), prov)
	}
}
