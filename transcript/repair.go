package transcript

import (
	"sort"
	"strings"

	"github.com/belayhq/belay/apitype"
)

// SyntheticResultText is the content of a tool result that repair makes up
// for a call whose result is missing. Readers recognise it and mark the
// result synthetic again.
const SyntheticResultText = "[belay] missing tool result in session history; inserted synthetic error result for transcript repair."

// BlankUserText replaces the text of a user turn that was blank.
const BlankUserText = "(continue)"

// Change kinds, the stable "kind" values of a repair report.
const (
	ChangeDropLine        = "drop_line"         // file level: a line that is not valid JSON or not a valid entry
	ChangeDropFragment    = "drop_fragment"     // file level: the torn start of a line with a whole entry written onto it, which is kept
	ChangeSplitLine       = "split_line"        // file level: whole entries on one line (a line end lost), each made a line
	ChangeDropBOM         = "drop_bom"          // file level: a UTF-8 byte-order mark at the start of the file, removed
	ChangeDropToolCall    = "drop_tool_call"    // a tool call without input/arguments or without an id
	ChangeDropMessage     = "drop_message"      // an assistant message emptied by dropping its tool calls
	ChangeInsertResult    = "insert_result"     // a synthetic error result for a call that had none
	ChangeMoveResult      = "move_result"       // a result moved right after its call's assistant message
	ChangeDropDuplicate   = "drop_duplicate"    // a second result for a call that already has one
	ChangeDropOrphan      = "drop_orphan"       // a result that answers no call of its turn
	ChangeFillBlankUser   = "fill_blank_user"   // a blank user turn given placeholder text
	ChangeMergeMessage    = "merge_message"     // an assistant message merged into the one before it, which repair made adjacent
	ChangeRelink          = "relink"            // tree formats: an entry whose parent is missing, relinked to its nearest surviving ancestor
	ChangeKeepSeqs        = "keep_seqs"         // belay journal: dropped lines replaced by journal.lost placeholders
	ChangeRenameToolID    = "rename_tool_id"    // export: a tool id an earlier turn used, renamed with its results
	ChangeDropThinking    = "drop_thinking"     // export: a thinking block without a signature left out (anthropic, claude)
	ChangeDropDuplicateID = "drop_duplicate_id" // belay journal: a second event with the same idempotency id
)

// Change is one thing repair did (or, in a dry run, would do); it is wire
// vocabulary (an export's notes travel in an API trailer), so it is
// defined in package apitype.
type Change = apitype.TranscriptChange

// Report lists what a repair changed. An empty report means nothing needed
// fixing.
type Report struct {
	Changes []Change `json:"changes"`
}

// Changed reports whether repair changed anything.
func (r Report) Changed() bool { return len(r.Changes) > 0 }

// RepairMessages returns a repaired copy of msgs and what it changed; msgs
// itself is not modified. The rules (docs/transcripts.md):
//
//   - tool_call blocks without input (absent or null) or without an id are
//     dropped, and an assistant message left empty by that is dropped;
//   - tool calls are paired with results per turn frame (an assistant
//     message, or the parts of one response stored as several messages):
//     results are matched first-in first-out by id inside the frame, moved
//     right after the assistant message that holds the call, in call order;
//     a missing result gets a synthetic error result (marked Synthetic);
//     a second result for a call and results that answer no call are
//     dropped; a result found outside its frame is moved back only when
//     exactly one unanswered earlier call can own it;
//   - assistant turns that ended in an error or were aborted are left alone:
//     no calls dropped, no results made up for them;
//   - no assistant reply is ever deleted;
//   - a blank user turn gets the placeholder text "(continue)";
//   - it is idempotent: repairing the result again changes nothing.
//
// The runtime applies it before it replays a transcript to a provider.
func RepairMessages(msgs []Message) ([]Message, Report) {
	work := cloneMessages(msgs)
	items := make([]*Message, len(work))
	for i := range work {
		items[i] = &work[i]
	}
	out, changes := repairItems(items, false)
	res := make([]Message, len(out))
	for i, m := range out {
		res[i] = *m
	}
	return res, Report{Changes: changes}
}

