package transcript

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/belayhq/belay/internal/atomicfile"
	"github.com/belayhq/belay/internal/vfs"
	"github.com/belayhq/belay/journal"
)

// File repair statuses, the stable "status" values of a FileReport.
const (
	StatusClean    = "clean"    // nothing to fix: the file was not touched
	StatusRepaired = "repaired" // fixed: a backup was kept and the file replaced
	StatusWould    = "would_repair"
	StatusRefused  = "refused" // not changed, with the reason (invalid header, unknown format, ...)
	StatusMissing  = "missing" // no such file: nothing done
	StatusEmpty    = "empty"   // an empty file: nothing to repair
)

// MaxLineSize is the longest line a repair holds in memory. A longer line
// (a tool result that holds a whole file, say) is read in pieces and
// checked on its outline (outline.go), and kept: copied from the file, its
// parent link patched around it. It is held whole only when damaged (not
// valid JSON: it is cut as any other) or in a turn that message-level
// repair rewrites.
const MaxLineSize = 8 << 20

// maxLineSize is MaxLineSize, a var for tests.
var maxLineSize = MaxLineSize

// DefaultMessageLimit is the file size up to which RepairFile also repairs
// messages (which needs the file in memory); larger files get streaming
// file-level repair only.
const DefaultMessageLimit = 1 << 30

// ErrRefused is matched by the error RepairFile returns when it refuses to
// change a file.
var ErrRefused = errors.New("transcript: repair refused")

// FileOptions configure RepairFile.
type FileOptions struct {
	// Format of the file; empty means detect it.
	Format Format
	// DryRun reports what would change and changes nothing.
	DryRun bool
	// NoBackup skips the <file>.bak-<time> copy.
	NoBackup bool
	// LinesOnly does file-level repair only: streaming, with memory
	// bounded whatever the file size.
	LinesOnly bool
	// MessageLimit overrides DefaultMessageLimit.
	MessageLimit int64
	// Now names the backup; time.Now if nil.
	Now func() time.Time
}

// FileReport is what RepairFile found and did. Its JSON is the per-file
// object of `belay repair --json` (docs/transcripts.md).
type FileReport struct {
	Path   string `json:"path"`
	Format Format `json:"format,omitempty"`
	Status string `json:"status"`
	// Reason says why a file was refused, missing or left alone.
	Reason string `json:"reason,omitempty"`
	// Backup is the copy of the original bytes kept before replacing.
	Backup      string   `json:"backup,omitempty"`
	BytesBefore int64    `json:"bytes_before"`
	BytesAfter  int64    `json:"bytes_after"`
	Messages    bool     `json:"message_level"`
	Changes     []Change `json:"changes"`
	// DanglingChildren counts, after a file-level repair of a pi or Claude
	// Code file (--lines-only, or a file too large for the message-level
	// one), the entries left naming as parent an entry on a line it
	// dropped: it changes no parent link. Note says so, and what relinks
	// them.
	DanglingChildren int    `json:"dangling_children,omitempty"`
	Note             string `json:"note,omitempty"`
}

