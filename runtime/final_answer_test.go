package runtime

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/provider"
	"github.com/belayhq/belay/transcript"
)

// answerOf reads a run's answer as belay read does.
func (b *bundle) answerOf(id string) string {
	b.t.Helper()
	run, err := b.st.Run(context.Background(), id)
	require.NoError(b.t, err)
	var out bytes.Buffer
	require.NoError(b.t, WriteAnswer(context.Background(), b.st, run, &out))
	return out.String()
}

// A final answer (a chat site's copy) supersedes the streamed text as the
// run's answer, for belay read and for the transcript (exports, history);
// it is journaled in parts cut between characters, and reporting it again
// after the daemon restarted and the run resumed journals nothing new.
func TestFinalAnswerSupersedesTheStreamAcrossARestart(t *testing.T) {
	t.Parallel()
	// Longer than two parts, with multi-byte characters across the cuts.
	final := "# Heading\n\n**bold** " + strings.Repeat("é∑😀x", belay.AnswerPart/5)
	var reported atomic.Int32
	p := &funcProvider{name: "site", caps: provider.Capabilities{Resume: true}, run: func(ctx context.Context, req provider.Request, emit func(provider.Event) error) error {
		if !req.Resume {
			_ = emit(provider.Event{Kind: provider.RefUpdate, Ref: &belay.ConversationRef{ID: "conv", Cursor: "1"}})
			if err := emit(provider.Event{Kind: provider.TextDelta, Text: "Heading bold "}); err != nil {
				return err
			}
		}
		// The run reports its final answer, then (the first time) the
		// daemon stops before the turn ends.
		if err := emit(provider.Event{Kind: provider.FinalAnswer, Text: final, Source: "copy"}); err != nil {
			return err
		}
		if reported.Add(1) == 1 {
			return hang(ctx, req, emit)
		}
		return emit(provider.Event{Kind: provider.TurnEnd, StopReason: "end_turn"})
	}}
	b := setup(t, Options{}, p)
	run := b.submit(SubmitRequest{Provider: "site", Prompt: "q"})
	waitFor(t, func() bool { return reported.Load() == 1 })
	parts := countType(b.events(run.Session), belay.EventRunAnswer)
	require.GreaterOrEqual(t, parts, (len(final)+belay.AnswerPart-1)/belay.AnswerPart, "parts of at most AnswerPart bytes")
	require.LessOrEqual(t, parts, (len(final)+belay.AnswerPart-1)/belay.AnswerPart+1, "cut between characters")
	require.Equal(t, final, b.answerOf(run.ID), "the final answer is the run's answer while it finishes")
	b.restart()
	run = b.waitStatus(run.ID, belay.RunComplete)
	require.Equal(t, int32(2), reported.Load(), "the resumed run reported the answer again")
	evs := b.events(run.Session)
	require.Equal(t, parts, countType(evs, belay.EventRunAnswer), "the same answer again journals nothing")
	for _, e := range evs {
		if e.Type == belay.EventRunAnswer {
			var d belay.AnswerData
			require.NoError(t, json.Unmarshal(e.Data, &d))
			require.LessOrEqual(t, len(d.Text), belay.AnswerPart)
			require.True(t, utf8.ValidString(d.Text))
			require.Equal(t, "copy", d.Source)
		}
	}
	require.Equal(t, final, b.answerOf(run.ID))
	msgs, err := transcript.FromJournal(evs)
	require.NoError(t, err)
	require.Len(t, msgs, 2)
	require.Equal(t, final, msgs[1].Text(), "the transcript holds the final answer, not the stream")
	// The streaming export (belay sessions export) too.
	var out bytes.Buffer
	_, err = transcript.ExportStream(context.Background(), &out, func(ctx context.Context, after uint64, fn func(belay.Event) error) error {
		return b.st.ScanEvents(ctx, run.Session, after, fn)
	}, transcript.FormatOpenAI)
	require.NoError(t, err)
	var exported []struct {
		Role    string `json:"role"`
		Content any    `json:"content"`
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &exported), out.String()[:min(out.Len(), 300)])
	require.Len(t, exported, 2)
	require.Contains(t, fmtContent(exported[1].Content), final)
	require.NotContains(t, fmtContent(exported[1].Content), "Heading bold")
}

