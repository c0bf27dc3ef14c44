package transcript

import (
	"hash/maphash"
	"unicode"
	"unicode/utf8"
)

// This file reads a line too long to hold (longer than maxLineSize: a
// tool result that holds a whole file can make one) in pieces, and keeps
// its outline: the line as the checks read it, without the rest. An
// agent writes such a line and reads it back as any other (Claude Code
// and pi parse each line with JSON.parse, which takes up to about 512 MiB),
// so it is kept: copied from the file to the new one as it is, or with its
// parent link patched, never held whole.
//
// The outline is a compact JSON line: the same top-level object with
// every key (keys are checked for repeats and case), and of the values
//
//   - the ones an entry is identified and linked by, as they are: the
//     entry's type, id and parent (and Claude Code's sessionId, leafUuid,
//     messageId, isSidechain, isApiErrorMessage; pi's version; a role);
//   - its message object, with every key; its role, id, stop reason and
//     result's call id as they are; its content (a string, or an array of
//     blocks, each with every key, its type, id, name and tool_use_id as
//     they are);
//   - every other string as "" when it is blank (only spaces, as
//     strings.TrimSpace reads it, escapes decoded) and "x" when not,
//     every other number as 0, and every other object or array as {} or
//     [] (an input is then still not null).
//
// So a check of the outline says what the same check of the line says
// (FuzzOutline holds the two to it): its validity (the line is validated
// whole, as validJSON does, as it is read), its keys, its type, ids and
// parent, its messages' roles, calls, results and blank text. The outline
// of a line is its keys and ids, and tens of bytes a content block; one
// longer than maxOutlineSize (a line of millions of blocks) is not kept
// (tooBig).

// maxOutlineSize bounds an outline, which is held as a line is: to
// MaxLineSize. A var for tests.
var maxOutlineSize = MaxLineSize

// lineOutline is what reading a long line found.
type lineOutline struct {
	out    []byte // the outline, when valid
	valid  bool   // the line is one valid JSON value
	blank  bool   // the line holds nothing but blanks
	tooBig bool   // its outline is longer than maxOutlineSize: not kept
	bom    bool   // it began with a byte-order mark (the file's first line), not counted in it
	n      int64  // its length, without the byte-order mark and the line end
	sum    uint64 // hash of those bytes (the seed given)
	// The span of the first top-level value of the key asked for (the
	// parent link), -1 when it has none; the object's closing brace and
	// the end of what comes before it (where a member is appended), and
	// whether the object has no member.
	parAt    [2]int64
	closeAt  int64
	headEnd  int64
	headOpen bool
}

// Value modes: what the outline keeps of a value.
type omode uint8

const (
	oSilent  omode = iota // inside a value left out: nothing
	oKeep                 // as it is (a container: {} or [])
	oBlank                // a placeholder ("" or "x", 0, {} or [])
	oLine                 // the top-level object
	oMessage              // the message object
	oContent              // the message's content
	oBlock                // a content block
)

// Lexer states.
const (
	stValue       = iota // a value may start
	stFirstMember        // after '{': a key or '}'
	stMember             // after ',' in an object: a key
	stColon              // after a key
	stAfterMember        // after a member's value: ',' or '}'
	stFirstElem          // after '[': a value or ']'
	stAfterElem          // after an element: ',' or ']'
	stString             // in a string
	stEscape             // after a backslash
	stHex                // in the four hex digits of \u
	stLiteral            // in true, false or null
	stNumSign            // after '-'
	stNumZero            // after a leading 0
	stNumInt             // in the integer digits
	stNumDot             // after '.'
	stNumFrac            // in the fraction
	stNumE               // after 'e'
	stNumESign           // after the exponent's sign
	stNumExp             // in the exponent
	stEnd                // after the top-level value
	stBad                // not valid
)

