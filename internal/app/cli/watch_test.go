package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
)

const (
	testSession = "ses_01jfz0000000000000000000aa"
	testRun     = "run_01jfz0000000000000000000aa"
)

// blipDaemon stands in for a daemon over TCP (BELAY_URL): it answers the
// health check, the run and one event stream, then is gone: every later
// request has its connection dropped, as with a daemon that died.
type blipDaemon struct {
	srv    *httptest.Server
	gone   atomic.Bool
	events []belay.Event
}

func newBlipDaemon(t *testing.T, events ...belay.Event) *blipDaemon {
	d := &blipDaemon{events: events}
	d.srv = httptest.NewServer(http.HandlerFunc(d.serve))
	t.Cleanup(func() {
		d.srv.CloseClientConnections()
		d.srv.Close()
	})
	return d
}

func (d *blipDaemon) serve(w http.ResponseWriter, r *http.Request) {
	if d.gone.Load() {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close()
		}
		return
	}
	switch {
	case r.URL.Path == "/healthz":
		_ = json.NewEncoder(w).Encode(apitype.Health{Status: "ok"})
	case r.URL.Path == "/v1/runs/"+testRun:
		_ = json.NewEncoder(w).Encode(apitype.Run{Run: belay.Run{
			ID: testRun, Session: testSession, Status: belay.RunRunning, Phase: belay.PhaseStreaming, InputSeq: 1,
		}})
	case r.URL.Path == "/v1/sessions/"+testSession+"/events":
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range d.events {
			raw, _ := json.Marshal(ev)
			fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", ev.Seq, ev.Type, raw)
		}
		w.(http.Flusher).Flush()
		d.gone.Store(true) // the daemon dies right after the last event
	default:
		http.NotFound(w, r)
	}
}

func event(seq uint64, typ string, data any) belay.Event {
	raw, _ := json.Marshal(data)
	return belay.Event{Seq: seq, Type: typ, Run: testRun, TS: time.Now(), Data: raw}
}

func TestWatchEndsWithTheRunsCodeAcrossABlip(t *testing.T) {
	t.Parallel()
	d := newBlipDaemon(t,
		event(2, "run.text", map[string]string{"text": "hello "}),
		event(3, "run.text", map[string]string{"text": "world"}),
		event(4, "run.updated", map[string]any{
			"phase":  "failed",
			"error":  belay.RunError{Class: belay.ClassInvalidRequest, Message: "openai: HTTP 400: model nope does not exist", Status: 400},
			"reason": "not retryable",
		}),
	)
	code, stdout, stderr := run(t, map[string]string{"BELAY_URL": d.srv.URL, "BELAY_HOME": t.TempDir()}, "watch", testRun)
	require.Equal(t, ExitRunFailed, code, "the run's own code, though the daemon is gone after its last event: %s", stderr)
	require.Equal(t, "hello world", stdout, "standard output is the answer alone")
	require.Contains(t, stderr, "run "+testRun+" failed (invalid_request, HTTP 400): openai: HTTP 400: model nope does not exist; not retryable")
	require.Contains(t, stderr, "belay sessions doctor "+testSession)
}

func TestWatchGivesUpOnAGoneDaemonWithTheResumeCommand(t *testing.T) {
	t.Parallel()
	d := newBlipDaemon(t, event(2, "run.text", map[string]string{"text": "partial"}))
	start := time.Now()
	code, stdout, stderr := run(t, map[string]string{"BELAY_URL": d.srv.URL, "BELAY_HOME": t.TempDir()}, "watch", "--reconnect", "300ms", testRun)
	require.Equal(t, ExitUnreachable, code, stderr)
	require.Equal(t, "partial", stdout)
	require.Contains(t, stderr, "Resume: belay watch "+testRun+" --after 2")
	require.Contains(t, stderr, "the run goes on without you")
	require.NotContains(t, stderr, "dial tcp", "no raw network error")
	require.Less(t, time.Since(start), 30*time.Second, "bounded, not forever")
}

// A daemon named by BELAY_URL that does not answer is not one belay starts:
// the advice names the address, and the tcp: form of --listen is taken.
func TestUnreachableRemoteDaemonAdvice(t *testing.T) {
	t.Parallel()
	d := newBlipDaemon(t, event(2, "run.text", map[string]string{"text": "hi"}))
	addr := strings.TrimPrefix(d.srv.URL, "http://")
	d.srv.Close()
	for _, u := range []string{"http://" + addr, "tcp:" + addr} {
		code, _, stderr := run(t, map[string]string{"BELAY_URL": u, "BELAY_HOME": t.TempDir()}, "runs", "list")
		require.Equal(t, ExitUnreachable, code, stderr)
		require.Contains(t, stderr, "Try: check that a daemon serves "+u)
		require.Contains(t, stderr, "unset BELAY_URL")
		require.NotContains(t, stderr, "BELAY_NO_AUTOSTART")
	}
	code, _, stderr := run(t, map[string]string{"BELAY_HOME": t.TempDir(), "BELAY_NO_AUTOSTART": "1"}, "wait", testRun)
	require.Equal(t, ExitUnreachable, code, stderr)
	require.Contains(t, stderr, "Try: belay daemon start (or unset BELAY_NO_AUTOSTART)")
}

