package transcript

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"os"
	"sort"
	"strings"
)

// This file is the default repair of pi (v2+) and Claude Code sessions,
// line and message level, in memory that does not grow with the lines'
// sizes or the file's: a few bytes per line (a parent link and flags) and
// what is damaged. It reads the file three times, each a sequential
// stream:
//
//  1. scan: validate every line, find each entry's parent (through a
//     window of recent ids; parents further back are looked up in one more
//     pass when there are any), drop invalid and repeated lines;
//  2. walk the tree from the leaf, relink broken parent links, then read
//     the path again, turn by turn (a turn frame at a time), and check
//     each frame with message-level repair on a light reading of its
//     messages; frames that need a change are remembered by byte span;
//  3. repair the damaged frames together (RepairMessages on a document
//     made of their lines, so that a displaced result can still go back to
//     its call in an earlier frame) and write the file anew: unchanged
//     lines copied, damaged spans replaced, relinked parents patched.
//
// The result is the same as repairing the whole document in memory (a
// differential fuzz test holds the two to it); files it cannot stream
// (pi v1, a child written before its parent, a result line far from its
// call) are repaired in memory.

// errNoStream makes RepairFile repair a file in memory.
var errNoStream = errors.New("transcript: file cannot be repaired by streaming")

// windowSize is how many recent ids the scan keeps to find parents.
var windowSize = 1 << 16 // a var for tests

// Line flags of the scan.
const (
	fBad    uint8 = 1 << iota // dropped: not valid, or written twice
	fBlank                    // blank line
	fHeader                   // the pi header
	fEntry                    // a valid entry
	fID                       // the entry has an id
	fConv                     // claude: user, assistant, system or attachment
	fSide                     // claude: isSidechain
	fResult                   // claude: a user line holding only tool results
)

const (
	noParent      = -1 // null, or the entry's own id
	missingParent = -2 // named but not in the file
	farParent     = -3 // not among the recent ids: looked up in another pass
)

type bitset []uint64

func (b bitset) get(i int) bool { return b[i>>6]&(1<<(i&63)) != 0 }
func (b bitset) set(i int)      { b[i>>6] |= 1 << (i & 63) }

type salvage struct {
	parent     uint64
	parentNull bool
	parentIdx  int32
	line       int
}

type farRef struct {
	line   int32
	ph     uint64
	parent string
}

type winSlot struct {
	id   uint64
	line int32
	sum  uint64
}

// streamRepair is one streaming repair (or check) of a file.
type streamRepair struct {
	f      *os.File
	size   int64
	format Format
	idKey  string
	parK   string
	seed   maphash.Seed

	n      int
	parent []int32
	flags  []uint8
	path   bitset
	resCh  bitset // claude: a path line whose path child is a result line

	header   []byte
	anyMain  bool
	dropped  []Change // drop_line, in line order
	dups     []Change // drop_duplicate, in line order
	badSpans map[int]bool
	lost     map[uint64]*salvage
	far      []farRef
	win      []winSlot
	winIdx   map[uint64]int32
	winPos   int
	bloom    []uint64 // every id, once the window has dropped some

	// broken links: line -> parent named; its rank on the path (-1 off it)
	broken    map[int]string
	brokenVia map[int]int
	rank      map[int]int
	targets   map[int]string // lines whose id a relink reason names

	regions []*region
	items   int // items read so far (message index of reports)
	opens   []*openCall
	openBy  map[string][]*openCall

	term          string            // terminator for new lines (the first line's)
	droppedParent map[string]string // dropped path entries: id -> parent
	nextParent    map[int]string    // line after a region -> its parent
}

// region is a run of frames that need a change, by line and byte span.
type region struct {
	first, last int // lines, 0-based, inclusive
	off, end    int64
	itemBase    int             // message index of its first item
	next        int             // the path line after it (-1: none)
	fwd         *region         // merged into this one
	orphans     map[string]bool // ids of results in it that answer no call of their frame
	ext         map[string]int  // unanswered calls before it, for those ids
}

func (r *region) root() *region {
	for r.fwd != nil {
		r = r.fwd
	}
	return r
}

// openCall is a call that has no result in its frame: a result displaced
// to a later frame may still belong to it.
type openCall struct {
	id    string
	reg   *region
	alive bool
}