// RepairFile repairs a transcript file in place: it drops lines that are
// not valid (file level) and, unless opts.LinesOnly or the file is larger
// than the message limit, repairs the conversation (RepairMessages). Before
// any change it writes <file>.bak-<UTC time> and then replaces the file
// atomically (temp file, fsync, rename, fsync dir), keeping its mode and
// owner. A file with nothing to fix is not touched at all. A missing or
// empty file is reported, not an error. A file whose header is invalid, or
// whose format is unknown, is refused: the error wraps ErrRefused and the
// file is not changed.
func RepairFile(path string, opts FileOptions) (*FileReport, error) {
	rep := &FileReport{Path: path, Status: StatusClean, Changes: []Change{}}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MessageLimit <= 0 {
		opts.MessageLimit = DefaultMessageLimit
	}
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		rep.Status, rep.Reason = StatusMissing, "no such file; nothing was done"
		return rep, nil
	}
	if err != nil {
		return rep, fmt.Errorf("transcript: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return refuse(rep, "not a regular file")
	}
	rep.BytesBefore, rep.BytesAfter = fi.Size(), fi.Size()
	head, err := readHead(path)
	if err != nil {
		return rep, err
	}
	if len(bytes.TrimSpace(bytes.TrimPrefix(head, utf8BOM))) == 0 && fi.Size() < detectLimit {
		rep.Status, rep.Reason = StatusEmpty, "the file is empty; nothing to repair"
		return rep, nil
	}
	f := opts.Format
	var data []byte // the whole file, when detection read it
	if f == "" {
		if f, data, err = detectFile(path, head, fi.Size(), opts.MessageLimit); err != nil {
			if errors.Is(err, ErrUnknownFormat) {
				return refuse(rep, err.Error())
			}
			return rep, err
		}
	}
	rep.Format = f
	if !opts.LinesOnly && (f == FormatPi || f == FormatClaude) {
		r, err := repairStream(path, fi, f, rep, opts)
		if !errors.Is(err, errNoStream) {
			return r, err
		}
		*rep = FileReport{Path: path, Format: f, Status: StatusClean, BytesBefore: fi.Size(), BytesAfter: fi.Size(), Changes: []Change{}}
	}
	if opts.LinesOnly || fi.Size() > opts.MessageLimit || !isJSONL(head, f) {
		if isJSONL(head, f) {
			return repairLines(path, fi, f, rep, opts)
		}
		if fi.Size() > opts.MessageLimit {
			return refuse(rep, "a JSON document this large is not repaired; convert it to JSONL first")
		}
	}
	return repairDocument(path, fi, f, rep, opts, data)
}

func refuse(rep *FileReport, reason string) (*FileReport, error) {
	rep.Status, rep.Reason = StatusRefused, reason
	return rep, fmt.Errorf("%w: %s: %s", ErrRefused, rep.Path, reason)
}

func readHead(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("transcript: %w", err)
	}
	defer f.Close()
	b := make([]byte, detectLimit)
	n, err := io.ReadFull(f, b)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("transcript: read %s: %w", path, err)
	}
	return b[:n], nil
}

// isJSONL reports whether a file of format f with this head is JSON Lines.
func isJSONL(head []byte, f Format) bool {
	switch f {
	case FormatBelay, FormatPi, FormatClaude:
		return true
	}
	return !isDocument(bytes.TrimLeft(bytes.TrimPrefix(head, utf8BOM), " \t\r\n"))
}

// repairDocument repairs a file in memory: lines and messages. data is
// the file's bytes when they were read already (nil: read them).
func repairDocument(path string, fi fs.FileInfo, f Format, rep *FileReport, opts FileOptions, data []byte) (*FileReport, error) {
	if data == nil {
		var err error
		if data, err = os.ReadFile(path); err != nil {
			return rep, fmt.Errorf("transcript: %w", err)
		}
	}
	d, err := Parse(data, f)
	if err != nil {
		if errors.Is(err, ErrInvalidHeader) || errors.Is(err, ErrInvalidDocument) || errors.Is(err, ErrUnknownFormat) {
			return refuse(rep, err.Error())
		}
		return rep, err
	}
	if len(d.Dropped) > 0 && d.jsonl && !d.anyEntry() {
		return refuse(rep, noValidLine(f))
	}
	rep.Messages = !opts.LinesOnly && f != FormatBelay // a journal is repaired line by line only
	rep.Changes = append(rep.Changes, d.Dropped...)
	rep.Changes = append(rep.Changes, d.Relinked...)
	if !opts.LinesOnly {
		rep.Changes = append(rep.Changes, d.Repair().Changes...)
	}
	out, err := d.Bytes()
	if err != nil {
		return rep, err
	}
	if d.Format == FormatBelay && d.events != nil && d.events.renumber {
		rep.Changes = append(rep.Changes, keepSeqs(d.events.placed)...)
	}
	if len(rep.Changes) == 0 {
		return rep, nil // clean: the file is not touched
	}
	rep.BytesAfter = int64(len(out))
	if opts.DryRun {
		rep.Status = StatusWould
		return rep, nil
	}
	if err := replace(path, fi, rep, opts, func(w io.Writer) error {
		_, err := w.Write(out)
		return err
	}); err != nil {
		return rep, err
	}
	rep.Status = StatusRepaired
	return rep, nil
}

// badLine is a line streaming repair drops, or the part of a line it
// drops: the torn fragment before the entries glued onto it, or nothing
// but a line end put between two of them (ins).
type badLine struct {
	line     int
	off, end int64  // byte span, terminator included
	ins      string // written in place of the span
}

