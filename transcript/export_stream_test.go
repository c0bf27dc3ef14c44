package transcript

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/journal"
)

// sliceScan is an EventScan over events that, like the store, lends each
// event's Data only until fn returns: it is overwritten afterwards.
func sliceScan(events []journal.Event) EventScan {
	return func(ctx context.Context, after uint64, fn func(journal.Event) error) error {
		var scratch []byte
		for _, e := range events {
			if e.Seq <= after {
				continue
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			scratch = append(scratch[:0], e.Data...)
			e.Data = scratch
			err := fn(e)
			for i := range scratch {
				scratch[i] = 'X'
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
}

// genSession journals a session as the runtime writes one: runs in
// order, a follow-up sometimes created (queued) while the run before it
// is still going, thinking and text deltas, tool calls with results (some
// missing, some errors, some calls without input), usage, attempts
// started again from scratch or resumed, and every way a run ends.
func genSession(r *rand.Rand) []journal.Event {
	var evs []journal.Event
	ts := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	add := func(typ, run string, data any) {
		ts = ts.Add(time.Duration(r.IntN(3000)) * time.Millisecond)
		b, err := json.Marshal(data)
		if err != nil {
			panic(err)
		}
		evs = append(evs, journal.Event{Seq: uint64(len(evs) + 1), TS: ts, Type: typ, Run: run, Data: b})
	}
	sess := map[string]any{"id": "ses_01jexport0000000000000000", "provider": "fake"}
	if r.IntN(2) == 0 {
		sess["options"] = map[string]any{"cwd": "/home/u/project"}
	}
	add(belay.EventSessionCreated, "", sess)
	runs := 1 + r.IntN(6)
	created := 0
	create := func() {
		created++
		id := fmt.Sprintf("run_%026d", created)
		prompt := genText(r, 1+r.IntN(40))
		if r.IntN(12) == 0 {
			prompt = "  "
		}
		add(belay.EventRunCreated, id, map[string]any{"id": id, "provider": "fake", "model": "m-" + fmt.Sprint(r.IntN(3)), "input": map[string]any{"prompt": prompt}})
	}
	for n := 1; n <= runs; n++ {
		if created < n {
			create()
		}
		id := fmt.Sprintf("run_%026d", n)
		add(belay.EventRunUpdated, id, map[string]any{"phase": "streaming", "data": map[string]any{"attempt": 1}})
		calls := 0
		steps := r.IntN(8)
		for s := 0; s < steps; s++ {
			switch r.IntN(9) {
			case 0, 1:
				for range 1 + r.IntN(4) {
					add(belay.EventRunThinking, id, map[string]string{"text": genText(r, r.IntN(30))})
				}
			case 2, 3, 4:
				for range 1 + r.IntN(6) {
					add(belay.EventRunText, id, map[string]string{"text": genText(r, r.IntN(50))})
				}
			case 5, 6:
				callID := fmt.Sprintf("exec_%d", calls) // numbered per turn, as some providers do
				calls++
				call := map[string]any{"id": callID, "name": "bash", "input": map[string]any{"cmd": genText(r, 10)}}
				switch r.IntN(10) {
				case 0:
					callID = fmt.Sprintf("bad_%d_%d", n, s) // a call without input is dropped: its id is its own
					call = map[string]any{"id": callID, "name": "bash", "input": nil}
				case 1:
					delete(call, "input")
				}
				add(belay.EventRunToolCall, id, call)
				if r.IntN(6) != 0 {
					add(belay.EventRunToolResult, id, map[string]any{"callId": callID, "content": genText(r, r.IntN(20)), "isError": r.IntN(5) == 0})
				}
			case 7:
				add(belay.EventRunUsage, id, map[string]int{"input": r.IntN(1000), "output": r.IntN(1000)})
			case 8:
				if r.IntN(2) == 0 {
					add(belay.EventRunUpdated, id, map[string]any{"phase": "streaming", "data": map[string]any{"attempt": 2}})
				} else {
					add(belay.EventRunUpdated, id, map[string]any{"phase": "streaming", "data": map[string]any{"attempt": 2, "resume": true}})
				}
			}
		}
		if n < runs && r.IntN(3) == 0 {
			create() // a follow-up sent while this run is going: queued
			if r.IntN(2) == 0 {
				add(belay.EventRunText, id, map[string]string{"text": genText(r, 20)})
			}
		}
		if r.IntN(4) != 0 {
			add(belay.EventRunUpdated, id, map[string]any{"phase": "finishing", "data": map[string]any{"stopReason": []string{"end_turn", "tool_use", "max_tokens"}[r.IntN(3)]}})
		}
		end := []string{"complete", "complete", "complete", "failed", "cancelled", "stranded"}[r.IntN(6)]
		add(belay.EventRunUpdated, id, map[string]any{"phase": end})
	}
	if r.IntN(5) == 0 {
		create() // a run that has not ended yet
		add(belay.EventRunText, fmt.Sprintf("run_%026d", created), map[string]string{"text": genText(r, 30)})
	}
	return evs
}

// genText is text with what JSON escapes and what it does not.
func genText(r *rand.Rand, n int) string {
	pieces := []string{"a", "word ", "\n", "\"", "\\", "<b>", "&", "\t", "ü", "日本", "😀", "\u2028", "\x00", "\x1f", "\b", "\f", "\r", "/", " "}
	var b strings.Builder
	for range n {
		b.WriteString(pieces[r.IntN(len(pieces))])
	}
	return b.String()
}

// kinds counts changes by kind.
func kinds(cs []Change) map[string]int {
	m := map[string]int{}
	for _, c := range cs {
		m[c.Kind]++
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

// checkStreamMatches exports events both ways and requires the same bytes
// and the same changes.
func checkStreamMatches(t *testing.T, events []journal.Event, f Format, budget int) {
	t.Helper()
	var want bytes.Buffer
	rep, err := ExportReport(&want, events, f)
	require.NoError(t, err)
	var got bytes.Buffer
	sum, err := exportStream(context.Background(), &got, sliceScan(events), f, budget)
	require.NoError(t, err)
	if !bytes.Equal(want.Bytes(), got.Bytes()) {
		require.Equal(t, want.String(), got.String(), "format %s, budget %d", f, budget)
	}
	require.Equal(t, kinds(rep.Changes), sum.Counts, "format %s", f)
	if len(rep.Changes) <= MaxSummaryChanges {
		sortChanges := func(cs []Change) []string {
			var out []string
			for _, c := range cs {
				// The reason a stretch gives may read differently (a result
				// that answers no call is the first of its stretch).
				c.Reason = ""
				b, _ := json.Marshal(c)
				out = append(out, string(b))
			}
			sort.Strings(out)
			return out
		}
		require.Equal(t, sortChanges(rep.Changes), sortChanges(sum.Changes), "format %s", f)
	}
}

// TestExportStreamMatchesExport: the streaming export writes, for every
// format, the bytes the in-memory export writes, with its text kept in
// memory and with every block's text left in the journal and read again.
func TestExportStreamMatchesExport(t *testing.T) {
	t.Parallel()
	for seed := range uint64(80) {
		r := rand.New(rand.NewPCG(seed, 7))
		events := genSession(r)
		for _, f := range Formats {
			for _, budget := range []int{inlineBudget, 0, 64} {
				checkStreamMatches(t, events, f, budget)
			}
		}
	}
}

// TestExportStreamEmpty: a session without runs.
func TestExportStreamEmpty(t *testing.T) {
	t.Parallel()
	events := []journal.Event{{Seq: 1, TS: time.Unix(5, 0).UTC(), Type: belay.EventSessionCreated, Data: json.RawMessage(`{"id":"ses_x"}`)}}
	for _, f := range Formats {
		checkStreamMatches(t, events, f, inlineBudget)
		checkStreamMatches(t, nil, f, inlineBudget)
	}
}

// longRun journals one run whose answer is size bytes of text in deltas,
// with thinking before it and a tool call after it.
func longRun(size, chunk int) ([]journal.Event, string) {
	var evs []journal.Event
	add := func(typ, run string, data string) {
		evs = append(evs, journal.Event{Seq: uint64(len(evs) + 1), TS: time.Unix(int64(len(evs)), 0).UTC(), Type: typ, Run: run, Data: json.RawMessage(data)})
	}
	add(belay.EventSessionCreated, "", `{"id":"ses_long"}`)
	add(belay.EventRunCreated, "run_1", `{"input":{"prompt":"write a lot"}}`)
	add(belay.EventRunThinking, "run_1", `{"text":"let me think"}`)
	var want strings.Builder
	unit := "Long answers stream: \"quotes\", <tags> & ünïcödé \u2028 lines\n"
	for want.Len() < size {
		var piece strings.Builder
		for piece.Len() < chunk {
			piece.WriteString(unit)
		}
		b, _ := json.Marshal(map[string]string{"text": piece.String()})
		add(belay.EventRunText, "run_1", string(b))
		want.WriteString(piece.String())
	}
	add(belay.EventRunToolCall, "run_1", `{"id":"c1","name":"bash","input":{"cmd":"ls"}}`)
	add(belay.EventRunToolResult, "run_1", `{"callId":"c1","content":"ok"}`)
	add(belay.EventRunText, "run_1", `{"text":"done"}`)
	add(belay.EventRunUpdated, "run_1", `{"phase":"complete"}`)
	return evs, want.String()
}

// TestExportStreamLongText: a text block far past the memory budget is
// read again from the journal and written whole, in every format; the
// belay journal, whose one event could not hold it (the in-memory export
// refuses it), holds it in several events that read back to the same
// conversation.
func TestExportStreamLongText(t *testing.T) {
	t.Parallel()
	events, text := longRun(3<<20, 4<<10)
	for _, f := range []Format{FormatOpenAI, FormatAnthropic, FormatPi, FormatClaude} {
		checkStreamMatches(t, events, f, 64<<10)
	}
	var old bytes.Buffer
	require.ErrorIs(t, Export(&old, events, FormatBelay), journal.ErrTooLarge, "one event cannot hold the block")

	var got bytes.Buffer
	_, err := exportStream(context.Background(), &got, sliceScan(events), FormatBelay, 64<<10)
	require.NoError(t, err)
	d, err := Parse(got.Bytes(), FormatBelay)
	require.NoError(t, err, "a valid journal")
	require.Empty(t, d.Dropped)
	msgs := d.Messages()
	require.Len(t, msgs, 4)
	require.Equal(t, text, msgs[1].Blocks[1].Text)
	want, err := FromJournal(events)
	require.NoError(t, err)
	for i := range want {
		want[i].Meta.ID, msgs[i].Meta.ID = "", ""
		want[i].Meta.Time, msgs[i].Meta.Time = time.Time{}, time.Time{}
		msgs[i].src, msgs[i].fp, msgs[i].part = nil, 0, 0
		for j := range msgs[i].Blocks {
			msgs[i].Blocks[j].raw, msgs[i].Blocks[j].fp = nil, 0
		}
	}
	require.Equal(t, want, msgs)
}

// TestExportStreamDamage: an event that does not decode stops the export
// with its seq, after what came before it was written.
func TestExportStreamDamage(t *testing.T) {
	t.Parallel()
	events, _ := longRun(256<<10, 4<<10)
	events[5].Data = json.RawMessage(`{"text":`)
	for _, budget := range []int{inlineBudget, 0} {
		var got bytes.Buffer
		_, err := exportStream(context.Background(), &got, sliceScan(events), FormatOpenAI, budget)
		require.ErrorContains(t, err, "event 6 (run.text)")
	}
	// A scan that fails mid-stream (a damaged journal) fails the export.
	events, _ = longRun(256<<10, 4<<10)
	damaged := errors.New("journal: corrupt record at offset 123")
	scan := func(ctx context.Context, after uint64, fn func(journal.Event) error) error {
		for _, e := range events[after:20] {
			if err := fn(e); err != nil {
				return err
			}
		}
		return damaged
	}
	_, err := ExportStream(context.Background(), io.Discard, scan, FormatClaude)
	require.ErrorIs(t, err, damaged)
}

// TestExportStreamStops: a cancelled context and a failing writer stop
// the export.
func TestExportStreamStops(t *testing.T) {
	t.Parallel()
	events, _ := longRun(2<<20, 4<<10)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := ExportStream(ctx, io.Discard, sliceScan(events), FormatOpenAI)
	require.ErrorIs(t, err, context.Canceled)
	gone := errors.New("client went away")
	_, err = exportStream(context.Background(), failAfter{n: 1 << 20, err: gone}, sliceScan(events), FormatAnthropic, 0)
	require.ErrorIs(t, err, gone)
}

type failAfter struct {
	n   int
	err error
}

func (f failAfter) Write(p []byte) (int, error) { return 0, f.err }

// FuzzExportStream holds the streaming export to the in-memory one on
// sessions generated from the fuzzer's seed, with the text kept in memory
// or read again from the journal.
func FuzzExportStream(f *testing.F) {
	for _, s := range []uint64{0, 1, 42, 1 << 40} {
		f.Add(s, uint8(0))
		f.Add(s, uint8(1))
	}
	f.Fuzz(func(t *testing.T, seed uint64, mode uint8) {
		r := rand.New(rand.NewPCG(seed, uint64(mode)))
		events := genSession(r)
		budget := []int{inlineBudget, 0, 100}[int(mode)%3]
		for _, fm := range Formats {
			checkStreamMatches(t, events, fm, budget)
		}
	})
}

// BenchmarkExportStream exports a run with a long answer in 4 KiB deltas
// (the exporter's own cost: the events come from memory), its text left
// in the journal and read again.
func BenchmarkExportStream(b *testing.B) {
	events, text := longRun(64<<20, 4<<10)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		if _, err := ExportStream(context.Background(), io.Discard, sliceScan(events), FormatOpenAI); err != nil {
			b.Fatal(err)
		}
	}
}