func newStreamRepair(f *os.File, size int64, format Format) *streamRepair {
	s := &streamRepair{f: f, size: size, format: format, seed: maphash.MakeSeed(),
		openBy: map[string][]*openCall{},
		term:   "\n", droppedParent: map[string]string{}, nextParent: map[int]string{},
		badSpans: map[int]bool{}, lost: map[uint64]*salvage{}, winIdx: map[uint64]int32{},
		win: make([]winSlot, min(int64(windowSize), size/32+16)), broken: map[int]string{}, brokenVia: map[int]int{}, rank: map[int]int{}, targets: map[int]string{}}
	for i := range s.win {
		s.win[i].line = -1
	}
	s.idKey, s.parK = "id", "parentId"
	if format == FormatClaude {
		s.idKey, s.parK = "uuid", "parentUuid"
	}
	return s
}

// idHash hashes a JSON string value (raw, with quotes).
func (s *streamRepair) idHash(v []byte) uint64 {
	inner := v[1 : len(v)-1]
	if bytes.IndexByte(inner, '\\') >= 0 {
		if str, ok := jsonString(v); ok {
			return maphash.String(s.seed, str)
		}
	}
	return maphash.Bytes(s.seed, inner)
}

// value returns the raw value at a recorded key start (0: absent).
func value(line []byte, at int) []byte {
	if at == 0 {
		return nil
	}
	return line[at-1 : skipValue(line, at-1)]
}

// scanLine is what the scan learns of one line, in parallel.
type scanLine struct {
	why    string // why the line is dropped ("" if valid)
	fl     uint8
	h, ph  uint64 // hashes of its id and its parent's
	hasPar bool
	parAt  [2]int // its parent's value (raw) in the line
	sum    uint64 // hash of the whole line
}

// extract validates a line and reads its id, parent and flags.
func (s *streamRepair) extract(line []byte, r *scanLine) {
	*r = scanLine{}
	if len(bytes.TrimSpace(line)) == 0 {
		r.fl = fBlank
		return
	}
	var k keyCheck
	if s.format == FormatPi {
		k = keyCheck{top: piLineKeys, sub: piMsgKeys, subOf: "message"}
		r.why = piCheckKeys(line, &k)
	} else {
		k = keyCheck{top: ccLineKeys, sub: ccMsgKeys, subOf: "message"}
		r.why = claudeCheckKeys(line, &k)
	}
	if r.why != "" {
		return
	}
	fl := fEntry
	var typ []byte
	var idAt, parAt int
	typ, idAt, parAt = value(line, k.topAt[0]), k.topAt[1], k.topAt[2]
	if s.format == FormatClaude {
		switch string(typ) {
		case `"user"`, `"assistant"`, `"system"`, `"attachment"`:
			fl |= fConv
		}
		if string(value(line, k.topAt[5])) == "true" {
			fl |= fSide
		}
		if string(typ) == `"user"` && resultBlocksOnly(value(line, k.subAt[2])) {
			fl |= fResult
		}
	}
	if id := value(line, idAt); len(id) >= 2 && id[0] == '"' && string(id) != `""` {
		fl |= fID
		r.h = s.idHash(id)
		r.sum = maphash.Bytes(s.seed, line)
	}
	if parAt != 0 {
		if par := value(line, parAt); len(par) >= 2 && par[0] == '"' && string(par) != `""` {
			r.ph, r.hasPar = s.idHash(par), true
			r.parAt = [2]int{parAt - 1, parAt - 1 + len(par)}
		}
	}
	r.fl = fl
}