// lineScanner reads lines with a bounded buffer. A line longer than
// maxLineSize is not held: with outline set, it is read in pieces into
// its outline (ol, outline.go), made with seed and parKey; else it is
// skipped.
type lineScanner struct {
	r    *bufio.Reader
	buf  []byte
	off  int64
	line int

	outline bool
	seed    maphash.Seed
	parKey  string
	ol      *lineOutline // the outline of the last line, when it was long
}

// next returns the next line without its terminator, its span, and
// whether it was too long to hold (then line is its outline, nil when the
// line is not valid JSON or not outlined). The line is valid until the
// next call.
func (s *lineScanner) next() (line []byte, off, end int64, tooLong bool, err error) {
	s.buf, s.ol = s.buf[:0], nil
	off = s.off
	var o *outliner
	for {
		chunk, rerr := s.r.ReadSlice('\n')
		s.off += int64(len(chunk))
		full := errors.Is(rerr, bufio.ErrBufferFull)
		switch {
		case !tooLong && len(s.buf)+len(chunk) > maxLineSize:
			tooLong = true
			if s.outline {
				o = newOutliner(s.seed, off == 0, s.parKey)
				o.write(s.buf)
				o.write(bytes.TrimSuffix(chunk, []byte("\n")))
			}
			s.buf = nil // not kept at this size
		case tooLong:
			if o != nil {
				o.write(bytes.TrimSuffix(chunk, []byte("\n")))
			}
		case full || len(s.buf) > 0:
			s.buf = append(s.buf, chunk...)
		}
		if full {
			continue
		}
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			return nil, 0, 0, false, rerr
		}
		if rerr != nil && s.off == off {
			return nil, 0, 0, false, io.EOF
		}
		s.line++
		if tooLong {
			if o == nil {
				return nil, off, s.off, true, nil
			}
			s.ol = o.finish()
			return s.ol.out, off, s.off, true, nil
		}
		line = chunk
		if len(s.buf) > 0 {
			line = s.buf
		}
		line = bytes.TrimSuffix(line, []byte("\n"))
		line = bytes.TrimSuffix(line, []byte("\r"))
		return line, off, s.off, false, nil
	}
}

// readLine reads the line at [off, end) of r (its terminator included
// in the span, not in what it returns) whole.
func readLine(r io.ReaderAt, off, end int64) ([]byte, error) {
	b := make([]byte, end-off)
	n, err := r.ReadAt(b, off)
	if err != nil && !(errors.Is(err, io.EOF) && n == len(b)) {
		return nil, fmt.Errorf("transcript: %w", err)
	}
	b = bytes.TrimSuffix(b, []byte("\n"))
	return bytes.TrimSuffix(b, []byte("\r")), nil
}

// outlineAt reads the line at [off, end) of r (its terminator included
// in the span), longer than maxLineSize, in pieces into its outline.
func outlineAt(r io.ReaderAt, off, end int64, seed maphash.Seed, parKey string) (*lineOutline, error) {
	o := newOutliner(seed, off == 0, parKey)
	buf := make([]byte, min(end-off, chunkBytes))
	for at := off; at < end; {
		n := int(min(int64(len(buf)), end-at))
		m, err := r.ReadAt(buf[:n], at)
		if err != nil && !(errors.Is(err, io.EOF) && m == n) {
			return nil, fmt.Errorf("transcript: %w", err)
		}
		b := buf[:n]
		if at += int64(n); at == end {
			b = bytes.TrimSuffix(b, []byte("\n"))
		}
		o.write(b)
	}
	return o.finish(), nil
}

// lineTooLongError is a line a repair can neither hold nor check in
// pieces: longer than maxLineSize, and so is its outline (its keys, ids
// and content blocks). The repair is refused: nothing is lost.
type lineTooLongError struct {
	line int   // 1-based
	size int64 // bytes, line end included
}

func (e *lineTooLongError) Error() string {
	return fmt.Sprintf("line %d is %d bytes, longer than the %d bytes a repair holds in memory, and its keys, ids and content blocks alone are longer than the %d bytes it keeps of such a line, so it cannot be checked; nothing was changed", e.line, e.size, maxLineSize, maxOutlineSize)
}

