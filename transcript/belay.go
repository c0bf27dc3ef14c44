package transcript

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/vfs"
	"github.com/belayhq/belay/journal"
)

// belayCodec reads belay's session journal. Its header is the first event
// (seq 1); each line must carry a valid CRC-32C.
type belayCodec struct{}

func (belayCodec) hasHeader() bool { return true }

func (c belayCodec) checkHeader(line []byte) error {
	if why := c.checkLine(line); why != "" {
		return errors.New("the first event is damaged: " + why)
	}
	if seq, _ := lineSeq(line); seq != 1 {
		return fmt.Errorf("the first event has seq %d, not 1", seq)
	}
	return nil
}

// checkLine verifies a journal line as journal/doc.go specifies it: the
// checksum trailer over the body, valid JSON, a seq and a type.
func (belayCodec) checkLine(line []byte) string {
	if len(line) > belay.MaxRecordSize {
		return "line longer than the journal's record limit"
	}
	if _, problem := journal.VerifyLine(line); problem != "" {
		return problem
	}
	if !validJSON(line) {
		return "not valid JSON"
	}
	if _, ok := lineSeq(line); !ok {
		return "no seq"
	}
	if typ, _ := getString(line, "type"); typ == "" {
		return "no type"
	}
	return ""
}

func lineSeq(line []byte) (uint64, bool) {
	const pre = `{"seq":`
	if !bytes.HasPrefix(line, []byte(pre)) {
		return 0, false
	}
	var seq uint64
	i := len(pre)
	for ; i < len(line) && i < len(pre)+20 && line[i] >= '0' && line[i] <= '9'; i++ {
		seq = seq*10 + uint64(line[i]-'0')
	}
	return seq, i > len(pre) && seq > 0
}

// belayDoc is what a parsed journal keeps: its events (with placeholders
// where lines were dropped) and whether the file must be written again.
type belayDoc struct {
	events   []journal.Event
	renumber bool
	placed   int // journal.lost placeholders among events
}

// EventJournalLost is the placeholder a journal repair writes in place of
// an event it had to drop, so that every later event keeps its seq:
// watchers resume by seq (Last-Event-ID), and a seq must name the same
// event before and after a repair.
const EventJournalLost = "journal.lost"

// lostEvent is the placeholder for seq, timed like the event after it.
func lostEvent(seq uint64, ts time.Time) journal.Event {
	data, _ := json.Marshal(map[string]any{"seq": seq, "reason": "a damaged or repeated line was removed by belay repair; this placeholder keeps the seqs after it unchanged"})
	return journal.Event{Type: EventJournalLost, TS: ts, Data: data}
}

// keepSeqs is the change that says a repair wrote n placeholders (none
// when n is 0: a torn last line or a repeated seq leaves no seq to fill).
func keepSeqs(n int) []Change {
	if n == 0 {
		return nil
	}
	what := "1 journal.lost placeholder stands"
	if n > 1 {
		what = fmt.Sprintf("%d journal.lost placeholders stand", n)
	}
	return []Change{{Kind: ChangeKeepSeqs, Reason: what + " in for dropped lines, so every event after them keeps its seq"}}
}

// seqKeeper fills the seqs of dropped lines with placeholders as the
// surviving events are added in order.
type seqKeeper struct {
	last    uint64
	ids     map[string]bool
	dropped int // lines dropped so far: no gap can be wider
}

// admit decides about the event with seq (and idempotency id) that
// follows: it returns the placeholders to write before it and whether to
// keep it; why says why not.
func (k *seqKeeper) admit(seq uint64, id string, ts time.Time) (fill []journal.Event, keep bool, why string) {
	switch {
	case seq <= k.last:
		k.dropped++
		return nil, false, fmt.Sprintf("seq %d does not follow seq %d (a duplicated or spliced line)", seq, k.last)
	case seq-k.last-1 > uint64(k.dropped):
		k.dropped++
		return nil, false, fmt.Sprintf("seq %d jumps past the %d lines dropped before it (a spliced line)", seq, k.dropped-1)
	case id != "" && k.ids[id]:
		k.dropped++
		return nil, false, "a second event with idempotency id " + id
	}
	for s := k.last + 1; s < seq; s++ {
		fill = append(fill, lostEvent(s, ts))
	}
	k.last = seq
	if id != "" {
		if k.ids == nil {
			k.ids = map[string]bool{}
		}
		k.ids[id] = true
	}
	return fill, true, ""
}

