package transcript

import (
	"strings"
)

// The second pass of the streaming repair: the path a turn frame at a time.

// fitem is one item of the frame being read: a light message and where it
// came from.
type fitem struct {
	m    *Message
	line int
	off  int64
	end  int64
	part int // which message of its line
}

// frameReader reads the path a turn frame at a time.
type frameReader struct {
	s           *streamRepair
	cur         []fitem // the open frame (or the items before the first assistant)
	started     bool    // cur holds a frame (it starts with an assistant part)
	lastResp    string
	sawOther    bool
	held        []fitem // the last frame, not checked yet
	heldStarted bool
	pending     *region // the region being grown
}

// check is the second pass.
func (s *streamRepair) check() error {
	fr := &frameReader{s: s}
	branch := func(idx int) bool {
		if s.format != FormatClaude || s.flags[idx]&(fResult|fBad) != fResult || s.path.get(idx) {
			return false
		}
		p := int(s.parent[idx])
		return p >= 0 && s.path.get(p) && !s.resCh.get(p) && s.flags[p]&fSide == s.flags[idx]&fSide
	}
	err := s.eachChunk(func(c *lineChunk) {
		c.msgs = c.msgs[:0]
		for i, rec := range c.recs {
			idx := c.first + i
			var msgs []*Message
			if !rec.tooLong && s.flags[idx]&fBad == 0 && (s.path.get(idx) || branch(idx)) {
				msgs = lightMessages(s.format, c.line(i))
			}
			c.msgs = append(c.msgs, msgs)
		}
	}, func(c *lineChunk) error {
		for i, rec := range c.recs {
			idx := c.first + i
			if rec.tooLong || s.flags[idx]&fBad != 0 {
				continue
			}
			if _, ok := s.targets[idx]; ok {
				v, _ := getString(c.line(i), s.idKey)
				s.targets[idx] = v
			}
			if s.path.get(idx) {
				fr.add(idx, rec.off, rec.fend, c.msgs[i])
			} else if branch(idx) {
				if err := fr.attach(idx, int(s.parent[idx]), rec.off, rec.fend, c.msgs[i]); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	fr.close(true)
	return nil
}

func (fr *frameReader) add(idx int, off, end int64, msgs []*Message) {
	for k, m := range msgs {
		it := fitem{m: m, line: idx, off: off, end: end, part: k}
		switch m.Role {
		case RoleAssistant:
			same := fr.started && !fr.sawOther && m.Meta.ResponseID != "" && m.Meta.ResponseID == fr.lastResp
			if !same {
				fr.close(false)
				fr.started = true
			}
			fr.lastResp, fr.sawOther = m.Meta.ResponseID, false
		case RoleUser, RoleSystem:
			fr.sawOther = true
		}
		fr.cur = append(fr.cur, it)
	}
}

// attach puts a result line that hangs on its call's line right after
// that line (and the result lines attached to it before).
func (fr *frameReader) attach(idx, p int, off, end int64, msgs []*Message) error {
	at := -1
	for i, it := range fr.cur {
		if it.line == p {
			at = i
		}
	}
	if at < 0 {
		return errNoStream // the result line came after its call's frame
	}
	call := fr.cur[at].m
	if call.Role != RoleAssistant {
		return nil
	}
	calls := map[string]bool{}
	for _, b := range call.ToolCalls() {
		calls[b.ID] = true
	}
	for _, m := range msgs {
		b, ok := resultOf(m)
		if !ok || !calls[b.CallID] {
			return nil
		}
	}
	// After the call's line and the lines attached to it already.
	at++
	for at < len(fr.cur) && fr.s.flags[fr.cur[at].line]&fResult != 0 && !fr.s.path.get(fr.cur[at].line) {
		at++
	}
	ins := make([]fitem, len(msgs))
	for k, m := range msgs {
		ins[k] = fitem{m: m, line: idx, off: off, end: end, part: k}
	}
	fr.cur = append(fr.cur[:at], append(ins, fr.cur[at:]...)...)
	return nil
}

// close ends the open frame. It is held until the next frame is known:
// a frame whose first part repair drops (every block a call without input
// or id) merges into the frame before it, and the two are checked as one.
func (fr *frameReader) close(last bool) {
	if len(fr.cur) > 0 {
		if fr.started && len(fr.held) > 0 && allCallsMalformed(fr.cur[0].m) {
			fr.held = append(fr.held, fr.cur...)
		} else {
			fr.finish(fr.held, fr.heldStarted)
			fr.held = append(fr.held[:0:0], fr.cur...)
			fr.heldStarted = fr.started
		}
	}
	fr.cur = fr.cur[:0]
	fr.started, fr.sawOther, fr.lastResp = false, false, ""
	if last {
		fr.finish(fr.held, fr.heldStarted)
		fr.held = nil
		if fr.pending != nil {
			fr.s.regions = append(fr.s.regions, fr.pending)
			fr.pending = nil
		}
	}
}

// finish checks a frame. A frame that needs a change joins the region
// being grown (or starts one); a clean one ends it.
func (fr *frameReader) finish(items []fitem, started bool) {
	s := fr.s
	if len(items) == 0 {
		return
	}
	var changes []Change
	if !simpleClean(items, started) {
		light := make([]*Message, len(items))
		for i, it := range items {
			light[i] = it.m
		}
		_, changes = repairItems(light, false)
	}
	span := region{first: items[0].line, last: items[0].line, off: items[0].off, end: items[0].end, itemBase: s.items, next: -1}
	for _, it := range items {
		span.first, span.last = min(span.first, it.line), max(span.last, it.line)
		span.off, span.end = min(span.off, it.off), max(span.end, it.end)
	}
	switch {
	case len(changes) > 0 && fr.pending != nil:
		fr.pending.last, fr.pending.end = span.last, span.end
	case len(changes) > 0:
		r := span
		fr.pending = &r
	case fr.pending != nil:
		fr.pending.next = span.first
		s.regions = append(s.regions, fr.pending)
		fr.pending = nil
	}
	if len(changes) > 0 {
		fr.settle(changes)
	}
	s.items += len(items)
}

// simpleClean reports, without running repair, whether a frame is in the
// shape repair leaves alone: each assistant part's calls (with ids and
// input, ids unique in the frame) answered right after it in call order,
// then messages that are neither results nor blank user turns. Other
// frames are checked by repair itself.
func simpleClean(items []fitem, started bool) bool {
	i, n := 0, len(items)
	skip := func() {
		for i < n && items[i].m.opaque() {
			i++
		}
	}
	if started {
		var seen map[string]bool
		for skip(); i < n && items[i].m.Role == RoleAssistant; skip() {
			p := items[i].m
			if p.Errored() {
				return false
			}
			i++
			for _, b := range p.Blocks {
				if b.Type != BlockToolCall {
					continue
				}
				if inputMissing(b.Input) || strings.TrimSpace(b.ID) == "" || seen[b.ID] {
					return false
				}
				if seen == nil {
					seen = map[string]bool{}
				}
				seen[b.ID] = true
				skip()
				if i >= n || items[i].m.Role != RoleTool {
					return false
				}
				if r, ok := items[i].m.Result(); !ok || r.CallID != b.ID {
					return false
				}
				i++
			}
		}
	}
	for ; i < n; i++ {
		switch m := items[i].m; m.Role {
		case RoleTool, RoleAssistant:
			return false
		case RoleUser:
			if blank(m) {
				return false
			}
		}
	}
	return true
}

// settle follows, across frames, what the light repair of a dirty frame
// found: a result that answers no call of its frame goes back to the one
// unanswered call of an earlier frame with its id, if there is exactly
// one (the frames between are then repaired as one region), and the
// frame's unanswered calls may own later displaced results.
func (fr *frameReader) settle(changes []Change) {
	s := fr.s
	for _, c := range changes {
		if c.Kind != ChangeDropOrphan || !strings.HasPrefix(c.Reason, "tool result answers no call") {
			continue
		}
		var owners []*openCall
		for _, o := range s.openBy[c.CallID] {
			if o.alive {
				owners = append(owners, o)
			}
		}
		if len(owners) != 1 {
			if fr.pending.orphans == nil {
				fr.pending.orphans = map[string]bool{}
			}
			fr.pending.orphans[c.CallID] = true
			continue
		}
		owners[0].alive = false
		if r := owners[0].reg.root(); r != fr.pending {
			at := len(s.regions) - 1
			for at >= 0 && s.regions[at] != r {
				at--
			}
			for _, m := range append(s.regions[at+1:], fr.pending) {
				m.fwd = r
				for id := range m.orphans {
					if r.orphans == nil {
						r.orphans = map[string]bool{}
					}
					r.orphans[id] = true
				}
			}
			r.last, r.end, r.next = fr.pending.last, fr.pending.end, -1
			s.regions = s.regions[:at]
			fr.pending = r
		}
	}
	for _, c := range changes {
		if c.Kind == ChangeInsertResult {
			o := &openCall{id: c.CallID, reg: fr.pending, alive: true}
			s.opens = append(s.opens, o)
			s.openBy[c.CallID] = append(s.openBy[c.CallID], o)
		}
	}
}

// settleExt gives each region the count of unanswered calls before it for
// the ids of its displaced results.
func (s *streamRepair) settleExt() {
	counts := map[string]int{}
	k := 0
	for _, r := range s.regions {
		if len(r.orphans) > 0 {
			r.ext = map[string]int{}
			for id := range r.orphans {
				r.ext[id] = counts[id]
			}
		}
		for ; k < len(s.opens) && s.opens[k].reg.root() == r; k++ {
			if s.opens[k].alive {
				counts[s.opens[k].id]++
			}
		}
	}
}

// allCallsMalformed reports whether repair would drop every block of an
// assistant message (all are tool calls without input or id).
func allCallsMalformed(m *Message) bool {
	if m.Role != RoleAssistant || m.Errored() || len(m.Blocks) == 0 {
		return false
	}
	for _, b := range m.Blocks {
		if b.Type != BlockToolCall || !(inputMissing(b.Input) || strings.TrimSpace(b.ID) == "") {
			return false
		}
	}
	return true
}
