package transcript

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
)

// entry is one line of a JSONL file, or one element of a JSON array.
type entry struct {
	line  int    // 1-based line number, or element number
	off   int64  // byte offset in the file
	raw   []byte // the bytes, without the line terminator
	term  string // "\n", "\r\n", or "" for a last line without one
	blank bool   // a blank line: kept as it is, not an entry

	id, parent  string // tree formats: own id and parent id ("" for null)
	link        string // tree formats: the parent as repaired (== parent unless broken)
	repeat      bool   // tree formats: an earlier entry has its id (and other bytes): the id names that one
	broken      bool   // tree formats: parent is not in the file
	via         []int  // dropped lines the link was followed through
	viaFragment bool   // the first of them is a torn fragment (glued.go)
	viaTorn     int    // the torn line (its id lost) whose parent the link is
	path        bool   // on the conversation path
	branch      bool   // Claude Code: a result line hanging off the path on its call's line
	parts       int    // messages made from it
	sep         []byte // JSON array: the bytes between the element before and this one
}

// droppedLine is a line Parse dropped (or the torn fragment at the start
// of a line whose glued entries it kept), kept to salvage its first
// fields.
type droppedLine struct {
	line     int
	raw      []byte
	fragment bool
}

// outEntry is one entry a writer produces: an entry as read (src) with
// possibly new bytes, or a new one.
type outEntry struct {
	src *entry
	raw []byte
	id  string
	// branch: a Claude Code result line that hangs on its call's line
	// (parent) instead of continuing the chain.
	branch bool
	parent string
}

// codec is one format's reader and writer.
type codec interface {
	// checkHeader validates the first line of a format that has a header.
	checkHeader(line []byte) error
	hasHeader() bool
	// checkLine returns why a line is not a valid entry, or "".
	checkLine(line []byte) string
	// build makes d.items from d.entries and marks the path.
	build(d *Document) error
	// render writes items back as entries.
	render(d *Document, items []*Message) []outEntry
}

// Document is a transcript file as read: its entries, byte for byte, and
// the conversation they hold. Entries that are not messages (headers, model
// changes, progress lines, unknown types) are kept and written back as they
// were. Writing a Document whose messages did not change gives back the
// bytes it was parsed from.
type Document struct {
	Format Format
	// Dropped lists the lines Parse dropped (not valid JSON, or not valid
	// entries of the format, or an entry written twice), and the torn
	// fragments it dropped from lines whose glued entries it kept, with
	// line numbers and reasons.
	Dropped []Change
	// Relinked lists the entries of a tree format whose parent is not in
	// the file, and the surviving ancestor each is relinked to.
	Relinked []Change

	droppedRaw []droppedLine
	dirty      bool // something changed: Bytes writes the entries anew

	codec   codec
	data    []byte
	bom     int      // the bytes of a byte-order mark before data in the file
	entries []*entry // every line (JSONL), or every element (array), in order
	header  *entry
	items   []*Message // the conversation path: messages and opaque entries
	tree    bool       // entries link to parents (pi v2+, Claude Code)
	parentK string     // the parent field of a tree format
	term    string     // the terminator for new lines

	array  bool   // a JSON document, not JSONL
	prefix []byte // array layout: bytes before the first element,
	sep    []byte // between elements,
	suffix []byte // and after the last

	envelope []byte      // claude: the envelope fields of lines belay writes from scratch
	region   *regionOpts // set when the document is a region of a file repaired by streaming
	ids      map[string]bool
	version  int // pi: header version
	// piNames are the tool call names of the batch pi's render saw last
	// (piCallNames).
	piNames map[string]string
	jsonl   bool
	events  *belayDoc
	prevOut *string // a streaming export: the id of the last entry written before the items
}

func codecFor(f Format) (codec, error) {
	switch f {
	case FormatBelay:
		return belayCodec{}, nil
	case FormatPi:
		return piCodec{}, nil
	case FormatClaude:
		return claudeCodec{}, nil
	case FormatOpenAI:
		return openaiCodec{}, nil
	case FormatAnthropic:
		return anthropicCodec{}, nil
	}
	return nil, fmt.Errorf("%w %q: supported formats are %s", ErrUnknownFormat, f, supported())
}