func (belayCodec) build(d *Document) error {
	// Dropped lines, not a byte-order mark: removing the mark (d.data
	// no longer holds it) changes no line and no seq.
	dropped := 0
	for _, c := range d.Dropped {
		if c.Kind != ChangeDropBOM {
			dropped++
		}
	}
	bd := &belayDoc{renumber: dropped > 0}
	k := seqKeeper{dropped: dropped}
	kept := d.entries[:0]
	for _, e := range d.entries {
		seq, _ := lineSeq(e.raw)
		var ev journal.Event
		if err := json.Unmarshal(e.raw, &ev); err != nil {
			k.dropped++
			d.Dropped = append(d.Dropped, Change{Kind: ChangeDropLine, Line: e.line, Reason: "undecodable event: " + err.Error()})
			bd.renumber = true
			continue
		}
		fill, keep, why := k.admit(seq, ev.ID, ev.TS)
		if !keep {
			kind := ChangeDropLine
			if ev.ID != "" && strings.HasPrefix(why, "a second event") {
				kind = ChangeDropDuplicateID
			}
			d.Dropped = append(d.Dropped, Change{Kind: kind, Line: e.line, Reason: why})
			bd.renumber = true
			continue
		}
		if len(fill) > 0 {
			bd.renumber = true
			bd.placed += len(fill)
			bd.events = append(bd.events, fill...)
		}
		if string(ev.Data) == "null" {
			ev.Data = nil
		}
		bd.events = append(bd.events, ev)
		kept = append(kept, e)
	}
	d.entries = kept
	d.events = bd
	msgs, err := FromJournal(bd.events)
	if err != nil {
		return err
	}
	for i := range msgs {
		d.items = append(d.items, &msgs[i])
	}
	return nil
}

func (belayCodec) render(*Document, []*Message) []outEntry { return nil }

// bytes writes the journal: as read when nothing was dropped, otherwise
// every surviving event, with a placeholder for each dropped one, appended
// again through the journal package, which gives each event its old seq
// and a new checksum and keeps its time, run, epoch, idempotency id and
// data.
func (bd *belayDoc) bytes(d *Document) ([]byte, error) {
	if bd == nil {
		return encodeBelay(d.items)
	}
	if !bd.renumber {
		return d.data, nil
	}
	return writeJournal(bd.events)
}

// writeJournal appends evs to a new journal in a scratch directory and
// returns its bytes.
func writeJournal(evs []journal.Event) ([]byte, error) {
	dir, err := os.MkdirTemp("", "belay-transcript-")
	if err != nil {
		return nil, fmt.Errorf("transcript: %w", err)
	}
	defer os.RemoveAll(dir)
	j, err := journal.Open(dir, journal.Options{FS: vfs.NoSync(vfs.OS)})
	if err != nil {
		return nil, fmt.Errorf("transcript: %w", err)
	}
	const batch = 512
	for i := 0; i < len(evs); i += batch {
		chunk := make([]journal.Event, 0, batch)
		for _, e := range evs[i:min(i+batch, len(evs))] {
			e.Seq = 0
			if e.TS.IsZero() {
				e.TS = time.Unix(0, 0).UTC()
			}
			chunk = append(chunk, e)
		}
		if _, err := j.Append(context.Background(), journal.Buffered, chunk...); err != nil {
			_ = j.Close()
			return nil, fmt.Errorf("transcript: rewrite journal: %w", err)
		}
	}
	if err := j.Close(); err != nil {
		return nil, fmt.Errorf("transcript: %w", err)
	}
	return os.ReadFile(filepath.Join(dir, journal.FileName))
}

// FromJournal builds a session's conversation from its journal events:
//
//   - run.created: its data.input.prompt is a user message, placed where
//     the run starts (its first event after run.created other than a cancel
//     request or a queued phase: a lease, a phase change, its first delta,
//     its end), so that a follow-up queued while another run streamed
//     comes after that run's answer; prompts of runs that never started
//     end the conversation, in the order they were queued;
//   - run.text and run.thinking deltas are concatenated into the assistant
//     message of the run;
//   - run.tool_call adds a tool_call block (a call journaled without input
//     had an empty one: belay omits empty input); run.tool_result closes the
//     assistant message and adds a tool message, and text after it starts a
//     new assistant message;
//   - a whole final answer (run.answer parts of one sha256 covering its
//     size) replaces the text blocks of the run's last assistant message:
//     the answer as the provider took it when the turn ended (a chat
//     site's copy) supersedes the text it streamed;
//   - run.usage and the turn end's stop reason (run.updated) go to the
//     run's last assistant message; a run that failed, was stranded or was
//     cancelled before its turn ended gets stop reason "error" or "aborted";
//   - an attempt that starts again from scratch (run.updated with
//     data.attempt > 1 and not resume) discards what the failed attempt
//     streamed, so a resent turn is not doubled.
//
// Other events are ignored. The messages are not repaired: call
// RepairMessages before replaying them to a provider.
func FromJournal(events []journal.Event) ([]Message, error) {
	var b convBuilder
	for _, e := range events {
		if err := b.add(e); err != nil {
			return nil, err
		}
	}
	b.finish()
	return b.msgs, nil
}