// index positions of the items as read, for reports.
type repairer struct {
	// ext counts, by id, the unanswered calls before the items (streaming
	// repair of a region of a file): they count as owners of a displaced
	// result, which is then dropped rather than moved.
	ext     map[string]int
	items   []*Message
	pos     map[*Message]int // index as read
	changes []Change
}

func (r *repairer) note(m *Message, c Change) {
	if m != nil {
		if i, ok := r.pos[m]; ok {
			c.Message = &i
		}
		if m.src != nil && c.Line == 0 {
			c.Line = m.src.line
		}
	}
	r.changes = append(r.changes, c)
}

// repairItems repairs a conversation whose opaque items (Role "") stand for
// document entries that are not messages; they stay next to the item they
// followed. With alternate (a format whose turns must alternate), two
// assistant messages that repair left next to each other are merged.
func repairItems(items []*Message, alternate bool) ([]*Message, []Change) {
	return repairItemsExt(items, alternate, nil)
}

func repairItemsExt(items []*Message, alternate bool, ext map[string]int) ([]*Message, []Change) {
	r := &repairer{items: items, pos: make(map[*Message]int, len(items)), ext: ext}
	for i, m := range items {
		r.pos[m] = i
	}
	items = r.dropInvalidCalls(items)
	items = r.pair(items)
	if alternate {
		items = r.mergeAdjacent(items)
	}
	r.fillBlankUsers(items)
	// In file order (a message's changes in the order of the steps).
	sort.SliceStable(r.changes, func(i, j int) bool { return r.changes[i].Line < r.changes[j].Line })
	return items, r.changes
}

// mergeAdjacent merges an assistant message into the assistant message
// right before it when they were not next to each other as read (repair
// removed what was between them). Messages that were already adjacent
// are left as they were.
func (r *repairer) mergeAdjacent(items []*Message) []*Message {
	out := items[:0:0]
	var prev *Message // the last message kept, opaque items skipped
	for _, m := range items {
		if m.opaque() {
			out = append(out, m)
			continue
		}
		if prev != nil && prev.Role == RoleAssistant && m.Role == RoleAssistant && !prev.Errored() && !m.Errored() {
			pi, okP := r.pos[prev]
			mi, okM := r.pos[m]
			if okP && okM && !r.adjacentAsRead(pi, mi) {
				r.note(m, Change{Kind: ChangeMergeMessage, Reason: "assistant message merged into the one before it: repair removed what was between them, and the format does not allow two assistant messages in a row"})
				prev.Blocks = append(append([]Block(nil), prev.Blocks...), m.Blocks...)
				if prev.Meta.StopReason == "" || m.Meta.StopReason != "" {
					prev.Meta.StopReason = m.Meta.StopReason
				}
				continue
			}
		}
		out = append(out, m)
		prev = m
	}
	return out
}

// adjacentAsRead reports whether items i < j had only opaque items between
// them as read.
func (r *repairer) adjacentAsRead(i, j int) bool {
	if j < i {
		return false
	}
	for k := i + 1; k < j; k++ {
		if !r.items[k].opaque() {
			return false
		}
	}
	return true
}

func (r *repairer) dropInvalidCalls(items []*Message) []*Message {
	out := make([]*Message, 0, len(items))
	for _, m := range items {
		if m.Role != RoleAssistant || m.Errored() {
			out = append(out, m)
			continue
		}
		var kept []Block // made at the first call dropped: most messages keep all
		dropped := false
		for i, b := range m.Blocks {
			if b.Type == BlockToolCall {
				reason := ""
				switch {
				case inputMissing(b.Input):
					reason = "tool call has no input or arguments"
				case strings.TrimSpace(b.ID) == "":
					reason = "tool call has no id"
				}
				if reason != "" {
					r.note(m, Change{Kind: ChangeDropToolCall, CallID: b.ID, Tool: b.Name, Reason: reason})
					if !dropped {
						kept = append(make([]Block, 0, len(m.Blocks)-1), m.Blocks[:i]...)
						dropped = true
					}
					continue
				}
			}
			if dropped {
				kept = append(kept, b)
			}
		}
		if !dropped {
			out = append(out, m)
			continue
		}
		if len(kept) == 0 {
			r.note(m, Change{Kind: ChangeDropMessage, Reason: "assistant message held only tool calls without input"})
			continue
		}
		m.Blocks = kept
		out = append(out, m)
	}
	return out
}