// Parse reads a transcript. An empty format means detect it. Lines that
// are not valid are dropped and listed in Dropped, as is a UTF-8
// byte-order mark at the start, which is removed; a missing or invalid
// header fails with ErrInvalidHeader, a JSON document that does not parse
// with ErrInvalidDocument.
func Parse(data []byte, format Format) (*Document, error) {
	if format == "" {
		f, _, err := detect(data)
		if err != nil {
			return nil, err
		}
		format = f
	}
	c, err := codecFor(format)
	if err != nil {
		return nil, err
	}
	d := &Document{Format: format, codec: c, data: data, term: "\n"}
	if bytes.HasPrefix(data, utf8BOM) {
		d.data, d.bom = data[len(utf8BOM):], len(utf8BOM)
		d.Dropped = append(d.Dropped, bomChange())
	}
	t := bytes.TrimLeft(d.data, " \t\r\n")
	if format != FormatBelay && format != FormatPi && format != FormatClaude && len(t) > 0 && (t[0] == '[' || t[0] == '{' && isRequestObject(t)) {
		if err := d.splitArray(); err != nil {
			return nil, err
		}
	} else {
		d.jsonl = true
		if err := d.splitLines(); err != nil {
			return nil, err
		}
	}
	if err := c.build(d); err != nil {
		return nil, err
	}
	d.dirty = len(d.Dropped) > 0 || len(d.Relinked) > 0
	return d, nil
}

// splitLines splits JSONL into entries, validating each.
func (d *Document) splitLines() error {
	data := d.data
	var off int64
	lineNo := 0
	first := true
	for len(data) > 0 {
		lineNo++
		i := bytes.IndexByte(data, '\n')
		var line []byte
		term := "\n"
		if i < 0 {
			line, term, data = data, "", nil
		} else {
			line, data = data[:i], data[i+1:]
		}
		if n := len(line); n > 0 && line[n-1] == '\r' {
			line = line[:n-1]
			term = "\r" + term
		}
		e := &entry{line: lineNo, off: off, raw: line, term: term}
		off += int64(len(line) + len(term))
		if lineNo == 1 && len(term) == 2 {
			d.term = "\r\n"
		}
		if len(bytes.TrimSpace(line)) == 0 && d.Format != FormatBelay {
			e.blank = true
			d.entries = append(d.entries, e)
			continue
		}
		if first && d.codec.hasHeader() {
			first = false
			if err := d.codec.checkHeader(line); err != nil {
				return fmt.Errorf("%w: line %d: %v; the file was not changed", ErrInvalidHeader, lineNo, err)
			}
			d.header = e
			d.entries = append(d.entries, e)
			continue
		}
		first = false
		if d.region != nil && d.region.skip[lineNo] {
			continue // dropped by the scan, which reported it
		}
		if why := d.codec.checkLine(line); why != "" {
			if d.splitGlued(e) {
				continue
			}
			d.Dropped = append(d.Dropped, Change{Kind: ChangeDropLine, Line: lineNo, Reason: why})
			d.droppedRaw = append(d.droppedRaw, droppedLine{line: lineNo, raw: line})
			continue
		}
		d.entries = append(d.entries, e)
	}
	// Blank lines only: nothing to check, as in streaming repair.
	if d.codec.hasHeader() && d.header == nil && slices.ContainsFunc(d.entries, func(e *entry) bool { return !e.blank }) {
		return fmt.Errorf("%w: no header line; the file was not changed", ErrInvalidHeader)
	}
	return nil
}

