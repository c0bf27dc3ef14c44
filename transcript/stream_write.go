package transcript

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
)

// The third pass of the streaming repair: damaged regions repaired and the
// file written anew.

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
		case s.lt.flags(g)&fBad != 0:
			opts.skip[l] = true
		case s.lt.onPath(g):
			opts.path[l] = true
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
				rc, b, err := s.repairRegion(r)
				if err != nil {
					return nil, err
				}
				changes = append(changes, rc...)
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
		if tooLong || s.lt.flags(idx)&fBad != 0 {
			continue
		}
		term := "\n"
		switch end - off - int64(len(line)) {
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
					put(setField(line, s.parK, parentValue(want)), term)
					continue
				}
			}
		}
		if end == s.size && term == "\n" {
			// The last line may end in a lone CR, which is read as a
			// terminator and written as LF.
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
