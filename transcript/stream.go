package transcript

import (
	"bytes"
	"errors"
	"fmt"
	"hash/maphash"
	"os"
	"sort"
)

// This file is the default repair of pi (v2+) and Claude Code sessions,
// line and message level, in memory that does not grow with the lines'
// sizes or the file's: the per-line state (a parent link, an offset,
// flags) is a lineTable that spills to a file, and a line longer than
// maxLineSize is read in pieces into its outline (outline.go), which
// every pass reads in its place. It reads the file as sequential streams:
//
//  1. scan: validate every line, find each entry's parent (through a
//     window of recent ids; parents further back are looked up in one more
//     pass when there are any), drop invalid and repeated lines (a line
//     whose id the window no longer holds but the filter of every id may
//     have seen is looked up in that pass too: repeats.go), and read the
//     path as the chain the lines make in file order, checking its turn
//     frames on the way (stream_spec.go);
//  2. walk the tree from the leaf, relink broken parent links, and compare
//     the path with the one the scan read; only if they differ read the
//     path again, turn by turn (a turn frame at a time), and check each
//     frame with message-level repair on a light reading of its messages;
//     frames that need a change are remembered by byte span;
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

type salvage struct {
	parent     uint64
	parentNull bool
	parentIdx  int32
	line       int
	fragment   bool // the torn start of a line whose glued entry is kept
}

type farRef struct {
	line   int32
	ph     uint64
	parent string
}

type winSlot struct {
	id   uint64
	line int32
	// cand: the line's id was not in the window, but the filter says it
	// may be on an earlier line. Until applyRepeats knows, the line
	// stands for its id (repeats.go).
	cand bool
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

	n  int
	lt *lineTable // each line's parent, flags and marks

	header  []byte
	anyMain bool
	dropped []Change // drop_line, in line order
	dups    []Change // drop_duplicate, in line order
	lost    map[uint64]*salvage
	torn    []*salvage // dropped lines that name their parent, not their id, in line order
	far     []farRef
	win     []winSlot
	winIdx  *idTable
	winPos  int
	bloom   []uint64     // every id (in files that can hold more than the window)
	cands   []repeatCand // lines that may repeat an id the window no longer holds (repeats.go)
	// owner maps each line with the id of an earlier line (and other
	// bytes: a copy is dropped) to the first line with that id, the entry
	// the id names.
	owner map[int32]int32
	// early lists the lines written before their parent.
	early []int32

	// broken links: line -> parent named; its rank on the path (-1 off it)
	broken    map[int]string
	brokenVia map[int]*salvage // the dropped line the link was followed through
	// brokenTorn: line -> the torn line (its id lost) whose parent it takes
	brokenTorn map[int]int
	rank       map[int]int
	targets    map[int]string // lines whose id a relink reason names

	regions  []*region
	items    int          // items read so far (message index of reports)
	spec     *frameReader // the path read during the scan (nil: not, or given up)
	specLast int          // the last line of that path (-1: none yet)
	specPend []specPend   // claude: lines that may be on that path
	specSide int          // claude: the side (fSide) of that path (-1: none yet)
	specFrom int          // the line it starts from
	reread   bool         // the check pass read the path again
	opens    []*openCall
	openBy   map[string][]*openCall

	// cut holds, for the lines that have one, how many of their first
	// bytes repair drops: the torn fragment before an entry glued onto it
	// (glued.go). Every pass reads such a line from there.
	cut map[int]int

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
		openBy: map[string][]*openCall{}, cut: map[int]int{},
		term: "\n", droppedParent: map[string]string{}, nextParent: map[int]string{},
		lost: map[uint64]*salvage{}, lt: newLineTable(), owner: map[int32]int32{},
		win: make([]winSlot, min(int64(windowSize), size/32+16)), broken: map[int]string{}, brokenVia: map[int]*salvage{}, brokenTorn: map[int]int{}, rank: map[int]int{}, targets: map[int]string{}}
	for i := range s.win {
		s.win[i].line = -1
	}
	if len(s.win) == windowSize {
		// The file may hold more ids than the window: the filter of every
		// id, of a fixed size, from the start.
		s.bloom = make([]uint64, bloomBits/64)
	}
	s.winIdx = newIDTable(len(s.win))
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
	// cut is the length of a torn fragment with an entry glued onto it:
	// the rest of the scanLine is that entry's (glued.go); many says the
	// line holds more than one entry, which the in-memory repair splits.
	cut  int
	many bool
	bom  bool // the line (the file's first) begins with a byte-order mark, in cut
	// A line longer than maxLineSize: whole, not valid JSON, to be read
	// whole; tooBig, its outline too long to keep (outline.go).
	whole, tooBig bool
}

