package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/provider"
	"github.com/belayhq/belay/provider/fake"
	"github.com/belayhq/belay/runtime"
	"github.com/belayhq/belay/store/fsstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type bundle struct {
	t   *testing.T
	srv *httptest.Server
	rt  *runtime.Runtime
}

func setup(t *testing.T, token string) *bundle { return setupWith(t, token, true) }

// setupIdle serves a runtime that is not started: it claims nothing, so a
// test can write runs into its store by hand.
func setupIdle(t *testing.T) *bundle { return setupWith(t, "", false) }

func setupWith(t *testing.T, token string, start bool) *bundle {
	t.Helper()
	st, err := fsstore.Open(context.Background(), t.TempDir(), fsstore.Options{})
	require.NoError(t, err)
	rt, err := runtime.New(runtime.Options{Store: st, Providers: provider.Registry{"fake": fake.New(fake.Options{Resume: true})}, PruneEvery: -1})
	require.NoError(t, err)
	if start {
		require.NoError(t, rt.Start(context.Background()))
	}
	s := NewServer(Options{Runtime: rt, Version: "test", Keepalive: 50 * time.Millisecond, Metrics: NewMetrics(rt)})
	srv := httptest.NewServer(s.Handler(token))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, rt.Stop(ctx))
		require.NoError(t, st.Close())
	})
	return &bundle{t: t, srv: srv, rt: rt}
}

func (b *bundle) do(method, path, body string, hdr map[string]string) (int, []byte) {
	b.t.Helper()
	req, err := http.NewRequest(method, b.srv.URL+path, strings.NewReader(body))
	require.NoError(b.t, err)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := b.srv.Client().Do(req)
	require.NoError(b.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(b.t, err)
	return resp.StatusCode, raw
}

func errCode(t *testing.T, raw []byte) string {
	t.Helper()
	var e apitype.Error
	require.NoError(t, json.Unmarshal(raw, &e), "%s", raw)
	require.NotEmpty(t, e.Error.Message)
	return e.Error.Code
}

func TestRunLifecycleOverHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	code, raw := b.do("POST", "/v1/runs", `{"provider":"fake","prompt":"hi there"}`, map[string]string{"Idempotency-Key": "k1"})
	require.Equal(t, http.StatusCreated, code, "%s", raw)
	var run apitype.Run
	require.NoError(t, json.Unmarshal(raw, &run))
	code, raw = b.do("POST", "/v1/runs", `{"provider":"fake","prompt":"hi there"}`, map[string]string{"Idempotency-Key": "k1"})
	require.Equal(t, http.StatusCreated, code)
	var again apitype.Run
	require.NoError(t, json.Unmarshal(raw, &again))
	require.Equal(t, run.ID, again.ID, "the same Idempotency-Key returns the same run")

	code, raw = b.do("GET", "/v1/runs/"+run.ID+"/wait?timeout=10s", "", nil)
	require.Equal(t, http.StatusOK, code)
	require.NoError(t, json.Unmarshal(raw, &run))
	require.Equal(t, belay.RunComplete, run.Status)

	code, raw = b.do("GET", "/v1/sessions/"+run.Session+"/events?after=0", "", nil)
	require.Equal(t, http.StatusOK, code)
	var page apitype.EventList
	require.NoError(t, json.Unmarshal(raw, &page))
	require.Equal(t, uint64(1), page.Events[0].Seq)
	require.Equal(t, page.LastSeq, page.Events[len(page.Events)-1].Seq)
	code, raw = b.do("GET", "/v1/sessions/"+run.Session+"/events?after=3&limit=2", "", nil)
	require.Equal(t, http.StatusOK, code)
	require.NoError(t, json.Unmarshal(raw, &page))
	require.Len(t, page.Events, 2)
	require.Equal(t, uint64(4), page.Events[0].Seq)

	code, raw = b.do("GET", "/v1/sessions/"+run.Session+"/doctor", "", nil)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, string(raw), `"nextAction":"read_result"`, "belay's own completion notice is not the next action")
	code, raw = b.do("GET", "/metrics", "", nil)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, string(raw), `belay_runs{status="complete"} 1`)
	require.Contains(t, string(raw), "belay_journal_fsync_seconds")
	require.Contains(t, string(raw), "belay_queue_depth 0")
}

