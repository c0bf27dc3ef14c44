package transcript

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/internal/delta"
	"github.com/belayhq/belay/journal"
)

// EventScan reads one session's journal: it calls fn for each event with
// seq > after, in order, until the events end or fn returns an error,
// which it returns, and stops with ctx's error when ctx is done. An
// event's Data is valid only until fn returns. store.Store's ScanEvents,
// bound to a session, is one.
type EventScan func(ctx context.Context, after uint64, fn func(journal.Event) error) error

// ExportSummary is what a streaming export changed to make the
// conversation valid for its format (apitype.ExportSummary).
type ExportSummary = apitype.ExportSummary

// MaxSummaryChanges is how many changes an ExportSummary lists in full.
const MaxSummaryChanges = 20

// noteChange counts c in s, and lists it in full while s lists fewer than
// MaxSummaryChanges.
func noteChange(s *ExportSummary, c Change) {
	if s.Counts == nil {
		s.Counts = map[string]int{}
	}
	s.Counts[c.Kind]++
	if len(s.Changes) < MaxSummaryChanges {
		s.Changes = append(s.Changes, c)
	}
}

// ExportStream writes a session's conversation in format f as Export
// does, reading the journal through scan and holding in memory only what
// the runs going at the same time built (no more than inlineBudget bytes
// of their text: longer text stays in the journal and is read again when
// it is written). It works a stretch of the conversation at a time: the
// events up to a point where every run begun has ended are built,
// repaired and written before the next are read. So, unlike Export over
// the whole journal,
//
//   - a tool result is paired only with the calls of its own stretch (a
//     result that answers no call of its run is dropped, never moved
//     back to another run's call), and
//   - events a run journals after its end are not part of its turn;
//
// the runtime writes neither. For the belay format, a text block whose
// event would pass the journal's record limit (which Export refuses) is
// written as several events of at most textPiece bytes of text.
//
// It stops when ctx is done, when w fails, and at the first damaged
// event, after writing what came before: the caller must report such an
// export as incomplete. The summary lists what it changed so far.
func ExportStream(ctx context.Context, w io.Writer, scan EventScan, f Format) (ExportSummary, error) {
	return exportStream(ctx, w, scan, f, inlineBudget)
}

// exportStream is ExportStream keeping at most budget bytes of text in
// memory.
func exportStream(ctx context.Context, w io.Writer, scan EventScan, f Format, budget int) (ExportSummary, error) {
	if _, err := codecFor(f); err != nil {
		return ExportSummary{}, err
	}
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	x := &streamExport{ctx: ctx, scan: scan, f: f, w: bufio.NewWriterSize(w, 64<<10), budget: budget}
	x.pre = "\x00belay-text-" + hex.EncodeToString(nonce[:]) + "-"
	x.marker = []byte(`\u0000` + x.pre[1:]) // as mustJSON escapes it
	x.b.text = x.text
	if err := x.run(); err != nil {
		return x.sum, err
	}
	if err := x.w.Flush(); err != nil {
		return x.sum, fmt.Errorf("transcript: %w", err)
	}
	return x.sum, nil
}

// inlineBudget bounds the text a stretch keeps in memory.
const inlineBudget = 1 << 20

// textPiece is the text of one event when the belay format splits a long
// block.
const textPiece = 128 << 10

// errPause stops a scan so that a stretch with text left in the journal
// is written before the scan goes on (a scan does not nest in another).
var errPause = errors.New("transcript: pause the scan")

// errRangeEnd stops the scan of a text block's events past its last one.
var errRangeEnd = errors.New("transcript: end of the block")

type streamExport struct {
	ctx  context.Context
	scan EventScan
	f    Format
	w    *bufio.Writer
	sum  ExportSummary

	b       convBuilder
	opts    EncodeOptions
	optsSet bool
	// The text blocks of the stretch: Block.Text holds a placeholder
	// (NUL, belay-text-NONCE-K, NUL) naming its slot K until the stretch
	// is written; marker is its start as mustJSON escapes it.
	slots  []textSlot
	inline int
	budget int
	pre    string // what starts a placeholder
	marker []byte

	readBase int // messages built before the stretch (Change.Message of repair)
	outBase  int // messages repaired before the stretch (of the export's own changes)
	ids      toolIDs

	d        *Document // the format's writer state, made at the first message
	elems    int       // JSON array elements written
	carry    []*Message
	prev     string // tree formats: the id of the last entry written
	prevSet  bool
	be       *belayEncoder
	seq      uint64
	line     []byte
	out      []byte
	delta    []byte
	splitter textSplitter
}