// oframe is an open object or array.
type oframe struct {
	obj   bool
	mode  omode // oSilent, oLine, oMessage, oContent or oBlock: what its members are read as
	n     int   // members or elements so far
	next  omode // the mode of the member being read
	start int64 // where it starts in the line
	valAt int64 // where the value of the member being read starts
	isPar bool  // oLine: the member being read is the parent link
}

// outliner reads one long line, written to it in pieces (without the
// line end; a last '\r' is taken for part of the line end).
type outliner struct {
	ol     lineOutline
	hash   maphash.Hash
	parKey string // the top-level key whose span parAt records ("": none)

	start   []byte // the first bytes, until it is known whether they are a byte-order mark
	atStart bool
	cr      bool // a '\r' held back: part of the line end if nothing follows

	st      int
	stack   []oframe
	mode    omode // the mode of the value being read
	lit     string
	litAt   int
	hexN    int
	hexV    rune
	keyAt   int  // where the key being read starts in out (-1: not kept)
	inKey   bool // the string being read is a key
	strKeep bool // the string is kept as it is
	strMode omode
	sp      spaceRunes // whether the string read so far is blank
	line    spaceRunes // whether the line read so far is blank
	pos     int64      // where the bytes being read start in the line (without a byte-order mark)
}

// newOutliner starts the outline of a line; fileStart says it is the
// file's first (a byte-order mark is then not part of it), parKey names
// the key whose value's span to record.
func newOutliner(seed maphash.Seed, fileStart bool, parKey string) *outliner {
	o := &outliner{parKey: parKey, atStart: fileStart, keyAt: -1, mode: oLine}
	o.hash.SetSeed(seed)
	o.ol.parAt = [2]int64{-1, -1}
	o.ol.closeAt = -1
	o.sp.blank, o.line.blank = true, true
	return o
}

// write reads the next bytes of the line.
func (o *outliner) write(p []byte) {
	if len(p) == 0 {
		return
	}
	if o.cr {
		o.cr = false
		o.take([]byte{'\r'})
	}
	if p[len(p)-1] == '\r' {
		o.cr = true
		p = p[:len(p)-1]
	}
	o.take(p)
}

// take reads bytes of the line, the first ones unless they are a
// byte-order mark.
func (o *outliner) take(p []byte) {
	if o.atStart {
		need := len(utf8BOM) - len(o.start)
		take := min(need, len(p))
		o.start = append(o.start, p[:take]...)
		p = p[take:]
		if len(o.start) < len(utf8BOM) {
			if string(o.start) != string(utf8BOM[:len(o.start)]) {
				o.atStart = false
				o.content(o.start)
			}
			return
		}
		o.atStart = false
		if string(o.start) == string(utf8BOM) {
			o.ol.bom = true
		} else {
			o.content(o.start)
		}
	}
	o.content(p)
}

// finish ends the line and returns its outline.
func (o *outliner) finish() *lineOutline {
	if o.atStart {
		o.atStart = false
		o.content(o.start) // shorter than a byte-order mark
	}
	// A held '\r' is the line end's.
	o.end()
	ol := &o.ol
	ol.n, ol.sum = o.pos, o.hash.Sum64()
	ol.blank = o.line.done()
	if !ol.valid || ol.tooBig {
		ol.out = nil
	}
	return ol
}

// content reads bytes of the line itself.
func (o *outliner) content(p []byte) {
	if len(p) == 0 {
		return
	}
	o.hash.Write(p)
	o.line.write(p)
	for i := 0; i < len(p); {
		i = o.step(p, i)
	}
	o.pos += int64(len(p))
}

