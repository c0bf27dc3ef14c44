package transcript

import (
	"slices"
)

// The check of the path as the scan reads it. The path is only known once
// the leaf is (the scan's end), but in nearly every file it is the chain
// the lines make in file order: each entry's parent is the entry before
// it on the path (or, for a broken link, will be relinked to it), and in
// Claude Code a result line may hang on its call's line instead. The scan
// reads the lines that continue that chain as the path, frame by frame,
// exactly as the check pass would; once the real path is known, the two
// are compared line by line (the path, and the result lines attached off
// it). When they agree the check pass is not needed: the frames read were
// the path's. When they do not (a branch the leaf is not on, a child
// written before its parent, sidechains), the work is dropped and the
// check pass reads the file again.

// specStart starts reading the path during the scan.
func (s *streamRepair) specStart() {
	s.spec = &frameReader{s: s, pathMark: mSpec}
	s.specLast, s.specSide, s.specFrom = -1, -1, 0
}

// specPend is a Claude Code line that is not part of the conversation
// (progress, a snapshot with an id...) that continues the chain: it is on
// the path only if a later line names it (or one after it) as parent, and
// most are leaves off it.
type specPend struct {
	idx      int
	off, end int64
	parts    []lightPart
}

// specPendMax bounds the lines held undecided: past it the check pass
// reads the path.
const specPendMax = 64

// specLine is the scan's step for line idx, a valid entry (after entry),
// at [off, end) in the file, with its light parts.
func (s *streamRepair) specLine(idx int, off, end int64, parts []lightPart) {
	if s.spec == nil {
		return
	}
	t := s.lt
	fl := t.flags(idx)
	if fl&fBad != 0 {
		return // a repeated line
	}
	if fl&fID == 0 {
		return // not on the path (but as the leaf, where the paths will not agree)
	}
	p := int(t.parent(idx))
	conv := s.format != FormatClaude || fl&fConv != 0
	if s.specSide < 0 && conv {
		s.specSide = int(fl & fSide) // the leaf's side, most likely
	}
	main := int(fl&fSide) == s.specSide
	if main && conv && p == noParent && s.specLast >= 0 {
		// A new root (a compaction's boundary): the path may start again
		// here; what was read before is then off it.
		s.specReset()
		s.spec = &frameReader{s: s, pathMark: mSpec}
		s.specFrom, s.specLast, s.specPend = idx, -1, s.specPend[:0]
	}
	pend := s.specPend
	if main && p >= 0 && len(pend) > 0 {
		// A line held undecided is on the path if this one hangs on it
		// (or on one after it).
		for k := len(pend) - 1; k >= 0; k-- {
			if pend[k].idx == p {
				for _, q := range pend[:k+1] {
					s.specOn(q.idx, q.off, q.end, q.parts)
				}
				break
			}
		}
	}
	if p == farParent && main {
		// A parent that is not among the recent ids: one a dropped line
		// names (its id and parent salvaged) is where link relinks it.
		if t, ok := s.specSalvaged(idx); ok {
			p = t
		}
	}
	if main && p >= s.specFrom && p != s.specLast && len(s.specPend) == 0 && t.marks(p)&mSpec != 0 &&
		!(s.format == FormatClaude && fl&fResult != 0 && t.marks(p)&mSpecResCh == 0) {
		// The chain goes on from an earlier line of the path: what was
		// read after that line is off the path.
		if !s.specBack(p) {
			s.spec = nil
			return
		}
	}
	switch {
	case main && !conv &&
		(p == s.specLast && len(pend) == 0 || len(pend) > 0 && p == pend[len(pend)-1].idx):
		if len(pend) == specPendMax {
			s.spec = nil
			return
		}
		s.specPend = append(pend, specPend{idx: idx, off: off, end: end, parts: append([]lightPart(nil), parts...)})
		return
	case main && (p == s.specLast || p == farParent):
		// The chain goes on (a parent not among the recent ids is either
		// missing, then relinked to the entry before, or further back,
		// and then the paths will not agree).
		s.specOn(idx, off, end, parts)
	case s.format == FormatClaude && main && fl&fResult != 0 && p >= s.specFrom &&
		t.marks(p)&(mSpec|mSpecResCh) == mSpec && int(t.flags(p)&fSide) == s.specSide:
		t.mark(idx, mSpecBr)
		if err := s.spec.attach(idx, p, off, end, parts); err != nil {
			s.spec = nil // the check pass will read the frames again
		}
	}
	// Lines still held are leaves off the path.
	s.specPend = s.specPend[:0]
}