// textSlot is one text or thinking block of a stretch: its run, event
// type and the seqs of its first and last deltas (every delta of that
// run and type between them is the block's), and its text while it is
// kept in memory.
type textSlot struct {
	run, typ string
	from, to uint64
	buf      []byte
	lazy     bool // the text stays in the journal
}

func (x *streamExport) placeholder(k int) string {
	return x.pre + strconv.Itoa(k) + "\x00"
}

// slotOf returns the slot a block's placeholder names.
func (x *streamExport) slotOf(text string) (int, bool) {
	pre := x.pre
	if len(text) < len(pre)+2 || text[:len(pre)] != pre || text[len(text)-1] != 0 {
		return 0, false
	}
	k, err := strconv.Atoi(text[len(pre) : len(text)-1])
	if err != nil || k < 0 || k >= len(x.slots) {
		return 0, false
	}
	return k, true
}

// text takes a text or thinking delta for the builder.
func (x *streamExport) text(rs *runState, blk *Block, extend bool, e journal.Event) error {
	k, ok := 0, false
	if extend {
		k, ok = x.slotOf(blk.Text)
	}
	if !ok {
		k = len(x.slots)
		x.slots = append(x.slots, textSlot{run: e.Run, typ: e.Type, from: rs.blockFrom})
		blk.Text = x.placeholder(k)
	}
	s := &x.slots[k]
	s.to = e.Seq
	if s.lazy {
		return nil
	}
	if x.inline+len(e.Data) > x.budget {
		x.inline -= len(s.buf)
		s.lazy, s.buf = true, nil
		return nil
	}
	n := len(s.buf)
	var err error
	if s.buf, err = delta.AppendText(s.buf, e.Data); err != nil {
		return fmt.Errorf("transcript: event %d (%s): %w", e.Seq, e.Type, err)
	}
	x.inline += len(s.buf) - n
	return nil
}

func (x *streamExport) anyLazy() bool {
	for _, s := range x.slots {
		if s.lazy {
			return true
		}
	}
	return false
}