// parallelMin is the file size from which scanFile validates segments of
// the file in parallel.
const parallelMin = 8 << 20

// scanFile is scanLines over a file, split into one segment per CPU (at
// line boundaries) for large files of formats whose lines are checked on
// their own (all but belay, whose seqs run across lines).
func scanFile(f *os.File, size int64, format Format, fn func(Change)) ([]badLine, error) {
	n := runtime.GOMAXPROCS(0)
	if format == FormatBelay || size < parallelMin || n < 2 {
		return scanLines(f, format, fn)
	}
	cuts := []int64{0}
	buf := make([]byte, 64<<10)
	for k := 1; k < n; k++ {
		off := size * int64(k) / int64(n)
		if off <= cuts[len(cuts)-1] {
			continue
		}
		// Cut after the next newline.
		for {
			m, err := f.ReadAt(buf, off)
			if i := bytes.IndexByte(buf[:m], '\n'); i >= 0 {
				off += int64(i) + 1
				break
			}
			off += int64(m)
			if err != nil {
				off = size
				break
			}
		}
		if off < size {
			cuts = append(cuts, off)
		}
	}
	cuts = append(cuts, size)
	type result struct {
		bad     []badLine
		changes []Change
		lines   int
		err     error
	}
	results := make([]result, len(cuts)-1)
	term := lineOneTerm(f)
	var wg sync.WaitGroup
	for k := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &results[k]
			sec := io.NewSectionReader(f, cuts[k], cuts[k+1]-cuts[k])
			r.bad, r.lines, r.err = scanSegment(sec, format, k == 0, term, func(c Change) { r.changes = append(r.changes, c) })
			for i := range r.bad {
				r.bad[i].off += cuts[k]
				r.bad[i].end += cuts[k]
			}
		}()
	}
	wg.Wait()
	var bad []badLine
	lines := 0
	for _, r := range results {
		if long := (*lineTooLongError)(nil); errors.As(r.err, &long) {
			long.line += lines // numbered in its segment
		}
		if r.err != nil {
			return nil, r.err
		}
		for i := range r.bad {
			r.bad[i].line += lines
		}
		for _, c := range r.changes {
			c.Line += lines
			fn(c)
		}
		bad = append(bad, r.bad...)
		lines += r.lines
	}
	return bad, nil
}

// scanLines validates a JSONL file line by line in bounded memory and
// returns the lines to drop.
func scanLines(r segment, f Format, fn func(Change)) ([]badLine, error) {
	bad, _, err := scanSegment(r, f, true, lineOneTerm(r), fn)
	return bad, err
}

// scanSegment validates the lines of r, the start of the file when first;
// it returns the lines to drop and how many lines it read.
func scanSegment(r segment, f Format, first bool, fileTerm func() (string, error), fn func(Change)) ([]badLine, int, error) {
	c, err := codecFor(f)
	if err != nil {
		return nil, 0, err
	}
	// A line too long to hold is checked on its outline (outline.go); a
	// journal's is past its record limit.
	s := &lineScanner{r: bufio.NewReaderSize(r, 1<<20), outline: f != FormatBelay, seed: maphash.MakeSeed()}
	var bad []badLine
	for {
		line, off, end, tooLong, err := s.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, 0, fmt.Errorf("transcript: %w", err)
		}
		drop := func(reason string) {
			bad = append(bad, badLine{line: s.line, off: off, end: end})
			fn(Change{Kind: ChangeDropLine, Line: s.line, Reason: reason})
		}
		ol := s.ol
		switch {
		case !tooLong || ol == nil:
		case ol.tooBig:
			return nil, 0, &lineTooLongError{line: s.line, size: end - off}
		case !ol.valid && !ol.blank:
			// Not valid JSON: the line is damaged, and read whole to be
			// cut as any other.
			if line, err = readLine(r, off, end); err != nil {
				return nil, 0, err
			}
			tooLong, ol = false, nil
		}
		if first && off == 0 && (bytes.HasPrefix(line, utf8BOM) && !tooLong || ol != nil && ol.bom) {
			bad = append(bad, badLine{line: s.line, off: 0, end: int64(len(utf8BOM))})
			fn(bomChange())
			if !tooLong {
				line = line[len(utf8BOM):] // an outline is without it
			}
			off += int64(len(utf8BOM))
		}
		if tooLong && ol == nil {
			if first && c.hasHeader() {
				return nil, 0, fmt.Errorf("%w: line %d is longer than %d bytes; the file was not changed", ErrInvalidHeader, s.line, maxLineSize)
			}
			drop(fmt.Sprintf("line longer than %d bytes", maxLineSize))
			continue
		}
		if f != FormatBelay && (ol != nil && ol.blank || len(bytes.TrimSpace(line)) == 0 && ol == nil) {
			continue
		}
		if first && c.hasHeader() {
			first = false
			if err := c.checkHeader(line); err != nil {
				return nil, 0, fmt.Errorf("%w: line %d: %v; the file was not changed", ErrInvalidHeader, s.line, err)
			}
			continue
		}
		first = false
		// A belay journal's seqs are judged by walkJournal, as its
		// rewrite keeps them: a line judged here would be judged
		// against a seq the rewrite may drop.
		if why := c.checkLine(line); why != "" {
			glued, err := gluedSpans(c, f, line, off, end, fileTerm)
			if err != nil {
				return nil, 0, err
			}
			if glued != nil && !tooLong {
				bad = append(bad, glued...)
				fn(gluedChange(s.line, glued, line))
				continue
			}
			drop(why)
			continue
		}
	}
	return bad, s.line, nil
}

