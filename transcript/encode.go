package transcript

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/journal"
)

// Encode writes msgs in format f from scratch: a JSON array for openai and
// anthropic, a session file (with a header) for pi, session lines for
// claude, and a journal for belay (see encodeBelay). Ids the format needs
// (pi entry ids, Claude Code uuids) are derived from the content, so the
// same messages always give the same bytes.
func Encode(w io.Writer, f Format, msgs []Message) error {
	return encode(w, f, msgs, EncodeOptions{})
}

// EncodeOptions say what a format needs that the messages do not hold.
type EncodeOptions struct {
	// SessionID names the session (Claude Code lines carry a sessionId, a
	// UUID derived from it; pi's header id likewise). Empty: derived from
	// the messages.
	SessionID string
	// Cwd is the working directory Claude Code and pi record ("/" when
	// empty).
	Cwd string
}

// claudeExportVersion is the version an exported Claude Code line
// records: not a Claude Code release, since Claude Code did not write it.
const claudeExportVersion = "0.0.0-belay"

func encode(w io.Writer, f Format, msgs []Message, opts EncodeOptions) error {
	work := cloneMessages(msgs)
	var first *Message
	if len(work) > 0 {
		first = &work[0]
	}
	d, err := scratchDocument(f, first, opts)
	if err != nil {
		return err
	}
	for i := range work {
		work[i].src, work[i].fp = nil, 0
		for j := range work[i].Blocks {
			work[i].Blocks[j].raw, work[i].Blocks[j].fp = nil, 0
		}
		d.items = append(d.items, &work[i])
	}
	if d.array && len(work) == 0 {
		d.prefix, d.suffix = []byte("["), []byte("]\n")
	}
	b, err := d.Bytes()
	if err != nil {
		return err
	}
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("transcript: %w", err)
	}
	return nil
}

// scratchDocument is an empty document of format f that messages are
// written to from scratch; first is the conversation's first message (nil
// when there is none), which pi's header and Claude Code's session id
// may be derived from.
func scratchDocument(f Format, first *Message, opts EncodeOptions) (*Document, error) {
	c, err := codecFor(f)
	if err != nil {
		return nil, err
	}
	d := &Document{Format: f, codec: c, term: "\n"}
	switch f {
	case FormatOpenAI, FormatAnthropic:
		d.array = true
		d.prefix, d.sep, d.suffix = []byte("[\n"), []byte(",\n"), []byte("\n]\n")
	case FormatPi:
		d.tree, d.parentK, d.version = true, "parentId", 3
		ts := "1970-01-01T00:00:00.000Z"
		if first != nil && !first.Meta.Time.IsZero() {
			ts = first.Meta.Time.UTC().Format("2006-01-02T15:04:05.000Z")
		}
		id := newUUID(map[string]bool{}, "belay/session/"+ts)
		d.header = &entry{line: 1, raw: []byte(`{"type":"session","version":3,"id":"` + id + `","timestamp":"` + ts + `","cwd":""}`), term: "\n"}
		d.entries = []*entry{d.header}
	case FormatClaude:
		d.tree, d.parentK = true, "parentUuid"
		seed := opts.SessionID
		if seed == "" && first != nil {
			seed = first.Meta.Time.UTC().Format(time.RFC3339Nano) + "/" + first.Text()
		}
		cwd := opts.Cwd
		if cwd == "" {
			cwd = "/"
		}
		env := []byte(`{"isSidechain":false,"userType":"external"}`)
		env = setField(env, "cwd", mustJSON(cwd))
		env = setField(env, "sessionId", mustJSON(newUUID(map[string]bool{}, "belay/session/"+seed)))
		env = setField(env, "version", mustJSON(claudeExportVersion))
		d.envelope = env
	}
	return d, nil
}

// Export writes the conversation of a session's journal events in format
// f, repaired (RepairMessages) so that it is valid for the format. It is
// `belay sessions export ID --format F`.
func Export(w io.Writer, events []journal.Event, f Format) error {
	_, err := ExportReport(w, events, f)
	return err
}

