package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/runtime"
)

// longRun journals a complete run whose answer is n deltas of text. The
// runtime must not be started (setupIdle): a started one would claim the
// run before the test leases it.
func longRun(t *testing.T, rt *runtime.Runtime, text string, n int) belay.Run {
	t.Helper()
	ctx := context.Background()
	st := rt.Store()
	sess, err := st.CreateSession(ctx, belay.SessionInput{Provider: "fake"})
	require.NoError(t, err)
	run, _, err := st.CreateRun(ctx, belay.RunInput{Session: sess.ID, Input: json.RawMessage(`{"prompt":"p"}`)})
	require.NoError(t, err)
	run, err = st.AcquireRunLease(ctx, run.ID, "test", time.Hour, 0)
	require.NoError(t, err)
	d, _ := json.Marshal(map[string]string{"text": text})
	var evs []belay.Event
	for range n {
		evs = append(evs, belay.Event{Type: belay.EventRunText, Run: run.ID, Epoch: run.Epoch, Data: d})
	}
	_, err = st.Append(ctx, sess.ID, belay.Sync, evs...)
	require.NoError(t, err)
	run, err = st.UpdateRun(ctx, run.ID, run.Epoch, belay.RunUpdate{Phase: belay.PhaseComplete})
	require.NoError(t, err)
	return run
}

func TestAnswerStreamsWithTrailer(t *testing.T) {
	t.Parallel()
	b := setupIdle(t)
	run := longRun(t, b.rt, "line <one> & \"two\"\n", 300)
	resp, err := b.srv.Client().Get(b.srv.URL + "/v1/runs/" + run.ID + "/answer")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "complete", resp.Header.Get("Belay-Run-Status"))
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, strings.Repeat("line <one> & \"two\"\n", 300), string(body))
	require.Equal(t, "ok", resp.Trailer.Get(apitype.TrailerStatus), "a whole answer ends with the ok trailer")

	code, raw := b.do("GET", "/v1/runs/run_01m84gxpdkc7bs4zhbns75pgh2/answer", "", nil)
	require.Equal(t, http.StatusNotFound, code)
	require.Equal(t, apitype.CodeNotFound, errCode(t, raw))
}

// TestAnswerStopsWhenClientGoesAway: a reader that hangs up stops the
// daemon's work on its request.
func TestAnswerStopsWhenClientGoesAway(t *testing.T) {
	t.Parallel()
	b := setupIdle(t)
	run := longRun(t, b.rt, strings.Repeat("x", 64<<10), 256) // 16 MiB
	s := NewServer(Options{Runtime: b.rt})
	ended := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(ended)
		s.Handler("").ServeHTTP(w, r)
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/v1/runs/"+run.ID+"/answer", nil)
	require.NoError(t, err)
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	_, err = io.ReadFull(resp.Body, make([]byte, 1<<10))
	require.NoError(t, err)
	cancel()
	resp.Body.Close()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler kept streaming after its client went away")
	}
}

// TestSlowBodyTimesOut: a client that sends headers and then too little of
// its body is answered 408 and let go, not held forever.
func TestSlowBodyTimesOut(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	s := NewServer(Options{Runtime: b.rt, BodyTimeout: 100 * time.Millisecond})
	srv := httptest.NewServer(s.Handler(""))
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"prov")
	require.NoError(t, err)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusRequestTimeout, resp.StatusCode)
	raw, _ := io.ReadAll(resp.Body)
	require.Equal(t, apitype.CodeTimeout, errCode(t, raw))
}

// TestLongPollOutlivesBodyTimeout: the body deadline ends once the body is
// read, so a lease that waits longer than it is answered, not cut.
func TestLongPollOutlivesBodyTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	s := NewServer(Options{Runtime: b.rt, BodyTimeout: 50 * time.Millisecond})
	srv := httptest.NewServer(s.Handler(""))
	defer srv.Close()
	resp, err := srv.Client().Post(srv.URL+"/v1/inbox/lease", "application/json", strings.NewReader(`{"owner":"a","wait":"400ms"}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", raw)
	require.JSONEq(t, `{"deliveries":[]}`, string(raw), "the wait ran out, the request was not cut")
}

// TestEventPagesAreBounded: a long-poll page of large events stops at
// maxPageBytes (and holds at least one event), and the next page goes on.
func TestEventPagesAreBounded(t *testing.T) {
	t.Parallel()
	b := setupIdle(t)
	run := longRun(t, b.rt, strings.Repeat("x", 256<<10), 20) // 5 MiB of events
	var after uint64
	texts := 0
	for pages := 0; ; pages++ {
		require.Less(t, pages, 20)
		code, raw := b.do("GET", fmt.Sprintf("/v1/sessions/%s/events?after=%d", run.Session, after), "", nil)
		require.Equal(t, http.StatusOK, code)
		require.LessOrEqual(t, len(raw), maxPageBytes+(1<<20)+(64<<10), "a page is bounded")
		var l apitype.EventList
		require.NoError(t, json.Unmarshal(raw, &l))
		if len(l.Events) == 0 {
			break
		}
		for _, e := range l.Events {
			require.Equal(t, after+1, e.Seq)
			after = e.Seq
			if e.Type == belay.EventRunText {
				texts++
			}
		}
	}
	require.Equal(t, 20, texts, "every event once, in order")
}