// segment is what scanSegment reads: a file, or a stretch of one, read in
// order, and again at an offset for a long line it must hold.
type segment interface {
	io.Reader
	io.ReaderAt
}

// gluedSpans returns what file-level repair changes in a line at
// [off, end) that holds whole entries glued onto a torn one or onto each
// other (glued.go): the torn fragment dropped, a line end put between
// entries. It returns nil when the line holds none: it is dropped whole.
func gluedSpans(c codec, f Format, line []byte, off, end int64, fileTerm func() (string, error)) ([]badLine, error) {
	if f == FormatBelay {
		return nil, nil
	}
	frag, spans := splitGlued(line, func(b []byte) bool { return c.checkLine(b) == "" }, gluedEntry(f, c))
	if len(spans) == 0 {
		return nil, nil
	}
	// The line's own terminator; the file's, as in-memory repair puts
	// between the entries of a last line that has none.
	term := "\n"
	switch end - off - int64(len(line)) {
	case 2:
		term = "\r\n"
	case 0:
		if len(spans) > 1 {
			t, err := fileTerm()
			if err != nil {
				return nil, err
			}
			term = t
		}
	}
	var out []badLine
	if frag > 0 {
		out = append(out, badLine{off: off, end: off + int64(frag)})
	}
	for _, sp := range spans[1:] {
		at := off + int64(sp[0])
		out = append(out, badLine{off: at, end: at, ins: term})
	}
	return out, nil
}

// lineOneTerm returns what reads, once, the terminator of the first line
// of the file r holds: "\r\n" if it ends so, else "\n" (also for a file
// of one line without one), as in-memory repair takes the file's
// terminator to be. It reads up to the first line end only when called.
func lineOneTerm(r io.ReaderAt) func() (string, error) {
	var (
		once sync.Once
		term = "\n"
		err  error
	)
	return func() (string, error) {
		once.Do(func() {
			buf := make([]byte, 64<<10)
			var off int64
			var prev byte
			for {
				n, rerr := r.ReadAt(buf, off)
				if i := bytes.IndexByte(buf[:n], '\n'); i >= 0 {
					if i > 0 && buf[i-1] == '\r' || i == 0 && prev == '\r' {
						term = "\r\n"
					}
					return
				}
				if n > 0 {
					prev = buf[n-1]
				}
				off += int64(n)
				if errors.Is(rerr, io.EOF) {
					return
				}
				if rerr != nil {
					err = fmt.Errorf("transcript: %w", rerr)
					return
				}
			}
		})
		return term, err
	}
}

// gluedChange reports what gluedSpans changes in line n, which holds
// line.
func gluedChange(n int, glued []badLine, line []byte) Change {
	for i := range glued {
		glued[i].line = n
	}
	entries := len(glued)
	if glued[0].ins == "" {
		return Change{Kind: ChangeDropFragment, Line: n, Reason: fragmentReason(line[:glued[0].end-glued[0].off], entries)}
	}
	return Change{Kind: ChangeSplitLine, Line: n, Reason: splitReason(entries + 1)}
}

