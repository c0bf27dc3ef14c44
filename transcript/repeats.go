package transcript

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
)

// This file finds, in the streaming repair, the lines that repeat an
// entry whose first line the window of recent ids no longer holds: the
// same line written twice far apart, or a line with the id of an entry
// far back. The in-memory repair judges every line against the first line
// with its id (tree.go: a byte-for-byte copy is dropped, another line
// with the id is kept but is not the entry its id names), and so does the
// streaming one:
//
//   - the scan tests each id the window does not hold against the filter
//     of every id seen (the filter has no false negatives): an id it has
//     not seen is new; one it may have seen makes its line a candidate,
//     which stands for the id in the window meanwhile, and so does every
//     later line with that id while it does (entry);
//   - one more pass over the file finds the first line of each
//     candidate's id and its hash (firstLines, the pass that also looks up
//     far parents), and each candidate is then judged against it
//     (applyRepeats): a copy of it is dropped, and the lines that found a
//     candidate as their parent take the first line instead.
//
// A candidate is 24 bytes. Their number is that of the repeated lines,
// plus the filter's false positives, which grow with the number of ids
// (with random ids: none in 400,000, 269 in a million, 8,544 in two
// million, 170,452 in four million). maxRepeatCands bounds them: past it
// the candidates are settled at once, by a pass over the lines read so
// far. A line found to have the id of an earlier line, and other bytes,
// is remembered in owner (a map entry each).

// repeatCand is a line whose id the filter says may be on an earlier line
// the window no longer holds.
type repeatCand struct {
	line int32
	h    uint64 // its id's hash
	sum  uint64 // its bytes' hash
}

// idFirst is the first line of an id, as firstLines finds it.
type idFirst struct {
	line int32  // farParent while wanted, missingParent when not in the file
	sum  uint64 // the line's hash
}

// maxRepeatCands bounds the candidates held (24 bytes each): 3 MiB. A var
// for tests.
var maxRepeatCands = 1 << 17

// repeatWant returns the candidates' ids, each wanted.
func (s *streamRepair) repeatWant() map[uint64]*idFirst {
	want := make(map[uint64]*idFirst, len(s.cands))
	for _, c := range s.cands {
		if want[c.h] == nil {
			want[c.h] = &idFirst{line: farParent}
		}
	}
	return want
}

// resolveRepeats settles the candidates held during the scan, which has
// read the lines before upTo, when there are too many to hold more.
func (s *streamRepair) resolveRepeats(upTo int) error {
	want := s.repeatWant()
	if err := s.firstLines(want, upTo); err != nil {
		return err
	}
	s.applyRepeats(want)
	return s.lt.err
}

// firstLines finds, in one more pass over the lines before upTo, the
// first line of each id wanted, and its hash; ids not found are missing.
func (s *streamRepair) firstLines(want map[uint64]*idFirst, upTo int) error {
	ls := s.lines()
	for idx := 0; idx < upTo; idx++ {
		line, off, end, _, err := ls.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("transcript: %w", err)
		}
		if s.lt.flags(idx)&(fID|fBad) != fID {
			continue
		}
		cut := s.cut[idx]
		e, _, err := s.entryLine(line, off+int64(cut), end, cut, ls.ol, false)
		if err != nil {
			return err
		}
		v, ok := getField(e, s.idKey)
		if !ok {
			continue
		}
		if w := want[s.idHash(v)]; w != nil && w.line == farParent {
			if _, w.sum, err = s.entryLine(line, off+int64(cut), end, cut, ls.ol, true); err != nil {
				return err
			}
			w.line = int32(idx)
		}
	}
	for _, w := range want {
		if w.line == farParent {
			w.line = missingParent
		}
	}
	return nil
}

// applyRepeats judges each candidate against the first line with its id
// (want, found by firstLines): a line that is not that first line repeats
// it, and is dropped when its bytes are the same. The lines that found a
// repeating line in the window as their parent (it stood for the id) take
// the first line instead, and the window names the first lines from here.
func (s *streamRepair) applyRepeats(want map[uint64]*idFirst) {
	if len(s.cands) == 0 {
		return
	}
	moved := map[int32]int32{} // a line that repeats an id -> the id's first line
	from := -1
	dropped := map[int32]bool{}
	for _, c := range s.cands {
		f := want[c.h]
		if f == nil || f.line < 0 || f.line == c.line {
			continue // the first line with its id: the filter's false positive
		}
		moved[c.line] = f.line
		if from < 0 {
			from = int(c.line)
		}
		if c.sum == f.sum {
			s.dropRepeat(int(c.line), int(f.line))
			dropped[c.line] = true
		} else {
			s.owner[c.line] = f.line
		}
	}
	if s.winIdx != nil {
		for _, c := range s.cands {
			if slot, ok := s.winIdx.get(c.h); ok && s.win[slot].cand {
				w := &s.win[slot]
				if f := want[c.h]; f != nil && f.line >= 0 {
					w.line, w.sum = f.line, f.sum
				}
				w.cand = false
			}
		}
	}
	s.cands = s.cands[:0]
	if len(moved) == 0 {
		return
	}
	// The path read during the scan followed the links as they were: the
	// check pass reads it again.
	s.spec = nil
	for j := from + 1; j < s.lt.n; j++ {
		if p := s.lt.parent(j); p >= 0 {
			if f, ok := moved[p]; ok {
				s.lt.setParent(j, f)
			}
		}
	}
	for _, sv := range s.lost {
		if f, ok := moved[sv.parentIdx]; ok {
			sv.parentIdx = f
		}
	}
	for _, sv := range s.torn {
		if f, ok := moved[sv.parentIdx]; ok {
			sv.parentIdx = f
		}
	}
	if len(dropped) > 0 {
		// A dropped line's parent is not looked up.
		s.far = slices.DeleteFunc(s.far, func(r farRef) bool { return dropped[r.line] })
		slices.SortStableFunc(s.dups, func(a, b Change) int { return cmp.Compare(a.Line, b.Line) })
	}
}