// specSalvaged returns the line link relinks line idx to when its parent
// is gone with a dropped line whose id and parent were salvaged.
func (s *streamRepair) specSalvaged(idx int) (int, bool) {
	n := len(s.far)
	if n == 0 || s.far[n-1].line != int32(idx) {
		return 0, false
	}
	h := s.far[n-1].ph
	for hops := 0; hops <= len(s.lost); hops++ {
		sv, ok := s.lost[h]
		if !ok || sv.parentNull || sv.parentIdx == farParent {
			return 0, false
		}
		if sv.parentIdx >= 0 {
			return int(sv.parentIdx), true
		}
		h = sv.parent
	}
	return 0, false
}

// specBack takes the path read during the scan back to line to, which
// is on it: the lines read after it leave it. It reports false when they
// are not all in the open frame (their frames were checked already).
func (s *streamRepair) specBack(to int) bool {
	fr, t := s.spec, s.lt
	at := -1
	for i, it := range fr.cur {
		if it.line == to {
			at = i
		}
	}
	if at < 0 {
		return false
	}
	for i, it := range fr.cur {
		if i <= at && it.line > to || i > at && it.line <= to {
			return false // a result attached out of line order
		}
	}
	for _, it := range fr.cur[at+1:] {
		t.unmark(it.line, mSpec|mSpecBr|mSpecResCh)
	}
	t.unmark(to, mSpecResCh)
	keep := slices.Clone(fr.cur[:at+1])
	fr.cur = fr.cur[:0]
	fr.started, fr.sawOther, fr.lastResp, fr.lastHasResp = false, false, 0, false
	for _, it := range keep {
		if err := fr.addItem(it); err != nil {
			return false
		}
	}
	s.specLast = to
	return true
}

// specOn puts line idx on the path read during the scan.
func (s *streamRepair) specOn(idx int, off, end int64, parts []lightPart) {
	if s.spec == nil {
		return
	}
	t := s.lt
	t.mark(idx, mSpec)
	if s.format == FormatClaude && t.flags(idx)&fResult != 0 && s.specLast >= 0 {
		t.mark(s.specLast, mSpecResCh)
	}
	s.specLast = idx
	if err := s.spec.add(idx, off, end, parts); err != nil {
		s.spec = nil // the check pass will read the frames again
	}
}

// specDone ends the path read during the scan, once link has found the
// real one, and reports whether the two agree: then the frames checked
// are the path's and the check pass is not needed.
func (s *streamRepair) specDone() (bool, error) {
	fr := s.spec
	s.spec = nil
	if fr == nil {
		return false, nil
	}
	if err := fr.close(true); err != nil {
		return false, nil
	}
	t := s.lt
	for i := 0; i < s.n; i++ {
		m := t.marks(i)
		if i < s.specFrom {
			m &^= mSpec | mSpecBr // read before the path started again
		}
		if (m&mPath != 0) != (m&mSpec != 0) {
			return false, t.err
		}
		if m&mPath == 0 && s.branch(i) != (m&mSpecBr != 0) {
			return false, t.err
		}
	}
	if t.err != nil {
		return false, t.err
	}
	// The ids the relinks name, which the check pass reads on its way.
	for idx := range s.targets {
		end := s.size
		if idx+1 < s.n {
			end = t.offset(idx + 1)
		}
		b, err := s.lineAt(t.offset(idx)+int64(s.cut[idx]), end)
		if err != nil {
			return false, err
		}
		s.targets[idx], _ = getString(b, s.idKey)
	}
	return true, t.err
}

// specReset drops what the path read during the scan found.
func (s *streamRepair) specReset() {
	s.regions, s.items, s.opens, s.openBy = nil, 0, nil, map[string][]*openCall{}
}