// call is one tool call inside a frame.
type call struct {
	part    *Message
	id      string
	name    string
	errored bool
	result  *Message // the result paired with it
	order   int      // position of the call in the frame
}

// frame is one assistant turn: its parts (several when a format stores one
// response as several messages) and every item up to the next frame.
type frame struct {
	start, end int // item span [start, end)
	parts      []*Message
	calls      []*call
	dirty      bool
	extra      []*Message // results moved in from outside the span
	drop       map[*Message]bool
}

func sameResponse(f *frame, m *Message) bool {
	last := f.parts[len(f.parts)-1]
	return m.Meta.ResponseID != "" && m.Meta.ResponseID == last.Meta.ResponseID
}

// frames splits items into turn frames. Items before the first assistant
// message belong to no frame.
func frames(items []*Message) (first int, fs []*frame) {
	first = len(items)
	var cur *frame
	sawOther := false // a user/system message since the frame's last part
	for i, m := range items {
		switch m.Role {
		case RoleAssistant:
			if cur != nil && !sawOther && sameResponse(cur, m) {
				cur.parts = append(cur.parts, m)
				continue
			}
			if cur != nil {
				cur.end = i
			} else {
				first = i
			}
			cur = &frame{start: i, parts: []*Message{m}}
			fs = append(fs, cur)
			sawOther = false
		case RoleUser, RoleSystem:
			sawOther = true
		}
	}
	if cur != nil {
		cur.end = len(items)
	}
	return first, fs
}

func resultOf(m *Message) (Block, bool) {
	if m.Role != RoleTool {
		return Block{}, false
	}
	return m.Result()
}