// scan is the first pass.
func (s *streamRepair) scan() error {
	first := true
	err := s.eachChunk(func(c *lineChunk) {
		c.scan = c.scan[:0]
		for i := range c.recs {
			c.scan = append(c.scan, scanLine{})
			if !c.recs[i].tooLong {
				s.extract(c.line(i), &c.scan[i])
			}
		}
	}, func(c *lineChunk) error {
		for i, rec := range c.recs {
			idx := c.first + i
			line := c.line(i)
			if idx == 0 && !rec.tooLong && rec.fend-rec.off-int64(len(line)) == 2 {
				s.term = "\r\n"
			}
			s.flags = append(s.flags, 0)
			s.parent = append(s.parent, noParent)
			if rec.tooLong {
				if first && s.format == FormatPi {
					return fmt.Errorf("%w: line %d is longer than %d bytes; the file was not changed", ErrInvalidHeader, idx+1, MaxLineSize)
				}
				first = false
				s.drop(idx, fmt.Sprintf("line longer than %d bytes", MaxLineSize), nil)
				continue
			}
			r := &c.scan[i]
			if r.fl == fBlank {
				s.flags[idx] = fBlank
				continue
			}
			if first && s.format == FormatPi {
				first = false
				if err := (piCodec{}).checkHeader(line); err != nil {
					return fmt.Errorf("%w: line %d: %v; the file was not changed", ErrInvalidHeader, idx+1, err)
				}
				if v, _ := getField(line, "version"); string(v) != "2" && string(v) != "3" {
					return errNoStream // v1 (no tree), or a version read otherwise
				}
				s.flags[idx] = fHeader
				s.header = append([]byte(nil), line...)
				continue
			}
			first = false
			if r.why != "" {
				s.drop(idx, r.why, line)
				continue
			}
			s.entry(idx, line, r)
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.n = len(s.flags)
	if s.format == FormatPi && s.header == nil && s.n > 0 {
		for _, fl := range s.flags {
			if fl&fBlank == 0 {
				return fmt.Errorf("%w: no header line; the file was not changed", ErrInvalidHeader)
			}
		}
	}
	return nil
}

func (s *streamRepair) drop(idx int, why string, line []byte) {
	s.flags[idx] |= fBad
	s.badSpans[idx] = true
	s.dropped = append(s.dropped, Change{Kind: ChangeDropLine, Line: idx + 1, Reason: why})
	if line == nil {
		return
	}
	var id, par []byte
	okID, okPar := false, false
	topFields(line, func(f field) bool {
		if f.end >= len(line) {
			return false
		}
		v := line[f.start:f.end]
		switch string(f.key) {
		case s.idKey:
			if len(v) >= 2 && v[0] == '"' {
				id, okID = v, true
			}
		case s.parK:
			if string(v) == "null" || len(v) >= 2 && v[0] == '"' {
				par, okPar = v, true
			}
		}
		return true
	})
	if !okID || !okPar || string(id) == `""` {
		return
	}
	h := s.idHash(id)
	if _, taken := s.lost[h]; taken {
		return
	}
	sv := &salvage{line: idx + 1, parentIdx: noParent}
	if string(par) == "null" {
		sv.parentNull = true
	} else {
		sv.parent = s.idHash(par)
		sv.parentIdx = s.lookup(sv.parent, idx, par)
	}
	s.lost[h] = sv
}

// lookup finds the line of an id among the recent ones, or records a far
// reference for the line idx (-1 for a salvaged parent).
func (s *streamRepair) lookup(h uint64, idx int, raw []byte) int32 {
	if slot, ok := s.winIdx[h]; ok {
		return s.win[slot].line
	}
	str, _ := jsonString(raw)
	s.far = append(s.far, farRef{line: int32(idx), ph: h, parent: str})
	return farParent
}

func (s *streamRepair) entry(idx int, line []byte, r *scanLine) {
	fl := r.fl
	if fl&fID != 0 && fl&fConv != 0 && fl&fSide == 0 {
		s.anyMain = true
	}
	s.flags[idx] = fl
	if r.hasPar && (fl&fID == 0 || r.ph != r.h) {
		s.parent[idx] = s.lookup(r.ph, idx, line[r.parAt[0]:r.parAt[1]])
	}
	if fl&fID == 0 {
		return
	}
	h := r.h
	if slot, ok := s.winIdx[h]; ok {
		if s.win[slot].sum == r.sum {
			s.flags[idx] |= fBad
			s.badSpans[idx] = true
			s.parent[idx] = noParent
			if n := len(s.far); n > 0 && s.far[n-1].line == int32(idx) {
				s.far = s.far[:n-1]
			}
			s.dups = append(s.dups, Change{Kind: ChangeDropDuplicate, Line: idx + 1,
				Reason: fmt.Sprintf("line %d repeats line %d (the same entry written twice)", idx+1, s.win[slot].line+1)})
		}
		return
	}
	old := s.win[s.winPos]
	if old.line >= 0 && s.bloom == nil {
		s.bloom = make([]uint64, bloomBits/64)
		for _, w := range s.win {
			s.bloomAdd(w.id)
		}
	}
	if s.bloom != nil {
		s.bloomAdd(h)
	}
	if old.line >= 0 && s.winIdx[old.id] == int32(s.winPos) {
		delete(s.winIdx, old.id)
	}
	s.win[s.winPos] = winSlot{id: h, line: int32(idx), sum: r.sum}
	s.winIdx[h] = int32(s.winPos)
	s.winPos = (s.winPos + 1) % len(s.win)
}

// bloomBits is the size of the filter of ids kept once the window no
// longer holds them all (2 MiB: for 400,000 ids, one false "maybe" in
// about 2,000 lookups, which costs one more pass, never a wrong answer).
const bloomBits = 1 << 24

func bloomPos(h uint64) [3]uint64 {
	h2 := h*0x9e3779b97f4a7c15 | 1
	return [3]uint64{h % bloomBits, (h + h2) % bloomBits, (h + 2*h2) % bloomBits}
}

func (s *streamRepair) bloomAdd(h uint64) {
	for _, p := range bloomPos(h) {
		s.bloom[p/64] |= 1 << (p % 64)
	}
}

func (s *streamRepair) bloomHas(h uint64) bool {
	for _, p := range bloomPos(h) {
		if s.bloom[p/64]&(1<<(p%64)) == 0 {
			return false
		}
	}
	return true
}

// resolveFar looks up the parents that were not among the recent ids in
// one more pass over the file.
func (s *streamRepair) resolveFar() error {
	if len(s.far) == 0 {
		s.win, s.winIdx, s.bloom = nil, nil, nil
		return nil
	}
	// A parent the ids seen say is not in the file is missing; one still
	// in the window was written after its child; only the others need
	// another pass.
	want := make(map[uint64]int32, len(s.far))
	search := false
	for _, r := range s.far {
		switch slot, ok := s.winIdx[r.ph]; {
		case ok:
			want[r.ph] = s.win[slot].line
		case s.bloom == nil || !s.bloomHas(r.ph):
			want[r.ph] = missingParent
		default:
			want[r.ph] = farParent
			search = true
		}
	}
	s.win, s.winIdx, s.bloom = nil, nil, nil
	if search {
		if err := s.searchIDs(want); err != nil {
			return err
		}
	}
	for _, r := range s.far {
		at := want[r.ph]
		if r.line >= 0 && s.flags[r.line]&fBad == 0 {
			s.parent[r.line] = at
			if at == missingParent {
				s.broken[int(r.line)] = r.parent
			}
		}
	}
	for _, sv := range s.lost {
		if sv.parentIdx == farParent {
			sv.parentIdx = want[sv.parent]
		}
	}
	return nil
}

// searchIDs finds, in one more pass, the first line of each id wanted
// (marked farParent); ids not found are missing.
func (s *streamRepair) searchIDs(want map[uint64]int32) error {
	ls := s.lines()
	for idx := 0; ; idx++ {
		line, _, _, tooLong, err := ls.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("transcript: %w", err)
		}
		if tooLong || s.flags[idx]&(fID|fBad) != fID {
			continue
		}
		v, ok := getField(line, s.idKey)
		if !ok {
			continue
		}
		h := s.idHash(v)
		if at, ok := want[h]; ok && at == farParent {
			want[h] = int32(idx)
		}
	}
	for h, at := range want {
		if at == farParent {
			want[h] = missingParent
		}
	}
	return nil
}

// link relinks the broken links and walks the path from the leaf.
func (s *streamRepair) link() error {
	var kids []uint8 // children per line, up to 2
	if len(s.broken) > 0 && s.format == FormatClaude {
		kids = make([]uint8, s.n)
		for i := 0; i < s.n; i++ {
			if p := s.parent[i]; p >= 0 && s.flags[i]&fBad == 0 && kids[p] < 2 {
				kids[p]++
			}
		}
	}
	for i := 0; i < s.n; i++ {
		p, ok := s.broken[i]
		if !ok {
			continue
		}
		target := int32(missingParent)
		h := maphash.String(s.seed, p)
		via := 0
		for hops := 0; hops <= len(s.lost); hops++ {
			sv, ok := s.lost[h]
			if !ok {
				break
			}
			if via == 0 {
				via = sv.line
			}
			if sv.parentNull {
				target = noParent
				break
			}
			if sv.parentIdx >= 0 {
				target = sv.parentIdx
				break
			}
			h = sv.parent
		}
		if target == missingParent {
			via = 0
			target = noParent
			for j := i - 1; j >= 0; j-- {
				fl := s.flags[j]
				if fl&(fID|fBad) != fID {
					continue
				}
				if s.format == FormatClaude && (fl&fConv == 0 || fl&fSide != s.flags[i]&fSide ||
					fl&fResult != 0 && s.parent[j] >= 0 && s.broken[j] == "" && kids[s.parent[j]] > 1) {
					continue
				}
				target = int32(j)
				break
			}
		}
		s.parent[i] = target
		if via > 0 {
			s.brokenVia[i] = via
		}
		if target >= 0 {
			s.targets[int(target)] = ""
		}
	}
	leaf := -1
	for i := s.n - 1; i >= 0; i-- {
		fl := s.flags[i]
		if fl&(fEntry|fBad) != fEntry {
			continue
		}
		if s.format == FormatClaude && (fl&fID == 0 || fl&fConv == 0 || s.anyMain && fl&fSide != 0) {
			continue
		}
		leaf = i
		break
	}
	s.path = make(bitset, (s.n+63)/64)
	s.resCh = make(bitset, (s.n+63)/64)
	var walk []int32
	for cur := leaf; cur >= 0 && !s.path.get(cur); {
		s.path.set(cur)
		walk = append(walk, int32(cur))
		p := int(s.parent[cur])
		if p < 0 {
			break
		}
		if p >= cur {
			return errNoStream // a child written before its parent
		}
		cur = p
	}
	for k, line := range walk {
		if _, ok := s.broken[int(line)]; ok {
			s.rank[int(line)] = len(walk) - 1 - k
		}
		if s.flags[line]&fResult != 0 && s.parent[line] >= 0 {
			s.resCh.set(int(s.parent[line]))
		}
	}
	return nil
}

// anyEntry reports whether any line is a valid entry.
func (s *streamRepair) anyEntry() bool {
	for _, fl := range s.flags {
		if fl&(fEntry|fBad) == fEntry {
			return true
		}
	}
	return false
}

// relinkChanges reports the broken links, in line order.
func (s *streamRepair) relinkChanges() []Change {
	lines := make([]int, 0, len(s.broken))
	for l := range s.broken {
		lines = append(lines, l)
	}
	sort.Ints(lines)
	var out []Change
	for _, l := range lines {
		p := s.broken[l]
		why := fmt.Sprintf("parent %q is not in the file (a lost or torn line)", p)
		if v, ok := s.brokenVia[l]; ok {
			why = fmt.Sprintf("parent %q is gone with the dropped line %d", p, v)
		}
		target := "made a root: no earlier entry can be its ancestor"
		if t := s.parent[l]; t >= 0 {
			target = fmt.Sprintf("relinked to %q, its nearest surviving ancestor", s.targets[int(t)])
		}
		lostWhat := "a reader walking parents from here stops at it"
		if r, ok := s.rank[l]; ok {
			lostWhat = fmt.Sprintf("a reader walking parents from the leaf stops here and loses the %d entries before it", r)
		}
		out = append(out, Change{Kind: ChangeRelink, Line: l + 1, Reason: why + "; " + lostWhat + "; " + target})
	}
	return out
}

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

// lightMessages reads the messages of a path line as the codecs do, but
// only what message-level repair looks at: roles, stop reasons, response
// ids, tool call ids, names and whether they have input, result ids, and
// whether user text is blank. It reads the line once, decoding nothing
// else. The line is valid JSON (the scan checked it).
func lightMessages(f Format, line []byte) []*Message {
	var typ []byte
	var role, stop, callID, respID []byte
	var blocks []Block
	var content []byte
	apiError := false
	walkObject(line, 0, func(key []byte, v int) int {
		switch string(key) {
		case "type":
			e := skipValue(line, v)
			typ = line[v:e]
			return e
		case "isApiErrorMessage":
			apiError = line[v] == 't'
		case "message":
			return walkObject(line, v, func(key []byte, v int) int {
				switch string(key) {
				case "role":
					e := skipValue(line, v)
					role = line[v:e]
					return e
				case "content":
					e := skipValue(line, v)
					content = line[v:e]
					return e
				case "stopReason":
					if f == FormatPi {
						e := skipValue(line, v)
						stop = line[v:e]
						return e
					}
				case "stop_reason":
					if f == FormatClaude {
						e := skipValue(line, v)
						stop = line[v:e]
						return e
					}
				case "toolCallId":
					e := skipValue(line, v)
					callID = line[v:e]
					return e
				case "id":
					e := skipValue(line, v)
					respID = line[v:e]
					return e
				}
				return skipValue(line, v)
			})
		}
		return skipValue(line, v)
	})
	str := func(v []byte) string { s, _ := jsonString(v); return s }
	user := string(typ) == `"user"` || f == FormatPi && string(role) == `"user"`
	blocks = lightBlocks(f, content, user)
	if f == FormatPi {
		if string(typ) != `"message"` {
			return []*Message{{}}
		}
		switch string(role) {
		case `"user"`:
			return []*Message{{Role: RoleUser, Blocks: blocks}}
		case `"assistant"`:
			return []*Message{{Role: RoleAssistant, Blocks: blocks, Meta: Meta{StopReason: str(stop)}}}
		case `"toolResult"`:
			return []*Message{{Role: RoleTool, Blocks: []Block{{Type: BlockToolResult, CallID: str(callID)}}}}
		}
		return []*Message{{}}
	}
	switch string(typ) {
	case `"user"`:
		return splitUser(blocks, Meta{})
	case `"assistant"`:
		meta := Meta{ResponseID: str(respID), StopReason: str(stop)}
		if meta.StopReason == "" && apiError {
			meta.StopReason = "error"
		}
		return []*Message{{Role: RoleAssistant, Blocks: blocks, Meta: meta}}
	}
	return []*Message{{}}
}

// walkObject calls fn for each member of the object that starts at b[i]
// with the key and where its value starts; fn returns where the value
// ends. It returns the index after the object. b must be valid JSON.
func walkObject(b []byte, i int, fn func(key []byte, v int) int) int {
	i = skipSpace(b, i)
	if i >= len(b) || b[i] != '{' {
		return skipValue(b, i)
	}
	i = skipSpace(b, i+1)
	for i < len(b) && b[i] == '"' {
		ks := i + 1
		i = skipString(b, i)
		if i-1 < ks {
			return len(b)
		}
		key := b[ks : i-1]
		i = skipSpace(b, i)
		if i >= len(b) || b[i] != ':' {
			return len(b)
		}
		i = skipSpace(b, fn(key, skipSpace(b, i+1)))
		if i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
		}
	}
	if i < len(b) && b[i] == '}' {
		i++
	}
	return i
}

// lightBlocks reads content (a string or an array of blocks) of any of the
// block shapes pi, Claude Code and Anthropic use. With text, text blocks
// say whether they are blank.
func lightBlocks(f Format, c []byte, text bool) []Block {
	if isNullish(c) {
		return nil
	}
	blank := func(v []byte) string {
		if !text {
			return "x"
		}
		s, _ := jsonString(v)
		if strings.TrimSpace(s) == "" {
			return ""
		}
		return "x"
	}
	if c[0] == '"' {
		return []Block{{Type: BlockText, Text: blank(c)}}
	}
	if c[0] != '[' {
		return nil
	}
	var out []Block
	i := skipSpace(c, 1)
	for i < len(c) && c[i] != ']' {
		var t, id, name, textV, useID []byte
		hasInput := false
		isObj := c[i] == '{'
		i = walkObject(c, i, func(key []byte, v int) int {
			e := skipValue(c, v)
			switch string(key) {
			case "type":
				t = c[v:e]
			case "id":
				id = c[v:e]
			case "name":
				name = c[v:e]
			case "text":
				textV = c[v:e]
			case "tool_use_id":
				useID = c[v:e]
			case "input":
				hasInput = hasInput || !isNullish(c[v:e])
			case "arguments":
				hasInput = hasInput || f == FormatPi && !isNullish(c[v:e])
			}
			return e
		})
		i = skipSpace(c, i)
		if i < len(c) && c[i] == ',' {
			i = skipSpace(c, i+1)
		}
		if !isObj {
			out = append(out, Block{})
			continue
		}
		ts, _ := jsonString(t)
		b := Block{Type: BlockType(ts)}
		switch ts {
		case "text":
			b.Type, b.Text = BlockText, blank(textV)
		case "thinking", "redacted_thinking":
			b.Type = BlockThinking
		case "image":
			b.Type = BlockImage
		case "document":
			b.Type = BlockFile
		case "toolCall", "toolUse", "functionCall", "tool_use", "tool_call", "function_call":
			if f == FormatClaude && ts != "tool_use" {
				break
			}
			b.Type = BlockToolCall
			b.ID, _ = jsonString(id)
			b.Name, _ = jsonString(name)
			if hasInput {
				b.Input = []byte("{}")
			}
		case "tool_result":
			b.Type = BlockToolResult
			b.CallID, _ = jsonString(useID)
		}
		out = append(out, b)
	}
	return out
}

// regionOpts make Parse read the lines of damaged regions: the scan has
// already found the path, the relinks and the lines to drop.
type regionOpts struct {
	path   map[int]bool   // local line -> on the path
	relink map[int]string // local line -> the parent it is relinked to
	skip   map[int]bool   // local lines dropped by the scan
}

// repairRegion repairs one damaged region and returns its changes and
// new bytes; it records in s the parents that lines after it must take.
func (s *streamRepair) repairRegion(r *region) ([]Change, []byte, error) {
	var data []byte
	local := []int{} // local line (1-based) - 1 -> global line, 0-based
	if s.header != nil {
		data = append(append(data, s.header...), '\n')
		local = append(local, -1)
	}
	opts := &regionOpts{path: map[int]bool{}, relink: map[int]string{}, skip: map[int]bool{}}
	start := len(data)
	data = append(data, make([]byte, r.end-r.off)...)
	if _, err := s.f.ReadAt(data[start:], r.off); err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, fmt.Errorf("transcript: %w", err)
	}
	for g := r.first; g <= r.last; g++ {
		local = append(local, g)
		l := len(local)
		switch {
		case s.flags[g]&fBad != 0:
			opts.skip[l] = true
		case s.path.get(g):
			opts.path[l] = true
		}
		if _, ok := s.broken[g]; ok {
			if t := s.parent[g]; t >= 0 {
				opts.relink[l] = s.targets[int(t)]
			} else {
				opts.relink[l] = ""
			}
		}
	}
	c, _ := codecFor(s.format)
	d := &Document{Format: s.format, codec: c, data: data, term: s.term, jsonl: true, region: opts}
	if err := d.splitLines(); err != nil {
		return nil, nil, err
	}
	if err := c.build(d); err != nil {
		return nil, nil, err
	}
	var entries []*entry
	for _, e := range d.entries {
		if e != d.header {
			e.line = local[e.line-1] + 1
			entries = append(entries, e)
		}
	}
	out, changes := repairItemsExt(d.items, false, r.ext)
	for i := range changes {
		if changes[i].Message != nil {
			g := r.itemBase + *changes[i].Message
			changes[i].Message = &g
		}
	}
	b, lastChain := d.assembleTreeEntries(entries, c.render(d, out), s.droppedParent)
	if r.next >= 0 && lastChain != "" {
		s.nextParent[r.next] = lastChain
	}
	return changes, b, nil
}