func TestSSEResumesWithLastEventID(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	code, raw := b.do("POST", "/v1/runs", `{"provider":"fake","prompt":"one two three","script":{"tokens":6,"rate":100}}`, nil)
	require.Equal(t, http.StatusCreated, code, "%s", raw)
	var run apitype.Run
	require.NoError(t, json.Unmarshal(raw, &run))
	read := func(lastID string, n int) []string {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", b.srv.URL+"/v1/sessions/"+run.Session+"/events", nil)
		req.Header.Set("Accept", "text/event-stream")
		if lastID != "" {
			req.Header.Set("Last-Event-ID", lastID)
		}
		resp, err := b.srv.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
		var ids []string
		buf := make([]byte, 0, 64<<10)
		chunk := make([]byte, 4096)
		for len(ids) < n {
			k, err := resp.Body.Read(chunk)
			buf = append(buf, chunk[:k]...)
			ids = ids[:0]
			for _, line := range strings.Split(string(buf), "\n") {
				if id, ok := strings.CutPrefix(line, "id: "); ok {
					ids = append(ids, id)
				}
			}
			if err != nil {
				break
			}
		}
		return ids
	}
	first := read("", 3)
	require.Equal(t, []string{"1", "2", "3"}, first[:3], "ids are seqs, in order")
	resumed := read("2", 2)
	require.Equal(t, []string{"3", "4"}, resumed[:2], "Last-Event-ID resumes after it")
	// A keepalive comment arrives when nothing happens.
	_, err := b.rt.Wait(context.Background(), run.ID)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", b.srv.URL+"/v1/sessions/"+run.Session+"/events", nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Last-Event-ID", "1000000")
	resp, err := b.srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	got := make([]byte, 0, 256)
	chunk := make([]byte, 256)
	for !bytes.Contains(got, []byte(": keepalive")) {
		k, err := resp.Body.Read(chunk)
		require.NoError(t, err)
		got = append(got, chunk[:k]...)
	}
}

func TestErrorsAndHardening(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	cases := []struct {
		method, path, body string
		status             int
		code               string
	}{
		{"GET", "/v1/sessions/ses_..%2F..%2Fetc", "", 400, apitype.CodeInvalid},
		{"GET", "/v1/sessions/..%2F..%2Fetc%2Fpasswd/events", "", 400, apitype.CodeInvalid},
		{"GET", "/v1/runs/run_01jfz0000000000000000000aa", "", 404, apitype.CodeNotFound},
		{"POST", "/v1/runs", `{"provider":"fake",`, 400, apitype.CodeInvalid},
		{"POST", "/v1/runs", `{"provider":"fake","bogus":1}`, 400, apitype.CodeInvalid},
		{"POST", "/v1/runs", ``, 400, apitype.CodeInvalid},
		{"POST", "/v1/runs", `{"prompt":"no provider"}`, 400, apitype.CodeInvalid},
		{"POST", "/v1/runs", `{"provider":"nope","prompt":"x"}`, 400, apitype.CodeInvalid},
		{"POST", "/v1/runs", `{"provider":"fake","policy":"often"}`, 400, apitype.CodeInvalid},
		{"POST", "/v1/runs", `{"provider":"fake"} {}`, 400, apitype.CodeInvalid},
		{"POST", "/v1/sessions", `{"provider":"fake","prompt":"` + strings.Repeat("x", MaxBody) + `"}`, 413, apitype.CodeTooLarge},
		// A browser option for a provider that would ignore it.
		{"POST", "/v1/sessions", `{"provider":"fake","options":{"site":"chatgpt"}}`, 400, apitype.CodeInvalid},
		{"POST", "/v1/runs", `{"provider":"fake","prompt":"x","options":{"site_url":"https://chatgpt.com/"}}`, 400, apitype.CodeInvalid},
		{"POST", "/v1/inbox/dlv_01jfz0000000000000000000aa/settle", `{"kind":"done","epoch":1}`, 404, apitype.CodeNotFound},
		{"POST", "/v1/inbox/lease", `{"owner":""}`, 400, apitype.CodeInvalid},
		{"GET", "/v1/sessions?limit=-1", "", 400, apitype.CodeInvalid},
		{"GET", "/v1/nothing", "", 404, apitype.CodeNotFound},
		{"DELETE", "/v1/sessions", "", 405, apitype.CodeMethod},
	}
	for _, tc := range cases {
		code, raw := b.do(tc.method, tc.path, tc.body, nil)
		require.Equal(t, tc.status, code, "%s %s: %s", tc.method, tc.path, raw)
		if tc.code != "" {
			require.Equal(t, tc.code, errCode(t, raw), "%s %s", tc.method, tc.path)
		}
		var e apitype.Error
		require.NoError(t, json.Unmarshal(raw, &e), "%s %s", tc.method, tc.path)
		require.NotEmpty(t, e.Error.Message, "%s %s", tc.method, tc.path)
		require.NotContains(t, e.Error.Message, "belay: ", "%s %s: the message is the error's, without the Go package's prefix", tc.method, tc.path)
	}
}