func fmtContent(c any) string {
	b, _ := json.Marshal(c)
	var s string
	if json.Unmarshal(b, &s) == nil {
		return s
	}
	return string(b)
}

// WriteAnswer takes the last whole final answer after the last fresh
// start: a torn one (a crash between its parts) is no answer, and an
// attempt that starts again from scratch drops the one before it.
func TestWriteAnswerFinalAnswerRules(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, sess, newRun := answerStore(t)
	r := newRun()
	app := func(typ string, v any) {
		d, _ := json.Marshal(v)
		_, err := st.Append(ctx, sess.ID, belay.Sync, belay.Event{Type: typ, Run: r.ID, Epoch: r.Epoch, Data: d})
		require.NoError(t, err)
	}
	answer := func(text string, parts ...int) {
		sum := sha256.Sum256([]byte(text))
		off := 0
		for _, n := range parts {
			app(belay.EventRunAnswer, belay.AnswerData{Text: text[off : off+n], Offset: int64(off), Size: int64(len(text)), SHA256: hex.EncodeToString(sum[:]), Source: "copy"})
			off += n
		}
	}
	read := func() string {
		r, err := st.Run(ctx, r.ID)
		require.NoError(t, err)
		var out bytes.Buffer
		require.NoError(t, WriteAnswer(ctx, st, r, &out))
		return out.String()
	}
	update := func(attempt int, resume bool) {
		d, _ := json.Marshal(map[string]any{"attempt": attempt, "resume": resume})
		var err error
		r, err = st.UpdateRun(ctx, r.ID, r.Epoch, belay.RunUpdate{Phase: belay.PhaseStreaming, Attempt: attempt, Data: d})
		require.NoError(t, err)
	}
	update(1, false)
	app(belay.EventRunText, belay.TextData{Text: "streamed"})
	answer("first answer", 6, 6)
	require.Equal(t, "first answer", read())
	answer("second answer", 7) // torn: the rest never came
	require.Equal(t, "first answer", read(), "a torn answer is no answer")
	update(2, true) // resumed: the answer stands
	answer("third", 5)
	require.Equal(t, "third", read())
	update(3, false) // started again from scratch
	require.Equal(t, "", read(), "a fresh start drops the answer before it")
	app(belay.EventRunText, belay.TextData{Text: "again"})
	require.Equal(t, "again", read(), "then the new stream is the answer")
	answer("fourth", 3, 3)
	require.Equal(t, "fourth", read())
	app("note", map[string]any{}) // other events do not matter
	require.Equal(t, "fourth", read())
}

// A final answer that is not valid UTF-8 is journaled with the bytes
// replaced, and its hash and size are those of what was journaled, so it
// is whole.
func TestFinalAnswerInvalidUTF8(t *testing.T) {
	t.Parallel()
	p := &funcProvider{name: "site", run: func(ctx context.Context, req provider.Request, emit func(provider.Event) error) error {
		if err := emit(provider.Event{Kind: provider.TextDelta, Text: "streamed"}); err != nil {
			return err
		}
		if err := emit(provider.Event{Kind: provider.FinalAnswer, Text: "a\xffb", Source: "copy"}); err != nil {
			return err
		}
		return emit(provider.Event{Kind: provider.TurnEnd, StopReason: "end_turn"})
	}}
	b := setup(t, Options{}, p)
	run := b.submit(SubmitRequest{Provider: "site", Prompt: "q"})
	b.waitStatus(run.ID, belay.RunComplete)
	require.Equal(t, "a\uFFFDb", b.answerOf(run.ID))
}