// encodeBelay writes messages as a belay journal: a session.created event,
// then per user message a run (run.created with the prompt as input), the
// assistant's blocks as run.text, run.thinking and run.tool_call events,
// tool results as run.tool_result, usage as run.usage, the stop reason as a
// turn end and the run's end as run.updated complete. Reading it back with
// FromJournal gives the same conversation.
func encodeBelay(items []*Message) ([]byte, error) {
	var evs []journal.Event
	be := &belayEncoder{emit: func(e journal.Event) error {
		evs = append(evs, e)
		return nil
	}}
	if err := be.start(); err != nil {
		return nil, err
	}
	for _, m := range items {
		if err := be.message(m); err != nil {
			return nil, err
		}
	}
	if err := be.finish(); err != nil {
		return nil, err
	}
	return writeJournal(evs)
}

// belayEncoder turns messages into the events of a belay journal, one
// message at a time (encodeBelay describes them).
type belayEncoder struct {
	emit func(journal.Event) error
	// text, when set, writes the events of a text or thinking block
	// instead of emit (a streaming export: the block may be long).
	text func(e journal.Event, b *Block) error
	ts   time.Time
	run  string
	n    int
	// lastTime is the time of the last message given; seen says there
	// was one.
	lastTime time.Time
	seen     bool
}

func (be *belayEncoder) at(m *Message) time.Time { return be.atTime(m.Meta.Time) }

func (be *belayEncoder) atTime(t time.Time) time.Time {
	if !t.IsZero() {
		be.ts = t
	}
	return be.ts
}

func (be *belayEncoder) ev(m *Message, typ string, data any) error {
	return be.emit(journal.Event{TS: be.at(m), Type: typ, Run: be.run, Data: mustJSON(data)})
}

func (be *belayEncoder) start() error {
	be.ts = time.Unix(0, 0).UTC()
	return be.emit(journal.Event{TS: be.ts, Type: belay.EventSessionCreated, Data: json.RawMessage(`{"provider":"import"}`)})
}

// end closes the current run, if any, at the time of the message t is
// the time of.
func (be *belayEncoder) end(t time.Time) error {
	if be.run == "" {
		return nil
	}
	return be.emit(journal.Event{TS: be.atTime(t), Type: belay.EventRunUpdated, Run: be.run, Data: mustJSON(map[string]string{"phase": "complete"})})
}

func (be *belayEncoder) message(m *Message) error {
	be.lastTime, be.seen = m.Meta.Time, true
	if m.opaque() || m.Role == RoleSystem {
		return nil
	}
	if m.Role == RoleUser || be.run == "" {
		if err := be.end(m.Meta.Time); err != nil {
			return err
		}
		be.n++
		be.run = fmt.Sprintf("run_%026d", be.n)
		if err := be.ev(m, belay.EventRunCreated, map[string]any{"id": be.run, "provider": "import", "input": map[string]string{"prompt": m.Text()}}); err != nil {
			return err
		}
		if m.Role == RoleUser {
			return nil
		}
	}
	switch m.Role {
	case RoleAssistant:
		for i := range m.Blocks {
			b := &m.Blocks[i]
			var err error
			switch b.Type {
			case BlockText, BlockThinking:
				typ := belay.EventRunText
				if b.Type == BlockThinking {
					typ = belay.EventRunThinking
				}
				if be.text != nil {
					err = be.text(journal.Event{TS: be.at(m), Type: typ, Run: be.run}, b)
				} else {
					err = be.ev(m, typ, map[string]string{"text": b.Text})
				}
			case BlockToolCall:
				err = be.ev(m, belay.EventRunToolCall, map[string]any{"id": b.ID, "name": b.Name, "input": b.Input, "sideEffect": true})
			}
			if err != nil {
				return err
			}
		}
		if u := m.Meta.Usage; u != nil {
			if err := be.ev(m, belay.EventRunUsage, map[string]int{"input": u.Input, "output": u.Output}); err != nil {
				return err
			}
		}
		if m.Meta.StopReason != "" {
			return be.ev(m, belay.EventRunUpdated, map[string]any{"phase": "finishing", "data": map[string]string{"stopReason": m.Meta.StopReason}})
		}
	case RoleTool:
		res, _ := m.Result()
		return be.ev(m, belay.EventRunToolResult, map[string]any{"callId": res.CallID, "content": textOf(res.Content), "isError": res.IsError})
	}
	return nil
}

// finish closes the last run.
func (be *belayEncoder) finish() error {
	if !be.seen {
		return nil
	}
	return be.end(be.lastTime)
}