// extract validates a line and reads its id, parent and flags; k is left
// with the line's keys.
func (s *streamRepair) extract(line []byte, r *scanLine, k *keyCheck) {
	*r = scanLine{}
	if len(bytes.TrimSpace(line)) == 0 {
		r.fl = fBlank
		return
	}
	if s.format == FormatPi {
		*k = keyCheck{top: piLineKeys, sub: piMsgKeys, subOf: "message"}
		r.why = piCheckKeys(line, k)
	} else {
		*k = keyCheck{top: ccLineKeys, sub: ccMsgKeys, subOf: "message"}
		r.why = claudeCheckKeys(line, k)
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
	s.specStart()
	err := s.eachChunk(func(c *lineChunk) {
		// Each line is checked, and each entry read for the path (its
		// light parts) from what the check found.
		c.scan, c.parts, c.partAt = c.scan[:0], c.parts[:0], c.partAt[:0]
		var k keyCheck
		for i := range c.recs {
			c.scan = append(c.scan, scanLine{})
			from := len(c.parts)
			if rec := &c.recs[i]; rec.tooLong {
				c.parts = s.readOutlined(rec.ol, &c.scan[i], &k, &c.light, c.parts)
			} else {
				c.parts = s.readHeld(c.line(i), rec.off, &c.scan[i], &k, &c.light, c.parts)
			}
			c.partAt = append(c.partAt, [2]int32{int32(from), int32(len(c.parts))})
		}
	}, func(c *lineChunk) error {
		var k keyCheck
		for i, rec := range c.recs {
			idx := c.first + i
			r := &c.scan[i]
			line, parts := c.line(i), c.parts[c.partAt[i][0]:c.partAt[i][1]]
			// The line's length in the file, without its terminator.
			n := int64(len(line))
			outlined := rec.tooLong && !r.whole
			if r.whole {
				// A long line that is not valid JSON is damaged: it is
				// read whole, to be cut as any other.
				b, err := readLine(s.f, rec.off, rec.fend)
				if err != nil {
					return err
				}
				line, n = b, int64(len(b))
				parts = s.readHeld(line, rec.off, r, &k, &c.light, nil)
			} else if outlined {
				n = rec.ol.n
				if rec.ol.bom {
					n += int64(len(utf8BOM))
				}
			}
			if idx == 0 && rec.fend-rec.off-n == 2 {
				s.term = "\r\n"
			}
			s.lt.add(rec.off)
			if r.tooBig {
				return &lineTooLongError{line: idx + 1, size: rec.fend - rec.off}
			}
			bom := 0
			if r.bom {
				bom = len(utf8BOM)
				s.cut[idx] = bom
				s.dropped = append(s.dropped, bomChange())
				if !outlined {
					line = line[bom:] // an outline is the line's without it
				}
			}
			if r.fl == fBlank {
				s.lt.setFlags(idx, fBlank)
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
				s.lt.setFlags(idx, fHeader)
				s.header = append([]byte(nil), line...)
				continue
			}
			first = false
			if r.many {
				return errNoStream // entries glued onto each other: in memory
			}
			if r.why != "" {
				s.drop(idx, r.why, line)
				continue
			}
			if r.cut > bom {
				s.dropFragment(idx, line[:r.cut-bom])
				line = line[r.cut-bom:]
			}
			off := rec.off + int64(r.cut)
			s.entry(idx, line, r)
			if len(s.cands) >= maxRepeatCands {
				if err := s.resolveRepeats(idx + 1); err != nil {
					return err
				}
			}
			s.specLine(idx, off, rec.fend, parts)
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.n = s.lt.n
	if s.format == FormatPi && s.header == nil && s.n > 0 {
		for i := 0; i < s.n; i++ {
			if s.lt.flags(i)&fBlank == 0 {
				return fmt.Errorf("%w: no header line; the file was not changed", ErrInvalidHeader)
			}
		}
	}
	return s.lt.err
}

// readHeld checks a line held in memory, at off in the file, and reads an
// entry's light parts onto parts.
func (s *streamRepair) readHeld(line []byte, off int64, r *scanLine, k *keyCheck, ll *lightLine, parts []lightPart) []lightPart {
	full := line
	bom := off == 0 && bytes.HasPrefix(line, utf8BOM)
	if bom {
		line = line[len(utf8BOM):]
	}
	s.extract(line, r, k)
	if r.why != "" {
		s.glued(line, r, k)
	}
	if bom {
		r.bom, r.cut = true, r.cut+len(utf8BOM)
		line = full
	}
	if r.fl&fEntry != 0 {
		ll.readChecked(s.format, line[r.cut:], k)
		parts = ll.parts(s.format, s.seed, parts)
	}
	return parts
}

// readOutlined checks a line longer than maxLineSize from its outline,
// which says what the line says (outline.go), and reads an entry's light
// parts onto parts. A line that is not valid JSON is left to be read whole
// (whole): it is damaged, and cut as any other.
func (s *streamRepair) readOutlined(ol *lineOutline, r *scanLine, k *keyCheck, ll *lightLine, parts []lightPart) []lightPart {
	switch {
	case ol.blank:
		r.fl = fBlank
	case !ol.valid:
		r.whole = true
		return parts
	case ol.tooBig:
		r.tooBig = true
		return parts
	default:
		s.extract(ol.out, r, k)
		r.sum = ol.sum
		if r.fl&fEntry != 0 {
			ll.readChecked(s.format, ol.out, k)
			parts = ll.parts(s.format, s.seed, parts)
		}
	}
	if ol.bom {
		r.bom, r.cut = true, len(utf8BOM)
	}
	return parts
}

// glued looks, in a line that is not valid, for an entry glued onto a
// torn fragment (glued.go); r and k then describe that entry and r.cut
// is the fragment's length. A line of more than one entry is left to the
// in-memory repair (r.many).
func (s *streamRepair) glued(line []byte, r *scanLine, k *keyCheck) {
	c, _ := codecFor(s.format)
	frag, spans := splitGlued(line, func(b []byte) bool { return c.checkLine(b) == "" }, gluedEntry(s.format, c))
	switch {
	case len(spans) == 0:
		return
	case len(spans) > 1 || frag == 0:
		r.many = true
		return
	}
	s.extract(line[frag:], r, k)
	r.cut = frag
}

// dropFragment drops the torn fragment at the start of line idx, whose
// glued entry is kept, and salvages its id and parent.
func (s *streamRepair) dropFragment(idx int, frag []byte) {
	s.cut[idx] += len(frag)
	s.dropped = append(s.dropped, Change{Kind: ChangeDropFragment, Line: idx + 1, Reason: fragmentReason(frag, 1)})
	s.salvage(idx, frag, true)
}

func (s *streamRepair) drop(idx int, why string, line []byte) {
	s.lt.setFlags(idx, s.lt.flags(idx)|fBad)
	s.dropped = append(s.dropped, Change{Kind: ChangeDropLine, Line: idx + 1, Reason: why})
	if line != nil {
		s.salvage(idx, line, false)
	}
}

// salvage keeps the id and parent a dropped line (or torn fragment) still
// holds whole, through which the children of its lost entry are relinked.
func (s *streamRepair) salvage(idx int, line []byte, fragment bool) {
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
	// As the in-memory repair reads them: decoded.
	if okID {
		str, ok := jsonString(id)
		okID = ok && str != ""
	}
	if okPar && string(par) != "null" {
		_, okPar = jsonString(par)
	}
	if !okPar {
		return
	}
	var h uint64
	if okID {
		if h = s.idHash(id); s.lost[h] != nil {
			return
		}
	}
	sv := &salvage{line: idx + 1, parentIdx: noParent, fragment: fragment}
	if string(par) == "null" {
		sv.parentNull = true
	} else {
		sv.parent = s.idHash(par)
		at := idx
		if fragment {
			at = -1 // not the parent of the line's entry, which is kept
		}
		sv.parentIdx = s.lookup(sv.parent, at, par)
	}
	if !okID {
		s.torn = append(s.torn, sv) // its id torn away: see tornBefore
		return
	}
	s.lost[h] = sv
}

// tornBefore returns the dropped line nearest before line n (1-based)
// that names its parent but lost its own id, and whether it comes after
// line after, as the in-memory tornBefore does (a torn fragment on line n
// itself comes before the entry glued onto it).
func (s *streamRepair) tornBefore(after, n int) (*salvage, bool) {
	k := sort.Search(len(s.torn), func(k int) bool { return s.torn[k].line > n })
	if k == 0 {
		return nil, false
	}
	t := s.torn[k-1]
	return t, t.line > after
}

// lookup finds the line of an id among the recent ones, or records a far
// reference for the line idx (-1 for a salvaged parent).
func (s *streamRepair) lookup(h uint64, idx int, raw []byte) int32 {
	if slot, ok := s.winIdx.get(h); ok {
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
	s.lt.setFlags(idx, fl)
	if r.hasPar && (fl&fID == 0 || r.ph != r.h) {
		s.lt.setParent(idx, s.lookup(r.ph, idx, line[r.parAt[0]:r.parAt[1]]))
	}
	if fl&fID == 0 {
		return
	}
	h := r.h
	if slot, ok := s.winIdx.get(h); ok {
		w := s.win[slot]
		switch {
		case w.cand:
			// The line standing for the id may repeat an earlier one:
			// this one is judged against the first with it.
			s.cands = append(s.cands, repeatCand{line: int32(idx), h: h, sum: r.sum})
		case w.sum == r.sum:
			s.dropRepeat(idx, int(w.line))
			if n := len(s.far); n > 0 && s.far[n-1].line == int32(idx) {
				s.far = s.far[:n-1]
			}
		default:
			s.owner[int32(idx)] = w.line
		}
		return
	}
	old := s.win[s.winPos]
	if old.line >= 0 && s.bloom == nil {
		// A small file's window is full after all (it is sized by the
		// file): the filter from here.
		s.bloom = make([]uint64, bloomBits/64)
		for _, w := range s.win {
			s.bloomAdd(w.id)
		}
	}
	// An id the filter has seen, which the window no longer holds, may
	// be a line written twice far apart (or the filter's false
	// positive): a candidate, looked up with the far parents.
	cand := s.bloom != nil && s.bloomTestAdd(h)
	if cand {
		s.cands = append(s.cands, repeatCand{line: int32(idx), h: h, sum: r.sum})
	}
	if slot, ok := s.winIdx.get(old.id); old.line >= 0 && ok && slot == int32(s.winPos) {
		s.winIdx.del(old.id)
	}
	s.win[s.winPos] = winSlot{id: h, line: int32(idx), sum: r.sum, cand: cand}
	s.winIdx.put(h, int32(s.winPos))
	s.winPos = (s.winPos + 1) % len(s.win)
}

// dropRepeat drops line idx, which repeats line first byte for byte (the
// same entry written twice).
func (s *streamRepair) dropRepeat(idx, first int) {
	s.lt.setFlags(idx, s.lt.flags(idx)|fBad)
	s.lt.setParent(idx, noParent)
	s.dups = append(s.dups, Change{Kind: ChangeDropDuplicate, Line: idx + 1,
		Reason: fmt.Sprintf("line %d repeats line %d (the same entry written twice)", idx+1, first+1)})
}

// bloomBits is the size of the filter of ids kept once the window no
// longer holds them all: 2 MiB, 5 bits per id. The filter is blocked: an
// id's five bits fall in one 64-byte block (a cache line), so adding or
// testing it costs one cache miss, not five spread over 2 MiB. For 400,000
// ids about one lookup of an id not in the file in 40,000 says "maybe",
// which costs one more pass, never a wrong answer. A power of two; a var
// for tests, which make it small for false positives.
var bloomBits = 1 << 24

// bloomPos returns the words of an id's five bits and the bit in each: the
// block from the low half of its 64-bit hash, the five 9-bit offsets in the
// block from a remix of the whole hash.
func bloomPos(h uint64) (word [5]int, bit [5]uint64) {
	block := int(h & uint64(bloomBits/512-1)) // the low bits: bloomBits is a power of two
	h2 := h * 0x9e3779b97f4a7c15
	for i := range 5 {
		off := int(h2>>(9*i+19)) & 511
		word[i], bit[i] = block*8+off/64, 1<<(off%64)
	}
	return word, bit
}

func (s *streamRepair) bloomAdd(h uint64) {
	w, b := bloomPos(h)
	for i := range w {
		s.bloom[w[i]] |= b[i]
	}
}

func (s *streamRepair) bloomHas(h uint64) bool {
	w, b := bloomPos(h)
	for i := range w {
		if s.bloom[w[i]]&b[i] == 0 {
			return false
		}
	}
	return true
}

// bloomTestAdd adds an id and reports whether the filter had it: one
// cache line read and written once.
func (s *streamRepair) bloomTestAdd(h uint64) bool {
	w, b := bloomPos(h)
	had := true
	for i := range w {
		had = had && s.bloom[w[i]]&b[i] != 0
		s.bloom[w[i]] |= b[i]
	}
	return had
}

// resolveFar looks up, in one more pass over the file, the parents that
// were not among the recent ids and the first lines of the ids of the
// repeat candidates (repeats.go), and settles both.
func (s *streamRepair) resolveFar() error {
	if len(s.far) == 0 && len(s.cands) == 0 {
		s.win, s.winIdx, s.bloom = nil, nil, nil
		return nil
	}
	// A parent the ids seen say is not in the file is missing; one still
	// in the window was written after its child (unless the window's line
	// may repeat an earlier one: then the first is looked for); only the
	// others need another pass.
	want := s.repeatWant()
	far := make(map[uint64]int32, len(s.far))
	for _, r := range s.far {
		switch slot, ok := s.winIdx.get(r.ph); {
		case ok && !s.win[slot].cand:
			far[r.ph] = s.win[slot].line
		case s.bloom == nil || !s.bloomHas(r.ph):
			far[r.ph] = missingParent
		default:
			far[r.ph] = farParent
			if want[r.ph] == nil {
				want[r.ph] = &idFirst{line: farParent}
			}
		}
	}
	if len(want) > 0 {
		if err := s.firstLines(want, s.n); err != nil {
			return err
		}
	}
	s.applyRepeats(want)
	s.win, s.winIdx, s.bloom = nil, nil, nil
	for h, at := range far {
		if at == farParent {
			far[h] = want[h].line // missingParent when not found
		}
	}
	for _, r := range s.far {
		at := far[r.ph]
		if r.line >= 0 && s.lt.flags(int(r.line))&fBad == 0 {
			s.lt.setParent(int(r.line), at)
			if at == missingParent {
				s.broken[int(r.line)] = r.parent
			}
			if at > r.line {
				s.early = append(s.early, r.line)
			}
		}
	}
	for _, sv := range s.lost {
		if sv.parentIdx == farParent {
			sv.parentIdx = far[sv.parent]
		}
	}
	for _, sv := range s.torn {
		if sv.parentIdx == farParent {
			sv.parentIdx = far[sv.parent]
		}
	}
	return s.lt.err
}

// link relinks the broken links and walks the path from the leaf.
func (s *streamRepair) link() error {
	t := s.lt
	if len(s.broken) > 0 && s.format == FormatClaude {
		// Children per line, up to 2.
		for i := 0; i < s.n; i++ {
			if p := t.parent(i); p >= 0 && t.flags(i)&fBad == 0 {
				if m := t.marks(int(p)); m&mKid1 == 0 {
					t.mark(int(p), mKid1)
				} else {
					t.mark(int(p), mKid2)
				}
			}
		}
	}
	broken := make([]int, 0, len(s.broken))
	for i := range s.broken {
		broken = append(broken, i)
	}
	sort.Ints(broken)
	for _, i := range broken {
		p := s.broken[i]
		target := int32(missingParent)
		h := maphash.String(s.seed, p)
		var via *salvage
		for hops := 0; hops <= len(s.lost); hops++ {
			sv, ok := s.lost[h]
			if !ok {
				break
			}
			if via == nil {
				via = sv
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
			via = nil
			target = noParent
			side := t.flags(i) & fSide
			// An entry is named by its id, the first line with it: a later
			// line with the id stands for that line, and a line with the
			// child's own id is not its ancestor.
			own := func(j int) int {
				if o, ok := s.owner[int32(j)]; ok {
					return int(o)
				}
				return j
			}
			self := own(i)
			fits := func(j int) bool {
				fl := t.flags(j)
				if fl&(fID|fBad) != fID || own(j) == self {
					return false
				}
				if s.format == FormatClaude && fl&(fConv|fSide) != fConv|side {
					return false
				}
				if s.format == FormatClaude && fl&fResult != 0 {
					if pj := t.parent(j); pj >= 0 && s.broken[j] == "" && t.marks(int(pj))&mKid2 != 0 {
						return false
					}
				}
				return true
			}
			after := 0 // the line (1-based) of the nearest line before that fits
			for j := i - 1; j >= 0; j-- {
				if fits(j) {
					target, after = int32(own(j)), j+1
					break
				}
			}
			if tn, ok := s.tornBefore(after, i+1); ok {
				switch p := tn.parentIdx; {
				case tn.parentNull:
					target, s.brokenTorn[i] = noParent, tn.line
				case p >= 0 && int(p)+1 < tn.line && fits(int(p)):
					target, s.brokenTorn[i] = p, tn.line
				}
			}
		}
		t.setParent(i, target)
		if via != nil {
			s.brokenVia[i] = via
		}
		if target >= 0 {
			s.targets[int(target)] = ""
		}
	}
	leaf := -1
	for i := s.n - 1; i >= 0; i-- {
		fl := t.flags(i)
		if fl&(fEntry|fBad) != fEntry {
			continue
		}
		if s.format == FormatClaude && (fl&fID == 0 || fl&fConv == 0 || s.anyMain && fl&fSide != 0) {
			continue
		}
		leaf = i
		break
	}
	owner, repeat := s.owner[int32(leaf)]
	if repeat && s.format == FormatClaude {
		// The leaf has the id of an earlier line: the result lines that
		// hang on that line belong after the leaf too (by id, as the
		// in-memory repair pairs them), which the line-by-line reading
		// does not do.
		return errNoStream
	}
	for cur := leaf; cur >= 0 && !t.onPath(cur); {
		t.mark(cur, mPath)
		p := int(t.parent(cur))
		if p >= 0 && t.flags(cur)&fResult != 0 {
			t.mark(p, mResCh)
		}
		if p < 0 {
			break
		}
		if p >= cur {
			return errNoStream // a child written before its parent
		}
		cur = p
	}
	if repeat && t.onPath(int(owner)) {
		// The leaf and the line whose id it has are both on the path:
		// the results repair makes up after their calls take ids made
		// from that id, which the in-memory repair, writing the whole
		// path at once, keeps apart.
		return errNoStream
	}
	for _, i := range s.early {
		if p := t.parent(int(i)); p >= 0 && t.onPath(int(p)) {
			// Repair may drop the parent from the path, and relink its
			// children: the write pass would have passed this one.
			return errNoStream
		}
	}
	if len(s.broken) > 0 {
		// A broken link's rank: the path entries before it.
		rank := 0
		for i := 0; i < s.n; i++ {
			if t.onPath(i) {
				if _, ok := s.broken[i]; ok {
					s.rank[i] = rank
				}
				rank++
			}
		}
	}
	return t.err
}

// anyEntry reports whether any line is a valid entry.
func (s *streamRepair) anyEntry() bool {
	for i := 0; i < s.n; i++ {
		if s.lt.flags(i)&(fEntry|fBad) == fEntry {
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
		target := "made a root: no earlier entry can be its ancestor"
		if v, ok := s.brokenVia[l]; ok {
			why = goneWith(p, v.line, v.fragment)
		} else if tl, ok := s.brokenTorn[l]; ok {
			why, target = tornWhy(p, tl, l+1)
		}
		if t := s.lt.parent(l); t >= 0 {
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