// splitGlued keeps the whole entries at the end of a line that is not
// valid, written onto a torn entry or onto each other (glued.go), as
// entries of their own, and drops the torn fragment before them, keeping
// its bytes to salvage its id and parent. It reports false when the line
// holds no such entries: it is then dropped whole.
func (d *Document) splitGlued(e *entry) bool {
	if d.Format == FormatBelay {
		return false
	}
	frag, spans := splitGlued(e.raw, func(b []byte) bool { return d.codec.checkLine(b) == "" }, gluedEntry(d.Format, d.codec))
	if len(spans) == 0 {
		return false
	}
	if frag > 0 {
		d.Dropped = append(d.Dropped, Change{Kind: ChangeDropFragment, Line: e.line, Reason: fragmentReason(e.raw[:frag], len(spans))})
		d.droppedRaw = append(d.droppedRaw, droppedLine{line: e.line, raw: e.raw[:frag], fragment: true})
	} else {
		d.Dropped = append(d.Dropped, Change{Kind: ChangeSplitLine, Line: e.line, Reason: splitReason(len(spans))})
	}
	for i, sp := range spans {
		term := e.term
		if i < len(spans)-1 && term == "" {
			term = d.term
		}
		d.entries = append(d.entries, &entry{line: e.line, off: e.off + int64(sp[0]), raw: e.raw[sp[0]:sp[1]], term: term})
	}
	return true
}

// splitArray splits a JSON array (or the "messages" array of a request
// object) into entries.
func (d *Document) splitArray() error {
	if !json.Valid(d.data) {
		if n, ok := truncatedAt(d.data); ok {
			return fmt.Errorf("%w: the JSON document is truncated at byte %d (it ends in the middle of a value); the file was not changed", ErrInvalidDocument, d.bom+n)
		}
		var v any
		err := json.Unmarshal(d.data, &v)
		return fmt.Errorf("%w: %v; the file was not changed", ErrInvalidDocument, err)
	}
	d.array = true
	base := 0
	arr := d.data
	t := bytes.TrimLeft(d.data, " \t\r\n")
	if t[0] == '{' {
		topFields(d.data, func(f field) bool {
			if string(f.key) == "messages" {
				base, arr = f.start, d.data[f.start:f.end]
				return false
			}
			return true
		})
		if arr[0] != '[' {
			return fmt.Errorf("%w: \"messages\" is not an array; the file was not changed", ErrInvalidDocument)
		}
	} else if t[0] != '[' {
		return fmt.Errorf("%w: not a JSON array; the file was not changed", ErrInvalidDocument)
	}
	spans := arrayElems(arr)
	d.sep = []byte(",")
	if len(spans) == 0 {
		open := base + bytes.IndexByte(arr, '[') + 1
		d.prefix, d.suffix = d.data[:open], d.data[open:]
		return nil
	}
	d.prefix = d.data[:base+spans[0][0]]
	d.suffix = d.data[base+spans[len(spans)-1][1]:]
	if len(spans) > 1 {
		d.sep = d.data[base+spans[0][1] : base+spans[1][0]]
	}
	for i, s := range spans {
		raw := d.data[base+s[0] : base+s[1]]
		e := &entry{line: i + 1, off: int64(base + s[0]), raw: raw}
		if i > 0 {
			e.sep = d.data[base+spans[i-1][1] : base+s[0]]
		}
		if raw[0] != '{' || checkRoleLine(raw) != "" {
			// Not a message: keep it as it is.
			e.blank = true
		}
		d.entries = append(d.entries, e)
	}
	return nil
}

// anyEntry reports whether a JSONL document kept any entry besides its
// header and blank lines.
func (d *Document) anyEntry() bool {
	for _, e := range d.entries {
		if e != d.header && !e.blank {
			return true
		}
	}
	return false
}

// idSet returns the ids of the document's entries, to which writers add
// the ids they make.
func (d *Document) idSet() map[string]bool {
	if d.ids == nil {
		d.ids = make(map[string]bool, len(d.entries))
		for _, e := range d.entries {
			if e.id != "" {
				d.ids[e.id] = true
			}
		}
	}
	return d.ids
}

// Messages returns the conversation: the messages on the document's
// current path (for tree formats, from the root to the newest leaf), in
// order. Entries that are not messages are left out.
func (d *Document) Messages() []Message {
	var out []Message
	for _, m := range d.items {
		if !m.opaque() {
			out = append(out, *m)
		}
	}
	return out
}