// ExportReport is Export that also returns what the export changed to make
// the conversation valid for the format: repair (RepairMessages), tool ids
// made unique across turns (rename_tool_id), and for anthropic and claude
// thinking blocks without a signature left out (drop_thinking: the API
// rejects them).
func ExportReport(w io.Writer, events []journal.Event, f Format) (Report, error) {
	msgs, err := FromJournal(events)
	if err != nil {
		return Report{}, err
	}
	var rep Report
	if f != FormatBelay {
		msgs, rep = RepairMessages(msgs)
		rep.Changes = append(rep.Changes, (&toolIDs{}).unique(msgs, 0)...)
		if f == FormatAnthropic || f == FormatClaude {
			msgs, rep.Changes = dropUnsigned(msgs, rep.Changes, 0)
		}
	}
	opts := EncodeOptions{}
	for _, e := range events {
		if e.Type == belay.EventSessionCreated {
			opts = sessionOptions(e.Data)
			break
		}
	}
	return rep, encode(w, f, msgs, opts)
}

// sessionOptions reads what an export needs from the data of a session's
// session.created event: its id and working directory.
func sessionOptions(data []byte) EncodeOptions {
	var opts EncodeOptions
	var p struct {
		ID      string         `json:"id"`
		Options map[string]any `json:"options"`
	}
	if json.Unmarshal(data, &p) == nil {
		opts.SessionID = p.ID
		for _, k := range []string{"cwd", "workdir", "dir"} {
			if s, ok := p.Options[k].(string); ok && s != "" {
				opts.Cwd = s
				break
			}
		}
	}
	return opts
}

// toolIDs renames tool call ids that an earlier turn already used
// (providers that number calls per turn reuse exec_0, call_1 …), with
// their results, so that every id is unique in the exported transcript.
// A streaming export gives it the conversation a stretch at a time.
type toolIDs struct {
	used     map[string]bool
	frame    map[string][]string // id as read -> new ids, in call order
	lastResp string
}

// unique renames in msgs, which must be repaired (each call's results
// follow it in its turn); base is the index of msgs[0] in the whole
// conversation, for the changes it reports.
func (t *toolIDs) unique(msgs []Message, base int) []Change {
	var changes []Change
	if t.used == nil {
		t.used = map[string]bool{}
	}
	for i := range msgs {
		m := &msgs[i]
		switch m.Role {
		case RoleAssistant:
			if m.Meta.ResponseID == "" || m.Meta.ResponseID != t.lastResp || t.frame == nil {
				t.frame = map[string][]string{}
			}
			t.lastResp = m.Meta.ResponseID
			for k := range m.Blocks {
				b := &m.Blocks[k]
				if b.Type != BlockToolCall {
					continue
				}
				orig, id := b.ID, b.ID
				if t.used[id] {
					id = freshID(orig, t.used)
					idx := base + i
					changes = append(changes, Change{Kind: ChangeRenameToolID, Message: &idx, CallID: orig, Tool: b.Name,
						Reason: "tool id used by an earlier call; renamed " + id + " so that ids are unique"})
					b.ID = id
				}
				t.used[id] = true
				t.frame[orig] = append(t.frame[orig], id)
			}
		case RoleTool:
			for k := range m.Blocks {
				b := &m.Blocks[k]
				if b.Type != BlockToolResult || t.frame == nil {
					continue
				}
				if q := t.frame[b.CallID]; len(q) > 0 {
					b.CallID, t.frame[b.CallID] = q[0], q[1:]
				}
			}
		case RoleUser, RoleSystem:
			t.lastResp = ""
		}
	}
	return changes
}

// freshID makes an id from id that is not used, within the limits
// Anthropic sets for tool ids ([A-Za-z0-9_-], at most 64 characters).
func freshID(id string, used map[string]bool) string {
	for n := 2; ; n++ {
		suffix := "_" + strconv.Itoa(n)
		base := id
		if len(base)+len(suffix) > 64 {
			base = base[:64-len(suffix)]
		}
		if c := base + suffix; !used[c] {
			return c
		}
	}
}

// dropUnsigned leaves out thinking blocks that have no signature (the
// Anthropic API rejects them), and an assistant message left with nothing.
// base is the index of msgs[0] in the whole conversation.
func dropUnsigned(msgs []Message, changes []Change, base int) ([]Message, []Change) {
	out := msgs[:0:0]
	for i, m := range msgs {
		if m.Role != RoleAssistant {
			out = append(out, m)
			continue
		}
		var kept []Block
		for _, b := range m.Blocks {
			if b.Type == BlockThinking && !b.Redacted && b.Signature == "" {
				idx := base + i
				changes = append(changes, Change{Kind: ChangeDropThinking, Message: &idx,
					Reason: "thinking block without a signature left out: the API accepts only thinking it signed"})
				continue
			}
			kept = append(kept, b)
		}
		if len(kept) == 0 && len(m.Blocks) > 0 {
			continue
		}
		m.Blocks = kept
		out = append(out, m)
	}
	return out, changes
}
