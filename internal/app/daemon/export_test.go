package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/client"
	"github.com/belayhq/belay/store/fsstore"
	"github.com/belayhq/belay/transcript"
)

// journalLongSession writes a session whose one run thinks, answers with
// size bytes of text, calls a tool and answers again.
func journalLongSession(t *testing.T, dir string, size int) string {
	t.Helper()
	ctx := context.Background()
	st, err := fsstore.Open(ctx, dir, fsstore.Options{})
	require.NoError(t, err)
	defer st.Close()
	sess, err := st.CreateSession(ctx, belay.SessionInput{Provider: "fake", Options: json.RawMessage(`{"cwd":"/work"}`)})
	require.NoError(t, err)
	run, _, err := st.CreateRun(ctx, belay.RunInput{Session: sess.ID, Input: json.RawMessage(`{"prompt":"write at length"}`)})
	require.NoError(t, err)
	run, err = st.AcquireRunLease(ctx, run.ID, "test", time.Hour, 0)
	require.NoError(t, err)
	ev := func(typ string, data any) belay.Event {
		b, err := json.Marshal(data)
		require.NoError(t, err)
		return belay.Event{Type: typ, Run: run.ID, Epoch: run.Epoch, Data: b}
	}
	_, err = st.Append(ctx, sess.ID, belay.Sync, ev("run.thinking", map[string]string{"text": "thinking it over"}))
	require.NoError(t, err)
	chunk := strings.Repeat("Streamed \"text\" <with> & ünïcödé.\n", 120)
	var batch []belay.Event
	for n := 0; n < size; n += len(chunk) {
		batch = append(batch, ev("run.text", map[string]string{"text": chunk}))
		if len(batch) == 64 {
			_, err = st.Append(ctx, sess.ID, belay.Buffered, batch...)
			require.NoError(t, err)
			batch = batch[:0]
		}
	}
	batch = append(batch,
		ev("run.tool_call", map[string]any{"id": "call_0", "name": "bash", "input": map[string]string{"cmd": "ls"}}),
		ev("run.tool_result", map[string]any{"callId": "call_0", "content": "a b c"}),
		ev("run.text", map[string]string{"text": "That is all."}))
	_, err = st.Append(ctx, sess.ID, belay.Sync, batch...)
	require.NoError(t, err)
	_, err = st.UpdateRun(ctx, run.ID, run.Epoch, belay.RunUpdate{Phase: belay.PhaseComplete})
	require.NoError(t, err)
	return sess.ID
}

// TestExportStreamsThroughTheDaemon: GET /v1/sessions/{id}/transcript
// writes, in every format, the bytes the in-memory export writes from the
// same journal, with its notes in the trailer; a journal damaged in the
// middle fails the export after the bytes before the damage, never ends
// it as if whole.
func TestExportStreamsThroughTheDaemon(t *testing.T) {
	dir := t.TempDir()
	session := journalLongSession(t, dir, 3<<19) // past the 1 MiB kept in memory and one record
	ctx := context.Background()
	st, err := fsstore.Open(ctx, dir, fsstore.Options{ReadOnly: true})
	require.NoError(t, err)
	events, err := st.Events(ctx, session, 0, 0)
	require.NoError(t, err)
	require.NoError(t, st.Close())

	stop := startDaemon(t, dir, "")
	c := client.New(client.Options{Socket: filepath.Join(dir, "belay.sock")})
	for _, f := range []transcript.Format{transcript.FormatOpenAI, transcript.FormatAnthropic, transcript.FormatPi, transcript.FormatClaude} {
		var want bytes.Buffer
		rep, err := transcript.ExportReport(&want, events, f)
		require.NoError(t, err)
		var got bytes.Buffer
		sum, err := c.Transcript(ctx, session, string(f), &got)
		require.NoError(t, err, "format %s", f)
		require.True(t, bytes.Equal(want.Bytes(), got.Bytes()), "format %s: %d bytes, want %d", f, got.Len(), want.Len())
		require.Equal(t, len(rep.Changes), sum.Total(), "format %s", f)
	}
	var sum transcript.ExportSummary
	sum, err = c.Transcript(ctx, session, "anthropic", &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, map[string]int{transcript.ChangeDropThinking: 1}, sum.Counts, "the notes come in the trailer")
	// The belay format holds the long text in several events (one cannot).
	var got bytes.Buffer
	_, err = c.Transcript(ctx, session, "belay", &got)
	require.NoError(t, err)
	d, err := transcript.Parse(got.Bytes(), transcript.FormatBelay)
	require.NoError(t, err)
	require.Empty(t, d.Dropped)
	stop()

	// Damage a line in the middle of the journal.
	path := filepath.Join(dir, "sessions", session, "journal.jsonl")
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	mid := bytes.IndexByte(data[len(data)/2:], '\n') + len(data)/2 + 40
	data[mid] ^= 0x01
	require.NoError(t, os.WriteFile(path, data, 0o600))
	startDaemon(t, dir, "")
	got.Reset()
	_, err = c.Transcript(ctx, session, "openai", &got)
	require.Error(t, err, "a damaged journal fails the export")
	require.NotContains(t, got.String(), "That is all.", "nothing after the damage")
	t.Logf("damaged: %v (%d bytes before)", err, got.Len())
}