// regionChanges repairs every region, keeping only the changes (a dry
// run).
func (s *streamRepair) regionChanges() ([]Change, error) {
	var all []Change
	for _, r := range s.regions {
		changes, _, err := s.repairRegion(r)
		if err != nil {
			return nil, err
		}
		all = append(all, changes...)
	}
	return all, nil
}

// write is the third pass: the file anew, into w. Each damaged region is
// repaired when the pass reaches it; write returns their changes.
func (s *streamRepair) write(w io.Writer) ([]Change, error) {
	var changes []Change
	bw := bufio.NewWriterSize(w, int(min(1<<20, max(4096, s.size))))
	relink := map[int]string{}
	for l := range s.broken {
		p := ""
		if t := s.parent[l]; t >= 0 {
			p = s.targets[int(t)]
		}
		relink[l] = p
	}
	resolve := func(p string) string {
		for i := 0; i < len(s.droppedParent)+1; i++ {
			q, ok := s.droppedParent[p]
			if !ok {
				return p
			}
			p = q
		}
		return p
	}
	ri := 0
	ls := s.lines()
	pendingTerm := "" // terminator owed by a last line written without one
	started := false
	put := func(b []byte, term string) {
		if started && pendingTerm == "" {
			_, _ = bw.WriteString(s.term)
		}
		_, _ = bw.Write(b)
		_, _ = bw.WriteString(term)
		pendingTerm, started = term, true
	}
	for idx := 0; ; idx++ {
		line, off, end, tooLong, err := ls.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("transcript: %w", err)
		}
		if ri < len(s.regions) && idx >= s.regions[ri].first {
			if idx == s.regions[ri].first {
				rc, b, err := s.repairRegion(s.regions[ri])
				if err != nil {
					return nil, err
				}
				changes = append(changes, rc...)
				if len(b) == 0 {
					goto next
				}
				if started && pendingTerm == "" {
					_, _ = bw.WriteString(s.term)
				}
				_, _ = bw.Write(b)
				started = true
				pendingTerm = "x"
				if b[len(b)-1] != '\n' {
					pendingTerm = ""
				}
			}
		next:
			if idx == s.regions[ri].last {
				ri++
			}
			continue
		}
		if tooLong || s.flags[idx]&fBad != 0 {
			continue
		}
		term := "\n"
		switch end - off - int64(len(line)) {
		case 0:
			term = ""
		case 2:
			term = "\r\n"
		}
		if s.flags[idx]&(fBlank|fHeader) == 0 {
			want, known := "", false
			if p, ok := s.nextParent[idx]; ok {
				want, known = p, true
			} else if p, ok := relink[idx]; ok {
				want, known = resolve(p), true
			} else if len(s.droppedParent) > 0 {
				if p, ok := getString(line, s.parK); ok {
					if q := resolve(p); q != p {
						want, known = q, true
					}
				}
			}
			if known {
				if have, _ := getString(line, s.parK); have != want {
					put(setField(line, s.parK, parentValue(want)), term)
					continue
				}
			}
		}
		put(line, term)
	}
	return changes, bw.Flush()
}

