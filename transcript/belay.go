package transcript

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/belayhq/belay/journal"
)

// Event types FromJournal reads (runtime/events.go and the store's own).
const (
	evRunCreated = "run.created"
	evRunUpdated = "run.updated"
	evText       = "run.text"
	evThinking   = "run.thinking"
	evToolCall   = "run.tool_call"
	evToolResult = "run.tool_result"
	evUsage      = "run.usage"
	evSession    = "session.created"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

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
	const trailer = 18 // ,"crc":"XXXXXXXX"}
	if len(line) > journal.MaxRecordSize {
		return "line longer than the journal's record limit"
	}
	if len(line) < trailer+2 || line[0] != '{' {
		return "not a journal line"
	}
	body, tr := line[:len(line)-trailer], line[len(line)-trailer:]
	if !bytes.HasPrefix(tr, []byte(`,"crc":"`)) || tr[16] != '"' || tr[17] != '}' {
		return "missing checksum trailer"
	}
	want, err := strconv.ParseUint(string(tr[8:16]), 16, 32)
	if err != nil {
		return "malformed checksum"
	}
	if got := crc32.Checksum(body, castagnoli); uint64(got) != want {
		return fmt.Sprintf("checksum mismatch (stored %08x, computed %08x)", want, got)
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
	bd := &belayDoc{renumber: len(d.Dropped) > 0}
	k := seqKeeper{dropped: len(d.Dropped)}
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
	j, err := journal.Open(dir, journal.Options{FS: noSync{}})
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
//   - run.created: its data.input.prompt is a user message;
//   - run.text and run.thinking deltas are concatenated into the assistant
//     message of the run;
//   - run.tool_call adds a tool_call block (a call journaled without input
//     had an empty one: belay omits empty input); run.tool_result closes the
//     assistant message and adds a tool message, and text after it starts a
//     new assistant message;
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
	type runState struct {
		start     int  // index of the run's first message after the prompt
		asst      int  // index of the open assistant message, -1 if none
		lastAsst  int  // index of the run's last assistant message, -1 if none
		turnEnded bool // the turn end was journaled
		model     string
	}
	var msgs []Message
	runs := map[string]*runState{}
	get := func(e journal.Event) *runState {
		rs := runs[e.Run]
		if rs == nil {
			rs = &runState{start: len(msgs), asst: -1, lastAsst: -1}
			runs[e.Run] = rs
		}
		return rs
	}
	open := func(rs *runState, e journal.Event) *Message {
		if rs.asst < 0 {
			msgs = append(msgs, Message{Role: RoleAssistant, Meta: Meta{ID: e.Run, Model: rs.model, Time: e.TS}})
			rs.asst = len(msgs) - 1
			rs.lastAsst = rs.asst
		}
		return &msgs[rs.asst]
	}
	appendText := func(m *Message, t BlockType, s string) {
		if n := len(m.Blocks); n > 0 && m.Blocks[n-1].Type == t {
			m.Blocks[n-1].Text += s
			return
		}
		m.Blocks = append(m.Blocks, Block{Type: t, Text: s})
	}
	for _, e := range events {
		switch e.Type {
		case evRunCreated:
			var p struct {
				Model string `json:"model"`
				Input struct {
					Prompt string `json:"prompt"`
				} `json:"input"`
			}
			if err := json.Unmarshal(e.Data, &p); err != nil {
				return nil, fmt.Errorf("transcript: event %d (%s): %w", e.Seq, e.Type, err)
			}
			msgs = append(msgs, Message{Role: RoleUser, Blocks: []Block{{Type: BlockText, Text: p.Input.Prompt}}, Meta: Meta{ID: e.Run, Time: e.TS}})
			runs[e.Run] = &runState{start: len(msgs), asst: -1, lastAsst: -1, model: p.Model}
		case evText, evThinking:
			var p struct {
				Text string `json:"text"`
			}
			if err := json.Unmarshal(e.Data, &p); err != nil {
				return nil, fmt.Errorf("transcript: event %d (%s): %w", e.Seq, e.Type, err)
			}
			t := BlockText
			if e.Type == evThinking {
				t = BlockThinking
			}
			appendText(open(get(e), e), t, p.Text)
		case evToolCall:
			var p struct {
				ID    string          `json:"id"`
				Name  string          `json:"name"`
				Input json.RawMessage `json:"input"`
			}
			if err := json.Unmarshal(e.Data, &p); err != nil {
				return nil, fmt.Errorf("transcript: event %d (%s): %w", e.Seq, e.Type, err)
			}
			if len(p.Input) == 0 {
				p.Input = json.RawMessage(`{}`)
			}
			m := open(get(e), e)
			m.Blocks = append(m.Blocks, Block{Type: BlockToolCall, ID: p.ID, Name: p.Name, Input: p.Input})
		case evToolResult:
			var p struct {
				CallID  string `json:"callId"`
				Content string `json:"content"`
				IsError bool   `json:"isError"`
			}
			if err := json.Unmarshal(e.Data, &p); err != nil {
				return nil, fmt.Errorf("transcript: event %d (%s): %w", e.Seq, e.Type, err)
			}
			rs := get(e)
			rs.asst = -1
			var content []Block
			if p.Content != "" {
				content = []Block{{Type: BlockText, Text: p.Content}}
			}
			msgs = append(msgs, Message{Role: RoleTool, Meta: Meta{ID: e.Run, Time: e.TS}, Blocks: []Block{{Type: BlockToolResult, CallID: p.CallID, IsError: p.IsError, Content: content}}})
		case evUsage:
			var p struct {
				Input  int `json:"input"`
				Output int `json:"output"`
			}
			if err := json.Unmarshal(e.Data, &p); err != nil {
				return nil, fmt.Errorf("transcript: event %d (%s): %w", e.Seq, e.Type, err)
			}
			rs := get(e)
			if rs.lastAsst >= 0 {
				msgs[rs.lastAsst].Meta.Usage = &Usage{Input: p.Input, Output: p.Output}
			}
		case evRunUpdated:
			var p struct {
				Phase string `json:"phase"`
				Data  struct {
					Attempt    int    `json:"attempt"`
					Resume     bool   `json:"resume"`
					StopReason string `json:"stopReason"`
				} `json:"data"`
			}
			if err := json.Unmarshal(e.Data, &p); err != nil {
				return nil, fmt.Errorf("transcript: event %d (%s): %w", e.Seq, e.Type, err)
			}
			rs := runs[e.Run]
			if rs == nil {
				continue
			}
			switch {
			case p.Data.Attempt > 1 && !p.Data.Resume:
				// Started again from scratch: drop what the run streamed so far.
				msgs = msgs[:rs.start]
				rs.asst, rs.lastAsst, rs.turnEnded = -1, -1, false
			case p.Data.StopReason != "":
				rs.turnEnded = true
				if rs.lastAsst >= 0 {
					msgs[rs.lastAsst].Meta.StopReason = p.Data.StopReason
				}
			case p.Phase == "failed" || p.Phase == "stranded" || p.Phase == "cancelled":
				if rs.lastAsst >= 0 && !rs.turnEnded {
					reason := "error"
					if p.Phase == "cancelled" {
						reason = "aborted"
					}
					msgs[rs.lastAsst].Meta.StopReason = reason
				}
			}
		}
	}
	return msgs, nil
}

// encodeBelay writes messages as a belay journal: a session.created event,
// then per user message a run (run.created with the prompt as input), the
// assistant's blocks as run.text, run.thinking and run.tool_call events,
// tool results as run.tool_result, usage as run.usage, the stop reason as a
// turn end and the run's end as run.updated complete. Reading it back with
// FromJournal gives the same conversation.
func encodeBelay(items []*Message) ([]byte, error) {
	var evs []journal.Event
	ts := time.Unix(0, 0).UTC()
	at := func(m *Message) time.Time {
		if !m.Meta.Time.IsZero() {
			ts = m.Meta.Time
		}
		return ts
	}
	ev := func(m *Message, typ, run string, data any) {
		evs = append(evs, journal.Event{TS: at(m), Type: typ, Run: run, Data: mustJSON(data)})
	}
	evs = append(evs, journal.Event{TS: ts, Type: evSession, Data: json.RawMessage(`{"provider":"import"}`)})
	run, n := "", 0
	end := func(m *Message) {
		if run != "" {
			ev(m, evRunUpdated, run, map[string]string{"phase": "complete"})
		}
	}
	for _, m := range items {
		if m.opaque() || m.Role == RoleSystem {
			continue
		}
		if m.Role == RoleUser || run == "" {
			end(m)
			n++
			run = fmt.Sprintf("run_%026d", n)
			ev(m, evRunCreated, run, map[string]any{"id": run, "provider": "import", "input": map[string]string{"prompt": m.Text()}})
			if m.Role == RoleUser {
				continue
			}
		}
		switch m.Role {
		case RoleAssistant:
			for _, b := range m.Blocks {
				switch b.Type {
				case BlockText:
					ev(m, evText, run, map[string]string{"text": b.Text})
				case BlockThinking:
					ev(m, evThinking, run, map[string]string{"text": b.Text})
				case BlockToolCall:
					ev(m, evToolCall, run, map[string]any{"id": b.ID, "name": b.Name, "input": b.Input, "sideEffect": true})
				}
			}
			if u := m.Meta.Usage; u != nil {
				ev(m, evUsage, run, map[string]int{"input": u.Input, "output": u.Output})
			}
			if m.Meta.StopReason != "" {
				ev(m, evRunUpdated, run, map[string]any{"phase": "finishing", "data": map[string]string{"stopReason": m.Meta.StopReason}})
			}
		case RoleTool:
			res, _ := m.Result()
			ev(m, evToolResult, run, map[string]any{"callId": res.CallID, "content": textOf(res.Content), "isError": res.IsError})
		}
	}
	if len(items) > 0 {
		end(items[len(items)-1])
	}
	return writeJournal(evs)
}