// Repair applies message-level repair (RepairMessages) to the document's
// conversation; Bytes then writes the result. The belay journal is not
// changed by message-level repair: its events are the record of what
// happened (tool intents and settlements, G9), so the runtime repairs the
// conversation it replays instead (FromJournal, then RepairMessages).
func (d *Document) Repair() Report {
	if d.Format == FormatBelay {
		return Report{}
	}
	items, changes := repairItems(d.items, d.Format == FormatAnthropic)
	d.items = items
	if len(changes) > 0 {
		d.dirty = true
	}
	return Report{Changes: changes}
}

// Bytes writes the document back in its format. Entries and messages that
// did not change are written as the bytes they were read from.
func (d *Document) Bytes() ([]byte, error) {
	if d.data != nil && !d.dirty {
		return d.data, nil // nothing changed: the bytes as read
	}
	if d.Format == FormatBelay {
		return d.events.bytes(d)
	}
	out := d.codec.render(d, d.items)
	switch {
	case d.array:
		return d.assembleArray(out), nil
	case d.tree:
		return d.assembleTree(out), nil
	}
	return d.assembleLinear(out), nil
}

// assembleArray joins elements with the separator the document used.
func (d *Document) assembleArray(out []outEntry) []byte {
	// Elements that are not messages (blank) are kept at their place
	// relative to the messages around them through the items list; here
	// every output entry is an element.
	var buf bytes.Buffer
	buf.Write(d.prefix)
	for i, o := range out {
		if i > 0 {
			sep := d.sep
			// Neighbours as read keep the bytes between them.
			if p := out[i-1].src; p != nil && o.src != nil && o.src.sep != nil && p.line+1 == o.src.line {
				sep = o.src.sep
			}
			buf.Write(sep)
		}
		buf.Write(o.raw)
	}
	buf.Write(d.suffix)
	return buf.Bytes()
}

// lineWriter writes lines with their terminators, giving a last line
// without one a terminator when more lines follow it.
type lineWriter struct {
	buf     bytes.Buffer
	started bool
	pending string // terminator of the last line written
	term    string
}

func (w *lineWriter) line(raw []byte, term string) {
	if w.started && w.pending == "" {
		w.buf.WriteString(w.term)
	}
	w.buf.Write(raw)
	w.buf.WriteString(term)
	w.pending, w.started = term, true
}

func (d *Document) termOf(o outEntry) string {
	if o.src != nil {
		return o.src.term
	}
	return d.term
}

// assembleLinear writes the header, the output entries in order, and keeps
// blank lines where they were relative to the entry before them.
func (d *Document) assembleLinear(out []outEntry) []byte {
	w := &lineWriter{term: d.term}
	blanksAfter := map[*entry][]*entry{}
	var lead []*entry
	var prev *entry
	for _, e := range d.entries {
		if e.blank {
			if prev == nil {
				lead = append(lead, e)
			} else {
				blanksAfter[prev] = append(blanksAfter[prev], e)
			}
			continue
		}
		prev = e
	}
	if d.header != nil {
		w.line(d.header.raw, d.header.term)
		for _, b := range blanksAfter[d.header] {
			w.line(b.raw, b.term)
		}
	}
	for _, b := range lead {
		w.line(b.raw, b.term)
	}
	last := map[*entry]bool{}
	for i := len(out) - 1; i >= 0; i-- {
		if out[i].src != nil {
			last[out[i].src] = i == len(out)-1 || !slices.ContainsFunc(out[i+1:], func(o outEntry) bool { return o.src == out[i].src })
		}
	}
	for _, o := range out {
		w.line(o.raw, d.termOf(o))
		if o.src != nil && last[o.src] {
			for _, b := range blanksAfter[o.src] {
				w.line(b.raw, b.term)
			}
		}
	}
	return w.buf.Bytes()
}