func (r *repairer) pair(items []*Message) []*Message {
	first, fs := frames(items)
	drop := map[*Message]bool{}
	// Results before any assistant message answer nothing.
	for _, m := range items[:first] {
		if b, ok := resultOf(m); ok {
			r.note(m, Change{Kind: ChangeDropOrphan, CallID: b.CallID, Reason: "tool result before any assistant message"})
			drop[m] = true
		}
	}
	type orphan struct {
		m   *Message
		pos int
	}
	var orphans []orphan
	partPos := map[*Message]int{}
	for i, m := range items {
		if m.Role == RoleAssistant {
			partPos[m] = i
		}
	}
	unresolved := map[string][]*call{} // id -> unanswered calls, for displaced results
	framePos := map[*call]*frame{}
	for _, f := range fs {
		n := 0
		for _, p := range f.parts {
			for _, b := range p.Blocks {
				if b.Type == BlockToolCall {
					c := &call{part: p, id: b.ID, name: b.Name, errored: p.Errored(), order: n}
					n++
					f.calls = append(f.calls, c)
				}
			}
		}
		for i := f.start; i < f.end; i++ {
			m := items[i]
			b, ok := resultOf(m)
			if !ok {
				continue
			}
			// The owner is an unanswered call with the result's id in the
			// nearest part before the result (first-in first-out inside a
			// part); a result before every such part goes to the first one.
			var owner, answered *call
			for _, c := range f.calls {
				if c.id != b.CallID {
					continue
				}
				if c.result != nil {
					answered = c
					continue
				}
				switch {
				case owner == nil:
					owner = c
				case partPos[c.part] < i && partPos[c.part] > partPos[owner.part]:
					owner = c
				case partPos[owner.part] > i && partPos[c.part] < i:
					owner = c
				}
			}
			switch {
			case owner != nil:
				owner.result = m
			case answered != nil:
				r.note(m, Change{Kind: ChangeDropDuplicate, CallID: b.CallID, Tool: answered.name, Reason: "a second result for a call that already has one"})
				drop[m] = true
				f.dirty = true
			default:
				orphans = append(orphans, orphan{m, i})
				f.dirty = true
			}
		}
		for _, c := range f.calls {
			if c.result == nil && !c.errored {
				unresolved[c.id] = append(unresolved[c.id], c)
				framePos[c] = f
			}
		}
	}
	// A result outside its frame moves back only when exactly one earlier
	// unanswered call can own it.
	for _, o := range orphans {
		b, _ := resultOf(o.m)
		var owners []*call
		for _, c := range unresolved[b.CallID] {
			if c.result == nil && partPos[c.part] < o.pos {
				owners = append(owners, c)
			}
		}
		if len(owners) == 1 && r.ext[b.CallID] == 0 {
			c := owners[0]
			c.result = o.m
			f := framePos[c]
			f.extra = append(f.extra, o.m)
			f.dirty = true
			continue
		}
		reason := "tool result answers no call of its turn"
		if len(owners)+r.ext[b.CallID] > 1 {
			reason = "tool result could belong to more than one earlier unanswered call"
		}
		r.note(o.m, Change{Kind: ChangeDropOrphan, CallID: b.CallID, Reason: reason})
		drop[o.m] = true
	}
	moved := map[*Message]bool{}
	for _, f := range fs {
		for _, m := range f.extra {
			moved[m] = true
		}
	}
	// Decide which frames must be rewritten.
	for _, f := range fs {
		if !f.dirty && !frameValid(items, f) {
			f.dirty = true
		}
	}
	out := make([]*Message, 0, len(items)+8)
	for _, m := range items[:first] {
		if !drop[m] && !moved[m] {
			out = append(out, m)
		}
	}
	for _, f := range fs {
		if !f.dirty {
			out = append(out, items[f.start:f.end]...)
			continue
		}
		out = r.rewrite(out, items, f, drop, moved)
	}
	return out
}

// frameValid reports whether every call of f (but those of errored parts)
// has its result after its part, with no user or system message between.
func frameValid(items []*Message, f *frame) bool {
	at := map[*Message]int{}
	for i := f.start; i < f.end; i++ {
		at[items[i]] = i
	}
	for _, c := range f.calls {
		if c.result == nil {
			if c.errored {
				continue
			}
			return false
		}
		ri, ok := at[c.result]
		pi := at[c.part]
		if !ok || ri < pi {
			return false
		}
		for j := pi + 1; j < ri; j++ {
			if role := items[j].Role; role == RoleUser || role == RoleSystem {
				return false
			}
		}
	}
	return true
}