// repairLines is streaming file-level repair: a validating pass, then (if
// anything is to be dropped) a pass that copies every other line, or for a
// belay journal appends every other event to a new journal.
func repairLines(path string, fi fs.FileInfo, f Format, rep *FileReport, opts FileOptions) (*FileReport, error) {
	in, err := os.Open(path)
	if err != nil {
		return rep, fmt.Errorf("transcript: %w", err)
	}
	defer in.Close()
	bad, err := scanFile(in, fi.Size(), f, func(c Change) { rep.Changes = append(rep.Changes, c) })
	if err != nil {
		var long *lineTooLongError
		if errors.Is(err, ErrInvalidHeader) || errors.As(err, &long) {
			return refuse(rep, err.Error())
		}
		return rep, err
	}
	var keep []Change
	if f == FormatBelay {
		// The pass that decides what the rewrite keeps, without writing:
		// the lines dropped for their seq or idempotency id (the
		// validating pass checks each line alone) and the placeholders,
		// also for a dry run.
		placed, more, err := walkJournal(path, func(c Change) { rep.Changes = append(rep.Changes, c) }, nil)
		if err != nil {
			return rep, err
		}
		bad = append(bad, more...)
		slices.SortFunc(bad, func(a, b badLine) int { return cmp.Compare(a.off, b.off) })
		slices.SortStableFunc(rep.Changes, func(a, b Change) int { return cmp.Compare(a.Line, b.Line) })
		keep = keepSeqs(placed)
	}
	if len(bad) == 0 {
		return rep, nil
	}
	if ok, err := keptNonBlank(in, fi.Size(), bad); err != nil {
		return rep, err
	} else if !ok {
		return refuse(rep, noValidLine(f))
	}
	rep.Changes = append(rep.Changes, keep...)
	var dropped int64
	for _, b := range bad {
		dropped += b.end - b.off - int64(len(b.ins))
	}
	rep.BytesAfter = fi.Size() - dropped
	if f == FormatPi || f == FormatClaude {
		d, err := danglingChildren(in, fi.Size(), f, bad)
		if err != nil {
			return rep, err
		}
		rep.DanglingChildren, rep.Note = d.children, danglingNote(d, opts.LinesOnly)
	}
	if opts.DryRun {
		rep.Status = StatusWould
		return rep, nil
	}
	write := func(w io.Writer) error { return copyExcept(w, in, fi.Size(), bad) }
	if f == FormatBelay {
		write = nil
	}
	if err := replace(path, fi, rep, opts, write); err != nil {
		return rep, err
	}
	if st, err := os.Stat(path); err == nil {
		rep.BytesAfter = st.Size()
	}
	rep.Status = StatusRepaired
	return rep, nil
}

// noValidLine is why a file none of whose lines is valid is refused: it is
// most likely not in the format, and dropping every line would empty it.
func noValidLine(f Format) string {
	return fmt.Sprintf("no line of the file is a valid %s entry: it is not in the %s format, or is damaged throughout; nothing was changed (if it is in another format, name that one with --format)", f, f)
}

// keptNonBlank reports whether anything but blanks is left outside the
// bad spans.
func keptNonBlank(r io.ReaderAt, size int64, bad []badLine) (bool, error) {
	buf := make([]byte, 64<<10)
	var at int64
	for _, b := range append(bad, badLine{off: size, end: size}) {
		for at < b.off {
			n := int64(len(buf))
			if n > b.off-at {
				n = b.off - at
			}
			m, err := r.ReadAt(buf[:n], at)
			if len(bytes.TrimSpace(buf[:m])) > 0 {
				return true, nil
			}
			if err != nil && !errors.Is(err, io.EOF) {
				return false, fmt.Errorf("transcript: %w", err)
			}
			if m == 0 {
				break
			}
			at += int64(m)
		}
		at = max(at, b.end)
	}
	return false, nil
}