func TestBearerTokenOnTCP(t *testing.T) {
	t.Parallel()
	b := setup(t, "s3cret-token-0123456789abcdef0123456789")
	code, raw := b.do("GET", "/v1/sessions", "", nil)
	require.Equal(t, http.StatusUnauthorized, code)
	require.Equal(t, apitype.CodeUnauthenticated, errCode(t, raw))
	code, _ = b.do("GET", "/v1/sessions", "", map[string]string{"Authorization": "Bearer wrong"})
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = b.do("GET", "/v1/sessions", "", map[string]string{"Authorization": "Bearer s3cret-token-0123456789abcdef0123456789x"})
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = b.do("GET", "/v1/sessions", "", map[string]string{"Authorization": "Bearer s3cret-token-0123456789abcdef0123456789"})
	require.Equal(t, http.StatusOK, code)
	code, raw = b.do("GET", "/healthz", "", nil)
	require.Equal(t, http.StatusOK, code, "health needs no token")
	require.NotContains(t, string(raw), "incarnation", "but says nothing else without it")
	code, raw = b.do("GET", "/healthz", "", map[string]string{"Authorization": "Bearer s3cret-token-0123456789abcdef0123456789"})
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, string(raw), `"incarnation":"inc_`)
}

func FuzzHandlers(f *testing.F) {
	f.Add("POST", "/v1/runs", `{"provider":"fake","prompt":"x"}`, "")
	f.Add("GET", "/v1/sessions/ses_01jfz0000000000000000000aa/events?after=1&wait=1ms", "", "")
	f.Add("POST", "/v1/inbox/lease", `{"owner":"a","ttl":"1s","wait":0.001}`, "")
	f.Add("POST", "/v1/sessions/ses_01jfz0000000000000000000aa/inbox", `{"type":"t","data":[1]}`, "k")
	f.Add("GET", "/v1/sessions/ses_x/events", "", "")
	st, err := fsstore.Open(context.Background(), f.TempDir(), fsstore.Options{})
	if err != nil {
		f.Fatal(err)
	}
	rt, _ := runtime.New(runtime.Options{Store: st, Providers: provider.Registry{"fake": fake.New(fake.Options{})}, PruneEvery: -1})
	_ = rt.Start(context.Background())
	h := NewServer(Options{Runtime: rt}).Handler("")
	f.Cleanup(func() { _ = rt.Stop(context.Background()); _ = st.Close() })
	f.Fuzz(func(t *testing.T, method, target, body, key string) {
		if !strings.HasPrefix(target, "/") {
			target = "/" + target
		}
		req, err := http.NewRequest(method, "http://belay"+target, strings.NewReader(body))
		if err != nil {
			return
		}
		req.Header.Set("Idempotency-Key", key)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		req = req.WithContext(ctx)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code >= 400 {
			var e apitype.Error
			if json.Unmarshal(w.Body.Bytes(), &e) != nil || e.Error.Code == "" {
				t.Fatalf("%s %s: %d without an error body: %q", method, target, w.Code, w.Body.String())
			}
		}
		if w.Code == 500 {
			t.Fatalf("%s %s: internal error: %s", method, target, w.Body.String())
		}
	})
}
