package transcript

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"sync"
)

// The third pass of the streaming repair: damaged regions repaired and the
// file written anew.

// regionOpts make Parse read the lines of damaged regions: the scan has
// already found the path, the relinks and the lines to drop.
type regionOpts struct {
	path   map[int]bool   // local line -> on the path
	relink map[int]string // local line -> the parent it is relinked to
	skip   map[int]bool   // local lines dropped by the scan
	repeat map[int]bool   // local lines with the id of an earlier line (and other bytes)
	dryRun bool           // only the changes are wanted: nothing is rendered
}

// regionJob is one damaged region on its way through repair: prepared
// from the line table (by the goroutine that owns it), repaired on its
// own (in parallel with other regions), then assembled in file order.
type regionJob struct {
	r        *region
	d        *Document
	local    []int    // local line (1-based) - 1 -> global line, 0-based
	entries  []*entry // its entries but the header
	changes  []Change
	rendered []outEntry // its lines, when the pipe renders
	render   bool
	err      error
	done     chan struct{} // closed once repaired
}

// prepareRegion reads a damaged region's bytes and what the scan learnt of
// its lines. It reads the line table, so it runs on the goroutine of the
// pass.
func (s *streamRepair) prepareRegion(r *region) (*regionJob, error) {
	var data []byte
	local := []int{}
	if s.header != nil {
		data = append(append(data, s.header...), '\n')
		local = append(local, -1)
	}
	opts := &regionOpts{path: map[int]bool{}, relink: map[int]string{}, skip: map[int]bool{}, repeat: map[int]bool{}}
	start := len(data)
	data = append(data, make([]byte, r.end-r.off)...)
	if _, err := s.f.ReadAt(data[start:], r.off); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("transcript: %w", err)
	}
	for g := r.first; g <= r.last; g++ {
		local = append(local, g)
		l := len(local)
		switch {
		case s.lt.flags(g)&fBad != 0:
			opts.skip[l] = true
		case s.lt.onPath(g):
			opts.path[l] = true
		}
		if _, ok := s.owner[int32(g)]; ok {
			opts.repeat[l] = true
		}
		if _, ok := s.broken[g]; ok {
			if t := s.lt.parent(g); t >= 0 {
				opts.relink[l] = s.targets[int(t)]
			} else {
				opts.relink[l] = ""
			}
		}
	}
	c, _ := codecFor(s.format)
	d := &Document{Format: s.format, codec: c, data: data, term: s.term, jsonl: true, region: opts}
	return &regionJob{r: r, d: d, local: local}, nil
}

// repair parses the region and repairs its messages. It touches nothing
// outside the job, so jobs run in parallel.
func (j *regionJob) repair() {
	d := j.d
	if j.err = d.splitLines(); j.err != nil {
		return
	}
	if j.err = d.codec.build(d); j.err != nil {
		return
	}
	for _, e := range d.entries {
		if e != d.header {
			e.line = j.local[e.line-1] + 1 // the file's line numbers
			j.entries = append(j.entries, e)
		}
	}
	out, changes := repairItemsExt(d.items, false, j.r.ext)
	for i := range changes {
		if changes[i].Message != nil {
			g := j.r.itemBase + *changes[i].Message
			changes[i].Message = &g
		}
	}
	j.changes = changes
	if j.render {
		j.rendered = d.codec.render(d, out)
	}
}

// assemble renders a repaired region's lines. Regions are assembled in
// file order: each records the parents that lines after it must take.
func (s *streamRepair) assemble(j *regionJob) []byte {
	d := j.d
	b, lastChain := d.assembleTreeEntries(j.entries, j.rendered, s.droppedParent)
	if j.r.next >= 0 && lastChain != "" {
		s.nextParent[j.r.next] = lastChain
	}
	return b
}

// regionBytesAhead bounds the bytes of the regions read ahead of the one
// being taken (one region is always read, whatever its size).
const regionBytesAhead = 16 << 20

// regionPipe repairs the damaged regions on one goroutine per CPU and
// hands them out repaired, in file order. Regions are prepared (read, and
// their lines looked up in the line table) on the goroutine that calls
// take, ahead of it while their bytes stay within regionBytesAhead.
type regionPipe struct {
	s       *streamRepair
	todo    chan *regionJob
	wg      sync.WaitGroup
	queue   []*regionJob // prepared, not taken, in file order
	ahead   int64        // their bytes
	next    int          // the next region to prepare
	maxJobs int
	render  bool // render each region's lines (not for a dry run)
}