func isWS(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

// emit appends to the outline, unless the value is left out.
func (o *outliner) emit(b ...byte) {
	if o.ol.tooBig {
		return
	}
	o.ol.out = append(o.ol.out, b...)
	if len(o.ol.out) > maxOutlineSize {
		o.ol.tooBig, o.ol.out = true, nil
	}
}

func (o *outliner) emitting() bool { return o.mode != oSilent }

func (o *outliner) fail() { o.st = stBad }

// step reads from p[i] and returns where it stopped.
func (o *outliner) step(p []byte, i int) int {
	c := p[i]
	switch o.st {
	case stBad:
		return len(p)
	case stValue, stFirstElem:
		if isWS(c) {
			return i + 1
		}
		if o.st == stFirstElem && c == ']' {
			o.close(i)
			return i + 1
		}
		return o.value(c, i)
	case stFirstMember, stMember:
		if isWS(c) {
			return i + 1
		}
		if o.st == stFirstMember && c == '}' {
			o.close(i)
			return i + 1
		}
		if c != '"' {
			o.fail()
			return i
		}
		f := o.top()
		if f.mode != oSilent {
			if f.n > 0 {
				o.emit(',')
			}
			o.keyAt = len(o.ol.out)
			o.emit('"')
		}
		o.inKey, o.strKeep, o.st = true, f.mode != oSilent, stString
		return i + 1
	case stColon:
		if isWS(c) {
			return i + 1
		}
		if c != ':' {
			o.fail()
			return i
		}
		o.st = stValue
		return i + 1
	case stAfterMember, stAfterElem:
		if isWS(c) {
			return i + 1
		}
		f := o.top()
		switch {
		case c == ',' && o.st == stAfterMember:
			o.st = stMember
		case c == ',':
			o.st = stValue
			o.mode = f.next
			if f.mode != oSilent {
				o.emit(',')
			}
		case c == '}' && o.st == stAfterMember, c == ']' && o.st == stAfterElem:
			o.close(i)
		default:
			o.fail()
			return i
		}
		return i + 1
	case stString:
		j := i
		for j < len(p) && p[j] >= 0x20 && p[j] != '"' && p[j] != '\\' {
			j++
		}
		if j > i {
			if o.strKeep {
				o.emit(p[i:j]...)
			} else if !o.inKey {
				o.sp.write(p[i:j])
			}
		}
		if j == len(p) {
			return j
		}
		switch p[j] {
		case '"':
			o.endString(j)
		case '\\':
			if o.strKeep {
				o.emit('\\')
			}
			o.st = stEscape
		default: // a control character
			o.fail()
		}
		return j + 1
	case stEscape:
		if o.strKeep {
			o.emit(c)
		}
		switch c {
		case '"', '\\', '/', 'b':
			o.sp.not()
		case 'f', 'n', 'r', 't':
			o.sp.escaped(' ')
		case 'u':
			o.st, o.hexN, o.hexV = stHex, 0, 0
			return i + 1
		default:
			o.fail()
			return i
		}
		o.st = stString
		return i + 1
	case stHex:
		if !isHex(c) {
			o.fail()
			return i
		}
		if o.strKeep {
			o.emit(c)
		}
		o.hexV = o.hexV<<4 | rune(hexVal(c))
		if o.hexN++; o.hexN == 4 {
			if o.hexV >= 0xd800 && o.hexV < 0xe000 {
				o.sp.not() // a surrogate: a rune above the spaces, or U+FFFD
			} else {
				o.sp.escaped(o.hexV)
			}
			o.st = stString
		}
		return i + 1
	case stLiteral:
		if c != o.lit[o.litAt] {
			o.fail()
			return i
		}
		if o.litAt++; o.litAt == len(o.lit) {
			if o.emitting() {
				o.emit([]byte(o.lit)...)
			}
			o.valueDone(i + 1)
		}
		return i + 1
	case stEnd:
		if !isWS(c) {
			o.fail()
		}
		return i + 1
	}
	return o.number(c, i)
}

func hexVal(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// number reads a byte of a number; a byte that ends it is read again in
// the state after it.
func (o *outliner) number(c byte, i int) int {
	digit := c >= '0' && c <= '9'
	next := -1
	switch o.st {
	case stNumSign:
		switch {
		case c == '0':
			next = stNumZero
		case digit:
			next = stNumInt
		}
		if next < 0 {
			o.fail()
			return i
		}
	case stNumZero, stNumInt:
		switch {
		case digit && o.st == stNumInt:
			next = stNumInt
		case c == '.':
			next = stNumDot
		case c == 'e' || c == 'E':
			next = stNumE
		}
	case stNumDot, stNumFrac:
		switch {
		case digit:
			next = stNumFrac
		case o.st == stNumDot:
			o.fail()
			return i
		case c == 'e' || c == 'E':
			next = stNumE
		}
	case stNumE:
		switch {
		case c == '+' || c == '-':
			next = stNumESign
		case digit:
			next = stNumExp
		default:
			o.fail()
			return i
		}
	case stNumESign, stNumExp:
		switch {
		case digit:
			next = stNumExp
		case o.st == stNumESign:
			o.fail()
			return i
		}
	}
	if next < 0 { // the number has ended: this byte is read again
		o.endNumber(i)
		return i
	}
	if o.mode == oKeep {
		o.emit(c)
	}
	o.st = next
	return i + 1
}

func (o *outliner) endNumber(at int) {
	if o.mode != oKeep && o.emitting() {
		o.emit('0')
	}
	o.valueDone(at)
}

// value starts the value that begins with c at p[i].
func (o *outliner) value(c byte, i int) int {
	at := o.pos + int64(i)
	if len(o.stack) == 1 {
		o.stack[0].valAt = at
	}
	if c != '"' && len(o.stack) > maxDepth {
		o.fail() // as deep as validJSON takes (a string is never too deep)
		return i
	}
	switch c {
	case '{', '[':
		m := oSilent
		switch {
		case c == '{' && (o.mode == oLine || o.mode == oMessage || o.mode == oBlock):
			m = o.mode
			o.emit(c)
		case c == '[' && o.mode == oContent:
			m = oContent
			o.emit(c)
		case o.mode != oSilent:
			o.emit(c, c+2) // {} or []
		}
		f := oframe{obj: c == '{', mode: m, start: at}
		if c == '[' {
			switch m {
			case oContent:
				f.next = oBlock
			case oSilent:
				f.next = oSilent
			}
			o.st = stFirstElem
		} else {
			o.st = stFirstMember
		}
		o.stack = append(o.stack, f)
		o.mode = f.next
		return i + 1
	case '"':
		o.inKey, o.st = false, stString
		o.strKeep, o.strMode = o.mode == oKeep, o.mode
		o.sp = spaceRunes{blank: true}
		if o.strKeep {
			o.emit('"')
		}
		return i + 1
	case 't', 'f', 'n':
		switch c {
		case 't':
			o.lit = "true"
		case 'f':
			o.lit = "false"
		default:
			o.lit = "null"
		}
		o.litAt, o.st = 1, stLiteral
		return i + 1
	case '-':
		o.st = stNumSign
	case '0':
		o.st = stNumZero
	default:
		if c < '1' || c > '9' {
			o.fail()
			return i
		}
		o.st = stNumInt
	}
	if o.mode == oKeep {
		o.emit(c)
	}
	return i + 1
}

// endString ends the string whose closing quote is p[j].
func (o *outliner) endString(j int) {
	if o.inKey {
		o.inKey = false
		o.st = stColon
		f := o.top()
		if f.mode == oSilent {
			f.next = oSilent
			o.mode = oSilent
			return
		}
		o.emit('"', ':')
		key := ""
		if o.keyAt >= 0 && !o.ol.tooBig {
			key = string(o.ol.out[o.keyAt+1 : len(o.ol.out)-2])
		}
		f.next = memberMode(f.mode, key)
		f.isPar = f.mode == oLine && o.parKey != "" && key == o.parKey && o.ol.parAt[0] < 0
		o.mode = f.next
		return
	}
	switch {
	case o.strKeep:
		o.emit('"')
	case o.strMode != oSilent:
		if o.sp.done() {
			o.emit('"', '"')
		} else {
			o.emit('"', 'x', '"')
		}
	}
	o.valueDone(j + 1)
}

// memberMode is the mode of the value of key in an object read as m.
func memberMode(m omode, key string) omode {
	switch m {
	case oLine:
		switch key {
		case "message":
			return oMessage
		case "type", "id", "uuid", "parentId", "parentUuid", "sessionId", "leafUuid", "messageId",
			"version", "role", "isSidechain", "isApiErrorMessage":
			return oKeep
		}
	case oMessage:
		switch key {
		case "content":
			return oContent
		case "role", "id", "stopReason", "stop_reason", "toolCallId":
			return oKeep
		}
	case oBlock:
		switch key {
		case "type", "id", "name", "tool_use_id":
			return oKeep
		}
	}
	return oBlank
}

func (o *outliner) top() *oframe { return &o.stack[len(o.stack)-1] }

// close closes the innermost object or array at p[i].
func (o *outliner) close(i int) {
	f := o.stack[len(o.stack)-1]
	if f.mode != oSilent {
		if f.obj {
			o.emit('}')
		} else {
			o.emit(']')
		}
	}
	if len(o.stack) == 1 && f.obj {
		o.ol.closeAt = o.pos + int64(i)
		o.ol.headOpen = f.n == 0
		if f.n == 0 {
			o.ol.headEnd = f.start + 1
		}
	}
	o.stack = o.stack[:len(o.stack)-1]
	o.valueDone(i + 1)
}

// valueDone ends a value whose last byte is before p[at].
func (o *outliner) valueDone(at int) {
	end := o.pos + int64(at)
	if len(o.stack) == 0 {
		o.st = stEnd
		o.mode = oSilent
		return
	}
	f := o.top()
	f.n++
	if f.obj {
		o.st = stAfterMember
		if len(o.stack) == 1 {
			o.ol.headEnd = end
			if f.isPar {
				o.ol.parAt = [2]int64{f.valAt, end}
				f.isPar = false
			}
		}
	} else {
		o.st = stAfterElem
	}
	o.mode = oSilent
	if !f.obj {
		o.mode = f.next
	}
}

// end ends the line.
func (o *outliner) end() {
	switch o.st {
	case stNumZero, stNumInt, stNumFrac, stNumExp:
		o.endNumber(0)
	}
	o.ol.valid = o.st == stEnd
}

// spaceRunes tells whether the runes of a byte stream are all spaces
// (unicode.IsSpace, as strings.TrimSpace reads them: bytes that are not
// UTF-8 are U+FFFD, not a space), with escaped runes among them.
type spaceRunes struct {
	blank bool
	pend  [utf8.UTFMax]byte // the start of a rune cut by the end of a piece
	np    int
}

func (r *spaceRunes) write(p []byte) {
	for i := 0; i < len(p) && r.blank; i++ {
		c := p[i]
		if r.np == 0 && c < utf8.RuneSelf {
			r.blank = asciiSpace(c)
			continue
		}
		r.pend[r.np] = c
		r.np++
		if !utf8.FullRune(r.pend[:r.np]) {
			continue
		}
		ru, size := utf8.DecodeRune(r.pend[:r.np])
		if size < r.np || !unicode.IsSpace(ru) {
			r.blank = false // not UTF-8 (U+FFFD), or not a space
		}
		r.np = 0
	}
}

// escaped reads a rune written as an escape.
func (r *spaceRunes) escaped(ru rune) {
	if r.np > 0 || !unicode.IsSpace(ru) {
		r.blank = false
	}
}

// not reads a rune that is not a space.
func (r *spaceRunes) not() { r.blank = false }

// done reports whether every rune was a space (a rune cut short is not).
func (r *spaceRunes) done() bool { return r.blank && r.np == 0 }

func asciiSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}