// rewrite appends frame f to out in canonical order: each part, the items
// that followed it that are not messages, then its calls' results in call
// order (synthetic ones for missing results), then the frame's other
// messages in their order.
func (r *repairer) rewrite(out, items []*Message, f *frame, drop, moved map[*Message]bool) []*Message {
	isPart := map[*Message]bool{}
	for _, p := range f.parts {
		isPart[p] = true
	}
	isResult := map[*Message]bool{}
	for _, c := range f.calls {
		if c.result != nil {
			isResult[c.result] = true
		}
	}
	// Opaque items stay attached to the item before them.
	attached := map[*Message][]*Message{}
	var lead []*Message // opaque items before anything else (cannot happen: a frame starts with a part)
	var remainder []*Message
	var prev *Message
	for i := f.start; i < f.end; i++ {
		m := items[i]
		if drop[m] || (moved[m] && !isResult[m]) {
			continue
		}
		if m.opaque() {
			if prev == nil {
				lead = append(lead, m)
			} else {
				attached[prev] = append(attached[prev], m)
			}
			continue
		}
		prev = m
		if !isPart[m] && !isResult[m] {
			remainder = append(remainder, m)
		}
	}
	out = append(out, lead...)
	// origPrev is each message's predecessor among the frame's kept
	// messages as read: a result whose predecessor changes has moved.
	origPrev := map[*Message]*Message{}
	var last *Message
	for i := f.start; i < f.end; i++ {
		m := items[i]
		if drop[m] || moved[m] || m.opaque() {
			continue
		}
		origPrev[m], last = last, m
	}
	segment := len(out)
	created := map[*Message]bool{}
	for _, p := range f.parts {
		out = append(out, p)
		out = append(out, attached[p]...)
		for _, c := range f.calls {
			if c.part != p {
				continue
			}
			switch {
			case c.result != nil:
				out = append(out, c.result)
				out = append(out, attached[c.result]...)
			case !c.errored:
				r.note(p, Change{Kind: ChangeInsertResult, CallID: c.id, Tool: c.name, Reason: "call had no result; inserted a synthetic error result"})
				syn := syntheticResult(p, c)
				created[syn] = true
				out = append(out, syn)
			}
		}
	}
	last = nil
	for _, m := range out[segment:] {
		if m.opaque() {
			continue
		}
		if isResult[m] && !created[m] {
			if p, ok := origPrev[m]; !ok || p != last {
				b, _ := resultOf(m)
				r.note(m, Change{Kind: ChangeMoveResult, CallID: b.CallID, Tool: b.Name, Reason: "result moved right after its call's assistant message"})
			}
		}
		last = m
	}
	for _, m := range remainder {
		out = append(out, m)
		out = append(out, attached[m]...)
	}
	return out
}

func syntheticResult(part *Message, c *call) *Message {
	return &Message{
		Role: RoleTool,
		Blocks: []Block{{
			Type: BlockToolResult, CallID: c.id, Name: c.name, IsError: true, Synthetic: true,
			Content: []Block{{Type: BlockText, Text: SyntheticResultText}},
		}},
		Meta:      Meta{Time: part.Meta.Time},
		Synthetic: true,
	}
}

func (r *repairer) fillBlankUsers(items []*Message) {
	for _, m := range items {
		if m.Role != RoleUser || !blank(m) {
			continue
		}
		r.note(m, Change{Kind: ChangeFillBlankUser, Reason: "blank user turn given placeholder text " + BlankUserText})
		m.Blocks = []Block{{Type: BlockText, Text: BlankUserText, Synthetic: true}}
	}
}

func blank(m *Message) bool {
	for _, b := range m.Blocks {
		if b.Type != BlockText || strings.TrimSpace(b.Text) != "" {
			return false
		}
	}
	return true
}

// ForProvider prepares a conversation for replay to a provider: it applies
// RepairMessages, then, in the copy that is sent only, removes the tool
// calls of errored or aborted assistant turns that have no result
// (providers reject unanswered calls, and repair makes up no results for
// such turns) and leaves out such a turn if nothing else is left of it. The
// stored transcript is never changed by this.
func ForProvider(msgs []Message) ([]Message, Report) {
	out, rep := RepairMessages(msgs)
	answered := map[int]map[string]bool{} // assistant index -> answered ids
	last := -1
	for i := range out {
		switch out[i].Role {
		case RoleAssistant:
			last = i
			answered[i] = map[string]bool{}
		case RoleTool:
			if b, ok := out[i].Result(); ok && last >= 0 {
				answered[last][b.CallID] = true
			}
		case RoleUser, RoleSystem:
			last = -1
		}
	}
	res := out[:0]
	for i, m := range out {
		if !m.Errored() {
			res = append(res, m)
			continue
		}
		var kept []Block
		for _, b := range m.Blocks {
			if b.Type == BlockToolCall && !answered[i][b.ID] {
				idx := i
				rep.Changes = append(rep.Changes, Change{Kind: ChangeDropToolCall, Message: &idx, CallID: b.ID, Tool: b.Name, Reason: "unanswered call of an errored or aborted turn (left out of the outbound copy only)"})
				continue
			}
			kept = append(kept, b)
		}
		if len(kept) == 0 {
			continue
		}
		m.Blocks = kept
		res = append(res, m)
	}
	return res, rep
}