func (s *streamRepair) regionPipe(render bool) *regionPipe {
	workers := max(1, runtime.GOMAXPROCS(0))
	p := &regionPipe{s: s, maxJobs: 2 * workers, render: render}
	p.todo = make(chan *regionJob, p.maxJobs)
	for range workers {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for j := range p.todo {
				j.repair()
				close(j.done)
			}
		}()
	}
	return p
}

// take returns the next region, repaired (nil after the last).
func (p *regionPipe) take() (*regionJob, error) {
	regions := p.s.regions
	for p.next < len(regions) && len(p.queue) < p.maxJobs {
		r := regions[p.next]
		if len(p.queue) > 0 && p.ahead+(r.end-r.off) > regionBytesAhead {
			break
		}
		j, err := p.s.prepareRegion(r)
		if err != nil {
			return nil, err
		}
		j.done, j.render = make(chan struct{}), p.render
		j.d.region.dryRun = !p.render
		p.queue = append(p.queue, j)
		p.ahead += r.end - r.off
		p.next++
		p.todo <- j // never blocks: at most maxJobs are queued
	}
	if len(p.queue) == 0 {
		return nil, nil
	}
	j := p.queue[0]
	p.queue = p.queue[1:]
	p.ahead -= j.r.end - j.r.off
	<-j.done
	return j, j.err
}

// close stops the workers once the regions handed to them are repaired.
func (p *regionPipe) close() {
	close(p.todo)
	p.wg.Wait()
}

// regionChanges repairs every region, keeping only the changes (a dry
// run).
func (s *streamRepair) regionChanges() ([]Change, error) {
	p := s.regionPipe(false)
	defer p.close()
	var all []Change
	for {
		j, err := p.take()
		if err != nil || j == nil {
			return all, err
		}
		all = append(all, j.changes...)
	}
}