// repairStream is RepairFile's default repair of pi and Claude Code
// sessions. It returns errNoStream for files it leaves to the in-memory
// repair.
func repairStream(path string, fi os.FileInfo, f Format, rep *FileReport, opts FileOptions) (*FileReport, error) {
	in, err := os.Open(path)
	if err != nil {
		return rep, fmt.Errorf("transcript: %w", err)
	}
	defer in.Close()
	s, changes, err := analyzeStream(in, fi.Size(), f)
	if err != nil {
		if errors.Is(err, ErrInvalidHeader) {
			return refuse(rep, err.Error())
		}
		return rep, err
	}
	if len(s.dropped) > 0 && !s.anyEntry() {
		return refuse(rep, noValidLine(f))
	}
	rep.Messages = true
	rep.Changes = append(rep.Changes, changes...)
	if len(rep.Changes) == 0 && len(s.regions) == 0 {
		return rep, nil
	}
	if opts.DryRun {
		mc, err := s.regionChanges()
		if err != nil {
			return rep, err
		}
		rep.Changes = append(rep.Changes, mc...)
		rep.Status = StatusWould
		return rep, nil
	}
	if err := replace(path, fi, rep, opts, func(w io.Writer) error {
		mc, err := s.write(w)
		rep.Changes = append(rep.Changes, mc...)
		return err
	}); err != nil {
		return rep, err
	}
	if st, err := os.Stat(path); err == nil {
		rep.BytesAfter = st.Size()
	}
	rep.Status = StatusRepaired
	return rep, nil
}

// analyzeStream runs the first two passes: it returns the file-level
// changes (dropped lines, relinks) in report order and leaves in s the
// regions to repair.
func analyzeStream(in *os.File, size int64, f Format) (*streamRepair, []Change, error) {
	s := newStreamRepair(in, size, f)
	if err := s.scan(); err != nil {
		return nil, nil, err
	}
	if err := s.resolveFar(); err != nil {
		return nil, nil, err
	}
	if err := s.link(); err != nil {
		return nil, nil, err
	}
	if err := s.check(); err != nil {
		return nil, nil, err
	}
	s.settleExt()
	var all []Change
	all = append(all, s.dropped...)
	all = append(all, s.dups...)
	all = append(all, s.relinkChanges()...)
	return s, all, nil
}
