package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/store/fsstore"
)

// answerStore opens a store with one session, and returns a function
// that creates a leased run in it.
func answerStore(tb testing.TB) (*fsstore.Store, belay.Session, func() belay.Run) {
	ctx := context.Background()
	st, err := fsstore.Open(ctx, tb.TempDir(), fsstore.Options{})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = st.Close() })
	sess, err := st.CreateSession(ctx, belay.SessionInput{Provider: "fake"})
	require.NoError(tb, err)
	return st, sess, func() belay.Run {
		r, _, err := st.CreateRun(ctx, belay.RunInput{Session: sess.ID, Input: json.RawMessage(`{"prompt":"p"}`)})
		require.NoError(tb, err)
		r, err = st.AcquireRunLease(ctx, r.ID, "w", time.Hour, 0)
		require.NoError(tb, err)
		return r
	}
}

func TestWriteAnswer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, sess, newRun := answerStore(t)
	text := func(r belay.Run, s string) {
		d, _ := json.Marshal(belay.TextData{Text: s})
		_, err := st.Append(ctx, sess.ID, belay.Sync, belay.Event{Type: belay.EventRunText, Run: r.ID, Epoch: r.Epoch, Data: d})
		require.NoError(t, err)
	}
	update := func(r belay.Run, phase belay.RunPhase, attempt int, resume bool) belay.Run {
		d, _ := json.Marshal(map[string]any{"attempt": attempt, "resume": resume})
		r, err := st.UpdateRun(ctx, r.ID, r.Epoch, belay.RunUpdate{Phase: phase, Attempt: attempt, Data: d})
		require.NoError(t, err)
		return r
	}
	read := func(r belay.Run) string {
		r, err := st.Run(ctx, r.ID)
		require.NoError(t, err)
		var out bytes.Buffer
		require.NoError(t, WriteAnswer(ctx, st, r, &out))
		return out.String()
	}

	a := newRun()
	a = update(a, belay.PhaseStreaming, 1, false)
	text(a, "lost ")
	b := newRun() // interleaved: another run's events do not mix in
	text(b, "other")
	a = update(a, belay.PhaseStreaming, 2, false) // resent from scratch
	text(a, "hello <wörld> & \"q\"\n\t\u2028")
	a = update(a, belay.PhaseStreaming, 3, true) // resumed: continues
	text(a, " again")
	require.Equal(t, "hello <wörld> & \"q\"\n\t\u2028 again", read(a), "the run so far")
	update(a, belay.PhaseComplete, 3, true)
	text(b, " more")
	require.Equal(t, "hello <wörld> & \"q\"\n\t\u2028 again", read(a))
	require.Equal(t, "other more", read(b))

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	err := WriteAnswer(cctx, st, b, &bytes.Buffer{})
	require.ErrorIs(t, err, context.Canceled, "the reader went away: stop")
	werr := errors.New("broken pipe")
	err = WriteAnswer(ctx, st, b, failWriter{werr})
	require.ErrorIs(t, err, werr)
}

type failWriter struct{ err error }

func (f failWriter) Write([]byte) (int, error) { return 0, f.err }

// BenchmarkWriteAnswer reads a run's answer of 4 KiB deltas back from the
// store (the daemon's side of belay read).
func BenchmarkWriteAnswer(b *testing.B) { benchWriteAnswer(b, 4096) }

func benchWriteAnswer(b *testing.B, delta int) {
	ctx := context.Background()
	st, sess, newRun := answerStore(b)
	run := newRun()
	text := strings.ToValidUTF8(strings.Repeat("The answer streams back: \"quoted\", <tagged> & ünïcödé.\n", delta/40+1)[:delta], "")
	d, _ := json.Marshal(belay.TextData{Text: text})
	var evs []belay.Event
	for range 256 {
		evs = append(evs, belay.Event{Type: belay.EventRunText, Run: run.ID, Epoch: run.Epoch, Data: d})
	}
	for range 16 * 4096 / delta {
		_, err := st.Append(ctx, sess.ID, belay.Sync, evs...)
		require.NoError(b, err)
	}
	b.SetBytes(int64(16 * 4096 / delta * 256 * len(text)))
	for b.Loop() {
		require.NoError(b, WriteAnswer(ctx, st, run, io.Discard))
	}
}

// BenchmarkWriteAnswerSmallDeltas is BenchmarkWriteAnswer with 256-byte
// deltas: the per-event cost.
func BenchmarkWriteAnswerSmallDeltas(b *testing.B) { benchWriteAnswer(b, 256) }