// write is the third pass: the file anew, into w. Each damaged region is
// repaired when the pass reaches it; write returns their changes. Every
// line is read (to find the parents that must change), but runs of lines
// that stay as they were are copied file to file (copy_file_range on
// Linux), not through this process.
func (s *streamRepair) write(w io.Writer) ([]Change, error) {
	var changes []Change
	out := &spanWriter{w: w, src: s.f, bw: bufio.NewWriterSize(w, int(min(1<<20, max(4096, s.size))))}
	relink := map[int]string{}
	for l := range s.broken {
		p := ""
		if t := s.lt.parent(l); t >= 0 {
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
	regions := s.regionPipe(true)
	defer regions.close()
	ls := s.lines()
	pendingTerm := "" // terminator owed by a last line written without one
	started := false
	owe := func() {
		if started && pendingTerm == "" {
			out.write([]byte(s.term))
		}
	}
	put := func(b []byte, term string) {
		owe()
		out.write(b)
		out.write([]byte(term))
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
			r := s.regions[ri]
			if idx == r.first {
				j, err := regions.take()
				if err != nil {
					return nil, err
				}
				if j == nil || j.r != r {
					return nil, fmt.Errorf("transcript: internal error: damaged regions taken out of order at line %d; the file was not changed", idx+1)
				}
				changes = append(changes, j.changes...)
				b := s.assemble(j)
				if len(b) > 0 {
					// The region's lines carry their own terminators.
					owe()
					out.write(b)
					started, pendingTerm = true, "\n"
					if b[len(b)-1] != '\n' {
						pendingTerm = ""
					}
				}
			}
			if idx == r.last {
				ri++
			}
			continue
		}
		if s.lt.flags(idx)&fBad != 0 {
			continue
		}
		// The entry, from its cut (a byte-order mark, or a torn fragment
		// dropped) on: held, or the outline of one longer than
		// maxLineSize (ol), which is copied from the file, never held.
		off += int64(s.cut[idx])
		var ol *lineOutline
		switch {
		case !tooLong:
			line = line[s.cut[idx]:]
		case ls.ol.valid || ls.ol.blank:
			ol = ls.ol
		case end-off <= int64(maxLineSize):
			if line, err = readLine(s.f, off, end); err != nil {
				return nil, err
			}
		default:
			if ol, err = outlineAt(s.f, off, end, s.seed, s.parK); err != nil {
				return nil, err
			}
		}
		n := int64(len(line))
		if ol != nil {
			line, n = ol.out, ol.n
		}
		term := "\n"
		switch end - off - n {
		case 0:
			term = ""
		case 2:
			term = "\r\n"
		}
		if s.lt.flags(idx)&(fBlank|fHeader) == 0 {
			want, known := "", false
			if p, ok := s.nextParent[idx]; ok {
				want, known = p, true
			} else if p, ok := relink[idx]; ok {
				want, known = resolve(p), true
			} else if len(s.droppedParent) > 0 && s.namesDropped(line) {
				if p, ok := getString(line, s.parK); ok {
					if q := resolve(p); q != p {
						want, known = q, true
					}
				}
			}
			if known {
				if have, _ := getString(line, s.parK); have != want {
					if ol != nil {
						owe()
						patchSpans(out, off, ol, s.parK, parentValue(want))
						out.write([]byte(term))
						pendingTerm, started = term, true
						continue
					}
					put(setField(line, s.parK, parentValue(want)), term)
					continue
				}
			}
		}
		if end == s.size && term == "\n" {
			// The last line may end in a lone CR, which is read as a
			// terminator and written as LF.
			if ol != nil {
				owe()
				out.copy(off, off+n)
				out.write([]byte(term))
				pendingTerm, started = term, true
				continue
			}
			put(line, term)
			continue
		}
		owe()
		out.copy(off, end)
		pendingTerm, started = term, true
	}
	if err := out.flush(); err != nil {
		return nil, err
	}
	return changes, s.lt.err
}

// patchSpans writes the entry at off in the file, longer than
// maxLineSize, whose outline is ol (with the span of key's value), with
// key set to the raw value val as setField sets it: every other byte is
// copied from the file.
func patchSpans(out spanSink, off int64, ol *lineOutline, key string, val []byte) {
	if ol.parAt[0] >= 0 {
		out.copy(off, off+ol.parAt[0])
		out.write(val)
		out.copy(off+ol.parAt[1], off+ol.n)
		return
	}
	out.copy(off, off+ol.headEnd)
	var b []byte
	if !ol.headOpen {
		b = append(b, ',')
	}
	b = strconv.AppendQuote(b, key)
	b = append(append(b, ':'), val...)
	out.write(b)
	out.copy(off+ol.closeAt, off+ol.n)
}

// namesDropped reports whether the line's parent may be a dropped path
// entry, without allocating: only then is its parent decoded.
func (s *streamRepair) namesDropped(line []byte) bool {
	v, ok := getField(line, s.parK)
	if !ok || len(v) < 2 || v[0] != '"' {
		return false
	}
	inner := v[1 : len(v)-1]
	if bytes.IndexByte(inner, '\\') >= 0 {
		return true // escaped: decoded and looked up as it is
	}
	_, hit := s.droppedParent[string(inner)]
	return hit
}

// spanSink takes bytes and spans of the source file, in order.
type spanSink interface {
	copy(off, end int64)
	write(b []byte)
}

var _ spanSink = (*spanWriter)(nil)

// spanWriter writes bytes and spans of the source file in order; adjacent
// spans are copied as one.
type spanWriter struct {
	w        io.Writer
	src      *os.File
	bw       *bufio.Writer
	from, to int64 // the span not copied yet (empty when equal)
	err      error
}

func (o *spanWriter) write(b []byte) {
	if o.err != nil || len(b) == 0 {
		return
	}
	o.copySpan()
	_, o.err = o.bw.Write(b)
}

func (o *spanWriter) copy(off, end int64) {
	if o.err != nil {
		return
	}
	if o.from < o.to && o.to == off {
		o.to = end
		return
	}
	o.copySpan()
	o.from, o.to = off, end
}

// copySpan copies the pending span, after what is buffered.
func (o *spanWriter) copySpan() {
	if o.err != nil || o.from >= o.to {
		return
	}
	if o.err = o.bw.Flush(); o.err != nil {
		return
	}
	if _, o.err = o.src.Seek(o.from, io.SeekStart); o.err != nil {
		return
	}
	_, o.err = io.CopyN(o.w, o.src, o.to-o.from)
	o.from, o.to = 0, 0
}

func (o *spanWriter) flush() error {
	o.copySpan()
	if o.err != nil {
		return o.err
	}
	return o.bw.Flush()
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
	if s != nil {
		defer s.lt.close()
	}
	if err != nil {
		var long *lineTooLongError
		if errors.Is(err, ErrInvalidHeader) || errors.As(err, &long) {
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
	ok := false
	defer func() {
		if !ok {
			s.lt.close()
		}
	}()
	if err := s.scan(); err != nil {
		return nil, nil, err
	}
	if err := s.resolveFar(); err != nil {
		return nil, nil, err
	}
	if err := s.link(); err != nil {
		return nil, nil, err
	}
	done, err := s.specDone()
	if err != nil {
		return nil, nil, err
	}
	if !done {
		s.reread = true
		s.specReset()
		if err := s.check(); err != nil {
			return nil, nil, err
		}
	}
	s.settleExt()
	var all []Change
	all = append(all, s.dropped...)
	all = append(all, s.dups...)
	all = append(all, s.relinkChanges()...)
	ok = true
	return s, all, nil
}