// The tcp:HOST:PORT form of BELAY_URL reaches a daemon as http://HOST:PORT.
func TestBelayURLTakesTheListenForm(t *testing.T) {
	t.Parallel()
	d := newBlipDaemon(t, event(2, "run.text", map[string]string{"text": "hello"}),
		event(3, "run.updated", map[string]any{"phase": "complete"}))
	code, stdout, stderr := run(t, map[string]string{"BELAY_URL": "tcp:" + strings.TrimPrefix(d.srv.URL, "http://"), "BELAY_HOME": t.TempDir()}, "watch", testRun)
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "hello", stdout)
}

func TestFlagErrorsAreHuman(t *testing.T) {
	t.Parallel()
	home := map[string]string{"BELAY_HOME": t.TempDir(), "BELAY_NO_AUTOSTART": "1"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"send", "--provider", "fake", "--priority", "high", "x"}, `--priority takes a whole number such as 3, not "high"`},
		{[]string{"send", "--provider", "fake", "--deadline", "tomorrow", "x"}, `neither a duration (90m, 2h) nor an RFC 3339 time`},
		{[]string{"send", "--provider", "fake", "--deadline", "2001-01-01T00:00:00Z", "x"}, `is in the past`},
		{[]string{"watch", "--after", "-1", testRun}, `--after takes a whole number, 0 or more, not "-1"`},
		{[]string{"wait", "--timeout", "5", testRun}, `--timeout takes a duration such as 90s, 30m or 1h30m, not "5"`},
		{[]string{"sessions", "list", "--state", "bogus"}, `--state "bogus" is not idle, active or quarantined`},
	} {
		code, _, stderr := run(t, home, tc.args...)
		require.Equal(t, ExitUsage, code, "%v: %s", tc.args, stderr)
		require.Contains(t, stderr, tc.want, tc.args)
		require.NotContains(t, stderr, "strconv", tc.args)
		require.NotContains(t, stderr, "time: ", tc.args)
		require.True(t, strings.Contains(stderr, "Try: belay "), "%v: %s", tc.args, stderr)
	}
}

func TestDeadlineFlag(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	f := deadlineFlag{now: func() time.Time { return now }}
	require.NoError(t, f.Set("90m"))
	require.Equal(t, 90*time.Minute, f.d)
	require.NoError(t, f.Set("2026-11-23T14:30:00Z"))
	require.Equal(t, 150*time.Minute, f.d)
	require.NoError(t, f.Set("2026-11-23T15:00:00+01:00"))
	require.Equal(t, 2*time.Hour, f.d)
	require.Error(t, f.Set("0s"))
	require.Error(t, f.Set("2026-11-23T11:00:00Z"))
}

func TestAgeNeverPrintsAZeroTime(t *testing.T) {
	t.Parallel()
	require.Equal(t, "-", ago(time.Time{}))
	require.Equal(t, "-", stampOrUnknown(time.Time{}))
	require.Equal(t, "0s ago", ago(time.Now().Add(time.Hour)), "a clock skew is not a negative age")
}

// TestStatusNeverSplitsAWordOnOneTerminal plays stdout and stderr into one
// buffer, as one terminal shows them.
func TestStatusNeverSplitsAWordOnOneTerminal(t *testing.T) {
	t.Parallel()
	var screen strings.Builder
	p := &printer{stdio: Stdio{Out: &screen, Err: &screen}, progress: true, inline: true}
	p.event(event(2, "run.text", map[string]string{"text": "hel"}))
	p.event(event(3, "run.text", map[string]string{"text": "lo wor"}))
	p.event(event(4, "run.tool_call", map[string]any{"Name": "search"}))
	p.event(event(5, "run.text", map[string]string{"text": "ld"}))
	p.finish()
	require.Regexp(t, `^hello \n· tool search · last activity \d+s ago\nworld$`, screen.String())
}

// TestWatchShowsTheStreamThenNamesTheFinalAnswer: watch prints the deltas
// as they come; a final answer (run.answer) adds no text to stdout, and
// stderr says once that belay read prints it.
func TestWatchShowsTheStreamThenNamesTheFinalAnswer(t *testing.T) {
	t.Parallel()
	var out, errb strings.Builder
	p := &printer{stdio: Stdio{Out: &out, Err: &errb}, progress: true}
	p.event(event(2, "run.text", map[string]string{"text": "Heading bold"}))
	p.event(event(3, belay.EventRunAnswer, belay.AnswerData{Text: "**Heading** ", Offset: 0, Size: 16, Source: "copy"}))
	p.event(event(4, belay.EventRunAnswer, belay.AnswerData{Text: "bold", Offset: 12, Size: 16, Source: "copy"}))
	p.finish()
	require.Equal(t, "Heading bold", out.String())
	require.Equal(t, 1, strings.Count(errb.String(), "final answer taken (copy, 16 bytes): belay read "+testRun+" prints it"), errb.String())
}

// TestTheLastWordComesBeforeTheEnd: on one terminal, the answer's last
// word (held back while it might go on) is written when the turn ends,
// before the status lines of its end, and no blank line follows them.
func TestTheLastWordComesBeforeTheEnd(t *testing.T) {
	t.Parallel()
	var screen strings.Builder
	p := &printer{stdio: Stdio{Out: &screen, Err: &screen}, progress: true, inline: true}
	p.event(event(2, "run.text", map[string]string{"text": "hello wor"}))
	p.event(event(3, "run.text", map[string]string{"text": "ld"}))
	p.event(event(4, "run.updated", map[string]any{"phase": "finishing"}))
	p.event(event(5, "run.updated", map[string]any{"phase": "complete"}))
	p.finish()
	require.Regexp(t, `^hello world\n· finishing · last activity \d+s ago\n· complete · last activity \d+s ago\n$`, screen.String())
}
