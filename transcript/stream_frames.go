package transcript

import (
	"fmt"
	"hash/maphash"
	"slices"
	"strings"
)

// The second pass of the streaming repair: the path a turn frame at a time.

// fitem is one item of the frame being read: a light message and where it
// came from.
type fitem struct {
	p    lightPart
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
	lastResp    uint64  // hash of the last assistant part's response id
	lastHasResp bool    // that id was not ""
	sawOther    bool
	held        []fitem // the last frame, not checked yet
	heldStarted bool
	pending     *region // the region being grown
	pathMark    uint8   // the mark of the path it reads: mPath, or mSpec
}

// check is the second pass.
func (s *streamRepair) check() error {
	fr := &frameReader{s: s, pathMark: mPath}
	branch := s.branch
	// The line table is read by the consumer only (reading it moves its
	// blocks), so the lines are read there too: this pass runs only when
	// the path read during the scan was not the path.
	err := s.eachChunk(func(*lineChunk) {}, func(c *lineChunk) error {
		for i, rec := range c.recs {
			idx := c.first + i
			if s.lt.flags(idx)&fBad != 0 {
				continue
			}
			_, target := s.targets[idx]
			onPath := s.lt.onPath(idx)
			if !target && !onPath && !branch(idx) {
				continue
			}
			cut := s.cut[idx]
			off := rec.off + int64(cut)
			line, _, err := s.entryLine(c.line(i), off, rec.fend, cut, rec.ol, false)
			if err != nil {
				return err
			}
			if target {
				v, _ := getString(line, s.idKey)
				s.targets[idx] = v
			}
			if !onPath && !branch(idx) {
				continue
			}
			c.light.read(s.format, line)
			parts := c.light.parts(s.format, s.seed, c.parts[:0])
			c.parts = parts
			if onPath {
				fr.add(idx, off, rec.fend, parts)
			} else {
				if err := fr.attach(idx, int(s.lt.parent(idx)), off, rec.fend, parts); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := fr.close(true); err != nil {
		return err
	}
	return s.lt.err
}

// branch reports whether line idx is a Claude Code result line off the
// path that hangs on its call's line, which is on the path and whose
// child on the path is not a result line: the check reads it right after
// that line.
func (s *streamRepair) branch(idx int) bool {
	t := s.lt
	if s.format != FormatClaude || t.flags(idx)&(fResult|fBad) != fResult || t.onPath(idx) {
		return false
	}
	p := int(t.parent(idx))
	return p >= 0 && t.marks(p)&(mPath|mResCh) == mPath && t.flags(p)&fSide == t.flags(idx)&fSide
}

func (fr *frameReader) add(idx int, off, end int64, parts []lightPart) error {
	for k, p := range parts {
		if err := fr.addItem(fitem{p: p, line: idx, off: off, end: end, part: k}); err != nil {
			return err
		}
	}
	return nil
}

func (fr *frameReader) addItem(it fitem) error {
	p := &it.p
	switch p.role {
	case RoleAssistant:
		same := fr.started && !fr.sawOther && p.hasResp && fr.lastHasResp && p.resp == fr.lastResp
		if !same {
			if err := fr.close(false); err != nil {
				return err
			}
			fr.started = true
		}
		fr.lastResp, fr.lastHasResp, fr.sawOther = p.resp, p.hasResp, false
	case RoleUser, RoleSystem:
		fr.sawOther = true
	}
	fr.cur = append(fr.cur, it)
	return nil
}

// attach puts a result line that hangs on its call's line right after
// that line (and the result lines attached to it before).
func (fr *frameReader) attach(idx, p int, off, end int64, parts []lightPart) error {
	at := -1
	for i, it := range fr.cur {
		if it.line == p {
			at = i
		}
	}
	if at < 0 {
		return errNoStream // the result line came after its call's frame
	}
	call := fr.cur[at]
	if call.p.role != RoleAssistant {
		return nil
	}
	calls, err := fr.callIDs(call)
	if err != nil {
		return err
	}
	for _, m := range parts {
		if !m.result || !slices.Contains(calls, m.resultID) {
			return nil
		}
	}
	// After the call's line and the lines attached to it already.
	at++
	for at < len(fr.cur) && fr.s.lt.flags(fr.cur[at].line)&fResult != 0 && fr.s.lt.marks(fr.cur[at].line)&fr.pathMark == 0 {
		at++
	}
	ins := make([]fitem, len(parts))
	for k, m := range parts {
		ins[k] = fitem{p: m, line: idx, off: off, end: end, part: k}
	}
	fr.cur = append(fr.cur[:at], append(ins, fr.cur[at:]...)...)
	return nil
}

// callIDs returns the hashes of the ids of an assistant item's calls.
func (fr *frameReader) callIDs(it fitem) ([]uint64, error) {
	if !it.p.over {
		out := make([]uint64, it.p.ncalls)
		for i := range out {
			out[i] = it.p.calls[i].id
		}
		return out, nil
	}
	m, err := fr.s.message(it)
	if err != nil {
		return nil, err
	}
	var out []uint64
	for _, b := range m.ToolCalls() {
		out = append(out, maphash.String(fr.s.seed, b.ID))
	}
	return out, nil
}

// message reads an item's message again, whole (as lightMessages does).
func (s *streamRepair) message(it fitem) (*Message, error) {
	msgs, err := s.lineMessages(it.off, it.end)
	if err != nil {
		return nil, err
	}
	if it.part >= len(msgs) {
		return nil, fmt.Errorf("transcript: line %d changed while it was repaired", it.line+1)
	}
	return msgs[it.part], nil
}

// lineMessages reads the line at [off, end) (its terminator included)
// again and returns its light messages.
func (s *streamRepair) lineMessages(off, end int64) ([]*Message, error) {
	b, err := s.lineAt(off, end)
	if err != nil {
		return nil, err
	}
	return lightMessages(s.format, b), nil
}

// lineAt reads the line (or the entry that ends it) at [off, end), its
// terminator included, again: its bytes, or the outline of a line longer
// than maxLineSize (outline.go), which reads the same.
func (s *streamRepair) lineAt(off, end int64) ([]byte, error) {
	if end-off <= int64(maxLineSize) {
		return readLine(s.f, off, end)
	}
	ol, err := outlineAt(s.f, off, end, s.seed, s.parK)
	if err != nil {
		return nil, err
	}
	return ol.out, nil
}

// entryLine returns the entry of a line a pass has read, cut bytes into
// it at off (cut: a byte-order mark, or the torn fragment before a glued
// entry), to end: the line held (line, its bytes), or the outline ol of a
// long one. The outline of a long line is the entry's unless a glued entry
// is cut out of the line; that entry is read again. With sum, it also
// returns the hash of the entry's bytes.
func (s *streamRepair) entryLine(line []byte, off, end int64, cut int, ol *lineOutline, sum bool) ([]byte, uint64, error) {
	var b []byte
	switch {
	case ol == nil:
		b = line[cut:]
	case ol.valid || ol.blank:
		return ol.out, ol.sum, nil // cut is a byte-order mark, which it is without
	case end-off <= int64(maxLineSize):
		var err error
		if b, err = readLine(s.f, off, end); err != nil {
			return nil, 0, err
		}
	default:
		eol, err := outlineAt(s.f, off, end, s.seed, s.parK)
		if err != nil {
			return nil, 0, err
		}
		return eol.out, eol.sum, nil
	}
	if !sum {
		return b, 0, nil
	}
	return b, maphash.Bytes(s.seed, b), nil
}

// close ends the open frame. It is held until the next frame is known:
// a frame whose first part repair drops (every block a call without input
// or id) merges into the frame before it, and the two are checked as one.
func (fr *frameReader) close(last bool) error {
	if len(fr.cur) > 0 {
		if fr.started && len(fr.held) > 0 && fr.cur[0].p.malformed {
			fr.held = append(fr.held, fr.cur...)
		} else {
			if err := fr.finish(fr.held, fr.heldStarted); err != nil {
				return err
			}
			fr.held = append(fr.held[:0], fr.cur...)
			fr.heldStarted = fr.started
		}
	}
	fr.cur = fr.cur[:0]
	fr.started, fr.sawOther, fr.lastResp, fr.lastHasResp = false, false, 0, false
	if last {
		if err := fr.finish(fr.held, fr.heldStarted); err != nil {
			return err
		}
		fr.held = nil
		if fr.pending != nil {
			fr.s.regions = append(fr.s.regions, fr.pending)
			fr.pending = nil
		}
	}
	return nil
}

// finish checks a frame. A frame that needs a change joins the region
// being grown (or starts one); a clean one ends it.
func (fr *frameReader) finish(items []fitem, started bool) error {
	s := fr.s
	if len(items) == 0 {
		return nil
	}
	var changes []Change
	if !simpleClean(items, started) {
		// Read the frame's lines again as Messages.
		light := make([]*Message, len(items))
		read := map[int][]*Message{}
		for i, it := range items {
			msgs, ok := read[it.line]
			if !ok {
				var err error
				if msgs, err = s.lineMessages(it.off, it.end); err != nil {
					return err
				}
				read[it.line] = msgs
			}
			if it.part >= len(msgs) {
				return fmt.Errorf("transcript: line %d changed while it was repaired", it.line+1)
			}
			light[i] = msgs[it.part]
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
	return nil
}

// simpleClean reports, without running repair, whether a frame is in the
// shape repair leaves alone: each assistant part's calls (with ids and
// input, ids unique in the frame) answered right after it in call order,
// then messages that are neither results nor blank user turns. Other
// frames are checked by repair itself.
func simpleClean(items []fitem, started bool) bool {
	i, n := 0, len(items)
	skip := func() {
		for i < n && items[i].p.role == "" {
			i++
		}
	}
	if started {
		var buf [16]uint64
		seen := buf[:0] // the frame's call ids (hashes)
		for skip(); i < n && items[i].p.role == RoleAssistant; skip() {
			p := &items[i].p
			if p.errored || p.over {
				return false
			}
			i++
			for _, c := range p.calls[:p.ncalls] {
				if c.bad || slices.Contains(seen, c.id) {
					return false
				}
				seen = append(seen, c.id)
				skip()
				if i >= n || items[i].p.role != RoleTool {
					return false
				}
				if r := &items[i].p; !r.result || r.resultID != c.id {
					return false
				}
				i++
			}
		}
	}
	for ; i < n; i++ {
		switch m := &items[i].p; m.role {
		case RoleTool, RoleAssistant:
			return false
		case RoleUser:
			if m.blank {
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