// copyExcept copies r to w without the bad spans. File to file, the kernel
// copies (copy_file_range on Linux).
func copyExcept(w io.Writer, r *os.File, size int64, bad []badLine) error {
	var at int64
	for _, b := range append(bad, badLine{off: size, end: size}) {
		if b.off > at {
			if _, err := r.Seek(at, io.SeekStart); err != nil {
				return err
			}
			if _, err := io.CopyN(w, r, b.off-at); err != nil {
				return err
			}
		}
		if _, err := io.WriteString(w, b.ins); err != nil {
			return err
		}
		at = b.end
	}
	return nil
}

// replace keeps a backup, then atomically replaces path with what write
// writes (nil: the belay journal rewrite), with path's mode and owner
// (internal/atomicfile: temp file, fsync, rename, fsync dir).
func replace(path string, fi fs.FileInfo, rep *FileReport, opts FileOptions, write func(io.Writer) error) error {
	if !opts.NoBackup {
		backup := path + ".bak-" + opts.Now().UTC().Format("20060102T150405.000000000Z")
		if err := keepBackup(backup, path, fi, os.Link); err != nil {
			return fmt.Errorf("transcript: keep backup %s: %w", backup, err)
		}
		rep.Backup = backup
	}
	if write == nil {
		journalPath, cleanup, err := rewriteJournalLines(path)
		if err != nil {
			return err
		}
		defer cleanup()
		write = func(w io.Writer) error { return copyInto(w, journalPath) }
	}
	keep := func(tmp string) error {
		if err := unchanged(path, fi); err != nil {
			return err
		}
		if err := keepModeOwner(tmp, fi); err != nil {
			return fmt.Errorf("transcript: %s: keep mode and owner: %w; the file was not changed", path, err)
		}
		return nil
	}
	err := atomicfile.Write(vfs.OS, path, fi.Mode().Perm(), write, keep)
	if errors.Is(err, errChanged) {
		// Nothing was changed: the backup of the file as it was is not
		// needed (it is a link to the file itself, or a copy).
		if rep.Backup != "" && os.Remove(rep.Backup) == nil {
			rep.Backup = ""
		}
		rep.Status, rep.Reason = StatusRefused, err.Error()+"; nothing was changed: repair it again once nothing writes it"
		return fmt.Errorf("%w: %s: %s", ErrRefused, path, rep.Reason)
	}
	if err != nil {
		return fmt.Errorf("transcript: %w", err)
	}
	return nil
}

// errChanged is a file that changed between the start of its repair and
// the rename that would replace it: an agent still appending to its
// session, say. Renaming the repaired copy over it would lose what was
// written meanwhile, so the repair is refused instead.
var errChanged = errors.New("the file changed while it was being repaired")

// unchanged fails with errChanged if path is no longer the file fi
// described: another file, another size or another modification time.
func unchanged(path string, fi fs.FileInfo) error {
	cur, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("transcript: %w; the file was not changed", err)
	}
	if !os.SameFile(fi, cur) || cur.Size() != fi.Size() || !cur.ModTime().Equal(fi.ModTime()) {
		return fmt.Errorf("%w (%d bytes when it began, %d now): something is still writing it", errChanged, fi.Size(), cur.Size())
	}
	return nil
}

func copyInto(w io.Writer, path string) error {
	in, err := os.Open(path)
	if err != nil {
		return err
	}
	defer in.Close()
	_, err = io.Copy(w, in)
	return err
}