// assembleTree writes a tree format. Entries off the conversation path
// stay where they were, byte for byte, unless their parent was dropped or
// is missing (then only the parent field changes). The path is threaded
// again: each path entry's parent becomes the entry before it on the path
// (Claude Code result lines hanging on their call's line keep that parent),
// so an entry changes only when its parent does. Path entries stay at their
// file positions; when repair reorders them they fill the positions the
// path held in the new order (the leaf stays last), and a new entry goes
// right after the entry before it.
func (d *Document) assembleTree(out []outEntry) []byte {
	b, _ := d.assembleTreeEntries(d.entries, out, map[string]string{})
	return b
}

// assembleTreeEntries is assembleTree over some of the document's entries
// (a region of a file repaired by streaming); droppedParent holds, and
// receives, the parents of the path entries dropped so far. It also
// returns the id of the last entry of the chain it wrote.
func (d *Document) assembleTreeEntries(entries []*entry, out []outEntry, droppedParent map[string]string) ([]byte, string) {
	inOut := make(map[*entry]bool, len(out))
	for _, o := range out {
		if o.src != nil {
			inOut[o.src] = true
		}
	}
	// Parents of dropped path entries, to relink their children (an entry
	// whose id names an earlier one has none of its own).
	for _, e := range entries {
		if e.path && !inOut[e] && e.id != "" && !e.repeat {
			droppedParent[e.id] = e.link
		}
	}
	resolve := func(p string) string {
		for i := 0; i < len(droppedParent)+1; i++ {
			q, ok := droppedParent[p]
			if !ok {
				return p
			}
			p = q
		}
		return p
	}
	// Thread the path.
	prev, first := "", true
	for i := range out {
		o := &out[i]
		var want string
		switch {
		case o.branch && o.src != nil:
			want = resolve(o.src.link)
		case o.branch:
			want = o.parent
		case first && o.src != nil:
			want = resolve(o.src.link)
		case !first:
			want = prev
		}
		if !o.branch {
			prev, first = o.id, false
		}
		have := ""
		if o.src != nil && bytes.Equal(o.raw, o.src.raw) {
			have = o.src.parent
		} else {
			have, _ = getString(o.raw, d.parentK)
		}
		if have != want || o.src == nil {
			o.raw = setField(o.raw, d.parentK, parentValue(want))
		}
	}
	// Each entry as read leads the new entries after it.
	type group struct {
		lead *outEntry
		outs []outEntry
	}
	index := make(map[*entry]int, len(entries))
	for i, e := range entries {
		index[e] = i
	}
	var groups []*group
	var pre []outEntry
	for i := range out {
		o := out[i]
		if o.src != nil {
			groups = append(groups, &group{lead: &out[i], outs: []outEntry{o}})
			continue
		}
		if len(groups) == 0 {
			pre = append(pre, o)
			continue
		}
		g := groups[len(groups)-1]
		g.outs = append(g.outs, o)
	}
	// Chain entries keep their positions when still in file order; else
	// they fill the positions the chain held, in the new order. Branch
	// entries stay where they were.
	bySlot := map[int]*group{}
	var chain []*group
	for _, g := range groups {
		if g.lead.branch {
			bySlot[index[g.lead.src]] = g
			continue
		}
		chain = append(chain, g)
	}
	slots := make([]int, len(chain))
	for i, g := range chain {
		slots[i] = index[g.lead.src]
	}
	slices.Sort(slots)
	for i, g := range chain {
		bySlot[slots[i]] = g
	}
	w := &lineWriter{term: d.term}
	emitted := false
	emit := func(outs []outEntry) {
		for _, o := range outs {
			w.line(o.raw, d.termOf(o))
		}
	}
	for i, e := range entries {
		if g, ok := bySlot[i]; ok {
			if !emitted {
				emit(pre)
				emitted = true
			}
			emit(g.outs)
			continue
		}
		if e.path {
			continue // dropped from the path
		}
		raw := e.raw
		if e != d.header && !e.blank && (e.parent != "" || e.broken) {
			if p := resolve(e.link); p != e.parent {
				raw = setField(raw, d.parentK, parentValue(p))
			}
		}
		w.line(raw, e.term)
	}
	if !emitted {
		emit(pre)
	}
	return w.buf.Bytes(), prev
}

func parentValue(id string) []byte {
	if id == "" {
		return []byte("null")
	}
	return mustJSON(id)
}