// run reads the journal, writing each stretch once its runs ended.
func (x *streamExport) run() error {
	var after uint64
	for {
		err := x.scan(x.ctx, after, func(e journal.Event) error {
			after = e.Seq
			if e.Type == belay.EventSessionCreated && !x.optsSet {
				x.opts, x.optsSet = sessionOptions(e.Data), true
			}
			if err := x.b.add(e); err != nil {
				return err
			}
			if e.Type != belay.EventRunUpdated || !x.b.idle() || len(x.b.msgs) == 0 {
				return nil
			}
			if x.anyLazy() {
				return errPause
			}
			return x.flush()
		})
		if errors.Is(err, errPause) {
			if err := x.flush(); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		break
	}
	x.b.finish()
	if err := x.flush(); err != nil {
		return err
	}
	return x.finish()
}

// flush repairs and writes the stretch built so far.
func (x *streamExport) flush() error {
	msgs := x.b.msgs
	for i := range msgs {
		for j := range msgs[i].Blocks {
			b := &msgs[i].Blocks[j]
			if b.Type != BlockText && b.Type != BlockThinking {
				continue
			}
			if k, ok := x.slotOf(b.Text); ok && !x.slots[k].lazy {
				b.Text = string(x.slots[k].buf)
			}
		}
	}
	var err error
	if x.f == FormatBelay {
		err = x.writeBelay(msgs)
	} else {
		err = x.writeRepaired(msgs)
	}
	x.readBase += len(msgs)
	x.b.reset()
	x.slots, x.inline = x.slots[:0], 0
	return err
}

func (x *streamExport) writeRepaired(msgs []Message) error {
	out, rep := RepairMessages(msgs)
	for _, c := range rep.Changes {
		if c.Message != nil {
			i := *c.Message + x.readBase
			c.Message = &i
		}
		noteChange(&x.sum, c)
	}
	changes := x.ids.unique(out, x.outBase)
	x.outBase += len(out)
	if x.f == FormatAnthropic || x.f == FormatClaude {
		out, changes = dropUnsigned(out, changes, x.outBase-len(out))
	}
	for _, c := range changes {
		noteChange(&x.sum, c)
	}
	if len(out) == 0 {
		return nil
	}
	if err := x.start(&out[0]); err != nil {
		return err
	}
	items := x.carry
	x.carry = nil
	for i := range out {
		items = append(items, &out[i])
	}
	if x.f == FormatAnthropic {
		// A run of tool results joins the user message after it: keep a
		// trailing one for the next stretch.
		n := len(items)
		for n > 0 && items[n-1].Role == RoleTool {
			n--
		}
		items, x.carry = items[:n], items[n:]
	}
	return x.render(items)
}

// start makes the format's writer at the conversation's first message.
func (x *streamExport) start(first *Message) error {
	if x.d != nil {
		return nil
	}
	d, err := scratchDocument(x.f, first, x.opts)
	if err != nil {
		return err
	}
	x.d = d
	if d.header != nil {
		return x.writeLine(d.header.raw)
	}
	return nil
}

// render writes items in the format.
func (x *streamExport) render(items []*Message) error {
	if len(items) == 0 {
		return nil
	}
	d := x.d
	if x.prevSet {
		d.prevOut = &x.prev
	}
	out := d.codec.render(d, items)
	for _, o := range out {
		if d.array {
			sep := d.sep
			if x.elems == 0 {
				sep = d.prefix
			}
			if _, err := x.w.Write(sep); err != nil {
				return fmt.Errorf("transcript: %w", err)
			}
			if err := x.writeText(o.raw); err != nil {
				return err
			}
			x.elems++
			continue
		}
		raw := o.raw
		if d.tree {
			// New entries make one chain (Document.assembleTree).
			raw = setField(raw, d.parentK, parentValue(x.prev))
			x.prev, x.prevSet = o.id, true
		}
		if err := x.writeLine(raw); err != nil {
			return err
		}
	}
	return nil
}

func (x *streamExport) writeLine(raw []byte) error {
	if err := x.writeText(raw); err != nil {
		return err
	}
	if err := x.w.WriteByte('\n'); err != nil {
		return fmt.Errorf("transcript: %w", err)
	}
	return nil
}

// writeText writes raw with the text of each placeholder in it read from
// the journal and escaped as mustJSON would have.
func (x *streamExport) writeText(raw []byte) error {
	for {
		i := bytes.Index(raw, x.marker)
		if i < 0 {
			break
		}
		j := i + len(x.marker)
		k := 0
		for j < len(raw) && raw[j] >= '0' && raw[j] <= '9' {
			k = k*10 + int(raw[j]-'0')
			j++
		}
		const end = `\u0000`
		if !bytes.HasPrefix(raw[j:], []byte(end)) || k >= len(x.slots) {
			return fmt.Errorf("transcript: export: a malformed text placeholder")
		}
		if _, err := x.w.Write(raw[:i]); err != nil {
			return fmt.Errorf("transcript: %w", err)
		}
		err := x.readSlot(x.slots[k], true, func(escaped []byte) error {
			if _, err := x.w.Write(escaped); err != nil {
				return fmt.Errorf("transcript: %w", err)
			}
			return nil
		})
		if err != nil {
			return err
		}
		raw = raw[j+len(end):]
	}
	if _, err := x.w.Write(raw); err != nil {
		return fmt.Errorf("transcript: %w", err)
	}
	return nil
}

// readSlot calls fn with the text of each delta of a block left in the
// journal, escaped for a JSON string if escaped is set.
func (x *streamExport) readSlot(s textSlot, escaped bool, fn func([]byte) error) error {
	err := x.scan(x.ctx, s.from-1, func(e journal.Event) error {
		if e.Seq > s.to {
			return errRangeEnd
		}
		if e.Run != s.run || e.Type != s.typ {
			return nil
		}
		decode := delta.AppendText
		if escaped {
			decode = delta.AppendEscaped
		}
		var err error
		if x.delta, err = decode(x.delta[:0], e.Data); err != nil {
			return fmt.Errorf("transcript: event %d (%s): %w", e.Seq, e.Type, err)
		}
		if cap(x.delta) > 4<<20 {
			defer func() { x.delta = nil }()
		}
		return fn(x.delta)
	})
	if errors.Is(err, errRangeEnd) {
		return nil
	}
	return err
}

// writeBelay writes a stretch as events of a new journal (encodeBelay).
func (x *streamExport) writeBelay(msgs []Message) error {
	if x.be == nil {
		x.be = &belayEncoder{emit: x.emit, text: x.emitText}
		if err := x.be.start(); err != nil {
			return err
		}
	}
	for i := range msgs {
		if err := x.be.message(&msgs[i]); err != nil {
			return err
		}
	}
	return nil
}

// emit writes one event as the next line of the journal.
func (x *streamExport) emit(e journal.Event) error {
	x.seq++
	e.Seq = x.seq
	var err error
	if x.line, err = journal.AppendRecord(x.line[:0], e); err != nil {
		return fmt.Errorf("transcript: rewrite journal: %w", err)
	}
	if _, err := x.w.Write(x.line); err != nil {
		return fmt.Errorf("transcript: %w", err)
	}
	if cap(x.line) > 4<<20 {
		x.line = nil
	}
	return nil
}

// emitText writes the events of a text or thinking block: one event as
// encodeBelay writes it when that fits in a journal record, else events
// of at most textPiece bytes of text each.
func (x *streamExport) emitText(e journal.Event, b *Block) error {
	sp := &x.splitter
	*sp = textSplitter{x: x, e: e, buf: sp.buf[:0]}
	if k, ok := x.slotOf(b.Text); ok {
		if err := x.readSlot(x.slots[k], false, sp.add); err != nil {
			return err
		}
	} else if err := sp.add([]byte(b.Text)); err != nil {
		return err
	}
	err := sp.close()
	if cap(sp.buf) > 4<<20 {
		sp.buf = nil
	}
	return err
}

// textSplitter gathers a block's text, and once it is too long for one
// event writes it in pieces as it comes.
type textSplitter struct {
	x     *streamExport
	e     journal.Event
	buf   []byte
	split bool
}

func (sp *textSplitter) add(text []byte) error {
	sp.buf = append(sp.buf, text...)
	if !sp.split && len(sp.buf) >= belay.MaxRecordSize {
		sp.split = true // its event cannot fit: the text alone fills a record
	}
	if !sp.split {
		return nil
	}
	// Only whole pieces, and only when the byte after one is known: the
	// cuts are those close makes of the whole text.
	done := 0
	for len(sp.buf)-done > textPiece {
		n := pieceLen(sp.buf[done:])
		if err := sp.piece(sp.buf[done : done+n]); err != nil {
			return err
		}
		done += n
	}
	sp.buf = append(sp.buf[:0], sp.buf[done:]...)
	return nil
}

func (sp *textSplitter) close() error {
	if !sp.split {
		err := sp.piece(sp.buf)
		if !errors.Is(err, journal.ErrTooLarge) {
			return err
		}
		sp.split = true
	}
	for len(sp.buf) > 0 {
		n := pieceLen(sp.buf)
		if err := sp.piece(sp.buf[:n]); err != nil {
			return err
		}
		sp.buf = sp.buf[n:]
	}
	return nil
}

// piece writes one event with text; a text too long for one record fails
// with journal.ErrTooLarge before anything is written.
func (sp *textSplitter) piece(text []byte) error {
	x := sp.x
	x.out = append(delta.Escape(append(x.out[:0], `{"text":"`...), text), `"}`...)
	e := sp.e
	e.Data = x.out
	e.Seq = x.seq + 1
	line, err := journal.AppendRecord(x.line[:0], e)
	if err != nil {
		if errors.Is(err, journal.ErrTooLarge) && !sp.split {
			return err
		}
		return fmt.Errorf("transcript: rewrite journal: %w", err)
	}
	x.line, x.seq = line, x.seq+1
	if _, err := x.w.Write(line); err != nil {
		return fmt.Errorf("transcript: %w", err)
	}
	return nil
}

// pieceLen is the length of the next piece of text: textPiece bytes, or
// less to end on a rune boundary.
func pieceLen(text []byte) int {
	n := min(len(text), textPiece)
	for n < len(text) && n > 0 && text[n]&0xc0 == 0x80 {
		n--
	}
	if n == 0 {
		n = min(len(text), textPiece)
	}
	return n
}

// finish writes what ends the format: the trailing tool results kept for
// a user message that never came, the end of a JSON array, pi's header for
// an empty conversation, the belay journal's last run.updated.
func (x *streamExport) finish() error {
	if x.f == FormatBelay {
		if x.be == nil {
			x.be = &belayEncoder{emit: x.emit, text: x.emitText}
			if err := x.be.start(); err != nil {
				return err
			}
		}
		return x.be.finish()
	}
	if err := x.start(nil); err != nil {
		return err
	}
	items := x.carry
	x.carry = nil
	if err := x.render(items); err != nil {
		return err
	}
	if !x.d.array {
		return nil
	}
	tail := x.d.suffix
	if x.elems == 0 {
		tail = []byte("[]\n")
	}
	if _, err := x.w.Write(tail); err != nil {
		return fmt.Errorf("transcript: %w", err)
	}
	return nil
}