// keepBackup makes dst the backup of src; an existing dst is not
// replaced. It is a hard link to src's bytes where the filesystem allows
// one: repair never writes into src (it renames a new file over it), so
// the link keeps the original bytes, mode and owner without copying them.
// The rename's directory fsync makes the link durable with the repair.
// Where link fails (a filesystem without hard links), or src is a
// symlink, it is a copy (copyFile). link is os.Link but in tests.
func keepBackup(dst, src string, fi fs.FileInfo, link func(oldname, newname string) error) error {
	if _, err := os.Lstat(dst); err == nil {
		return fmt.Errorf("%s already exists", dst)
	}
	// A link to a symlink would be a symlink (link(2) does not follow it):
	// its target's bytes are copied instead.
	if li, err := os.Lstat(src); err == nil && li.Mode().IsRegular() {
		err := link(src, dst)
		if err == nil || errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	return copyFile(dst, src, fi)
}

// copyFile writes the backup dst of src, atomically, with src's mode and
// owner; an existing dst is not replaced.
func copyFile(dst, src string, fi fs.FileInfo) error {
	if _, err := os.Lstat(dst); err == nil {
		return fmt.Errorf("%s already exists", dst)
	}
	return atomicfile.Write(vfs.OS, dst, fi.Mode().Perm(), func(w io.Writer) error { return copyInto(w, src) },
		func(tmp string) error { return keepModeOwner(tmp, fi) })
}

// rewriteJournalLines streams the valid events of a belay journal into a
// new journal (through the journal package) in a scratch directory beside
// path, and returns the new journal's path and what removes it.
func rewriteJournalLines(path string) (string, func(), error) {
	dir, err := os.MkdirTemp(filepath.Dir(path), "."+filepath.Base(path)+".repair-")
	if err != nil {
		return "", nil, fmt.Errorf("transcript: %w", err)
	}
	j, err := journal.Open(dir, journal.Options{FS: vfs.NoSync(vfs.OS)})
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, fmt.Errorf("transcript: %w", err)
	}
	fail := func(err error) (string, func(), error) {
		_ = j.Close()
		_ = os.RemoveAll(dir)
		return "", nil, fmt.Errorf("transcript: rewrite journal: %w", err)
	}
	// The changes were noted by the plan pass before (repairLines), which
	// walks the same way without writing: a clean journal is read, never
	// copied, and only a damaged one is walked a second time, here.
	if _, _, err := walkJournal(path, func(Change) {}, func(evs []journal.Event) error {
		_, err := j.Append(context.Background(), journal.Buffered, evs...)
		return err
	}); err != nil {
		return fail(err)
	}
	if err := j.Close(); err != nil {
		return fail(err)
	}
	return filepath.Join(dir, journal.FileName), func() { _ = os.RemoveAll(dir) }, nil
}

// walkJournal reads the belay journal at path as its repair keeps it: it
// hands emit (nil: nothing to write) the events to append, in order and in
// batches, each without its seq, with a journal.lost placeholder for each
// seq a dropped line leaves empty. It tells note of each line it drops
// that the validating pass (scanFile) did not, and returns the number of
// placeholders and those lines.
func walkJournal(path string, note func(Change), emit func([]journal.Event) error) (int, []badLine, error) {
	in, err := os.Open(path)
	if err != nil {
		return 0, nil, fmt.Errorf("transcript: %w", err)
	}
	defer in.Close()
	c := belayCodec{}
	s := &lineScanner{r: bufio.NewReaderSize(in, 1<<20)}
	var k seqKeeper
	var dropped []badLine
	placed := 0
	batch := make([]journal.Event, 0, 256)
	flush := func() error {
		if len(batch) == 0 || emit == nil {
			batch = batch[:0]
			return nil
		}
		err := emit(batch)
		batch = batch[:0]
		return err
	}
	for {
		line, off, end, tooLong, err := s.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return placed, dropped, fmt.Errorf("transcript: %w", err)
		}
		if off == 0 {
			line = bytes.TrimPrefix(line, utf8BOM) // dropped by the validating pass
		}
		if tooLong || c.checkLine(line) != "" {
			k.dropped++ // reported by the validating pass
			continue
		}
		seq, _ := lineSeq(line)
		var ev journal.Event
		if err := json.Unmarshal(line, &ev); err != nil {
			k.dropped++
			dropped = append(dropped, badLine{line: s.line, off: off, end: end})
			note(Change{Kind: ChangeDropLine, Line: s.line, Reason: "undecodable event: " + err.Error()})
			continue
		}
		fill, keep, why := k.admit(seq, ev.ID, ev.TS)
		if !keep {
			kind := ChangeDropLine
			if ev.ID != "" && strings.HasPrefix(why, "a second event") {
				kind = ChangeDropDuplicateID
			}
			dropped = append(dropped, badLine{line: s.line, off: off, end: end})
			note(Change{Kind: kind, Line: s.line, Reason: why})
			continue
		}
		placed += len(fill)
		batch = append(batch, fill...)
		ev.Seq = 0
		if string(ev.Data) == "null" {
			ev.Data = nil
		}
		batch = append(batch, ev)
		if len(batch) >= 256 {
			if err := flush(); err != nil {
				return placed, dropped, err
			}
		}
	}
	return placed, dropped, flush()
}
