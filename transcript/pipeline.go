package transcript

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"os"
	"runtime"
	"slices"
	"sync"
)

// lineChunk is a run of whole lines of a file, read into one buffer.
type lineChunk struct {
	first int   // index of its first line (set before consume)
	off   int64 // file offset of data[0]
	data  []byte
	long  lineRec // set when the chunk is one line too long to hold
	recs  []lineRec
	seed  maphash.Seed // the repair's, for the outlines of long lines
	// Filled by the work function, read by the consumer.
	scan   []scanLine
	light  lightLine
	parts  []lightPart
	partAt [][2]int32 // per line: its parts, parts[from:to]
	done   chan struct{}
}

// lineRec is one line of a chunk: its bytes data[start:end] (terminator
// excluded) and its span in the file, terminator included. A line longer
// than maxLineSize (tooLong) is not held: ol is its outline (outline.go).
type lineRec struct {
	start, end int
	off, fend  int64
	tooLong    bool
	ol         *lineOutline
}

// line returns line i, or the outline of a long line (nil when it is not
// valid JSON).
func (c *lineChunk) line(i int) []byte {
	if rec := &c.recs[i]; rec.tooLong {
		return rec.ol.out
	}
	return c.data[c.recs[i].start:c.recs[i].end]
}

// split finds the chunk's lines, as lineScanner.next would return them.
func (c *lineChunk) split() {
	c.recs = c.recs[:0]
	if c.long.tooLong {
		c.recs = append(c.recs, c.long)
		return
	}
	for start := 0; start < len(c.data); {
		end, next := len(c.data), len(c.data)
		if i := bytes.IndexByte(c.data[start:], '\n'); i >= 0 {
			end, next = start+i, start+i+1
		}
		lend := end
		if lend > start && c.data[lend-1] == '\r' {
			lend--
		}
		rec := lineRec{start: start, end: lend, off: c.off + int64(start), fend: c.off + int64(next)}
		if next-start > maxLineSize {
			// Held here (it came with the chunk), but read as any long line.
			rec.ol = outlineBytes(c.seed, c.data[start:end], rec.off == 0, "")
			rec.start, rec.end, rec.tooLong = 0, 0, true
		}
		c.recs = append(c.recs, rec)
		start = next
	}
}

// chunkBytes is the size of the chunks the pipeline hands out.
const chunkBytes = 256 << 10

// chunkReader reads a file into chunks of whole lines: each chunk's data
// is read straight from the file (no copy but the bytes of a line cut by
// the previous chunk's end), and the lines are split by the workers.
type chunkReader struct {
	f     *os.File
	size  int64
	pos   int64  // the next byte to read
	carry []byte // bytes read after the last newline of the last chunk
	skip  []byte // buffer for reading past a line too long to hold
	seed  maphash.Seed
}

// fill reads the next chunk into c; it returns io.EOF when the file has
// no more bytes.
func (r *chunkReader) fill(c *lineChunk) error {
	c.off = r.pos - int64(len(r.carry))
	c.data = append(c.data[:0], r.carry...)
	c.long, c.seed = lineRec{}, r.seed
	r.carry = r.carry[:0]
	if len(c.data) == 0 && r.pos >= r.size {
		return io.EOF
	}
	scanned := 0 // bytes of c.data known to hold no newline
	for {
		if r.pos >= r.size {
			return nil // the file ends: its last line has no terminator
		}
		n := int(min(int64(chunkBytes), r.size-r.pos))
		c.data = slices.Grow(c.data, n)
		m, err := r.f.ReadAt(c.data[len(c.data):len(c.data)+n], r.pos)
		if err = r.readErr(m, n, err); err != nil {
			return err
		}
		c.data = c.data[:len(c.data)+m]
		r.pos += int64(m)
		if i := bytes.LastIndexByte(c.data[scanned:], '\n'); i >= 0 {
			cut := scanned + i + 1
			if len(c.data) >= chunkBytes || r.pos >= r.size {
				r.carry = append(r.carry, c.data[cut:]...)
				c.data = c.data[:cut]
				return nil
			}
		} else {
			scanned = len(c.data)
		}
		if scanned > maxLineSize {
			return r.readLong(c)
		}
	}
}

// readErr is the error of a read of n bytes that read m: a file cut
// shorter since the repair began is named as such.
func (r *chunkReader) readErr(m, n int, err error) error {
	switch {
	case m == n:
		return nil
	case err == nil || errors.Is(err, io.EOF):
		return fmt.Errorf("transcript: %s is shorter than the %d bytes it had when the repair began: it changed while being read; nothing was written", r.f.Name(), r.size)
	}
	return fmt.Errorf("transcript: %w", err)
}

// readLong reads the rest of a line longer than maxLineSize (the chunk
// holds its start and no newline) in pieces, keeping its outline, and
// makes the chunk that line.
func (r *chunkReader) readLong(c *lineChunk) error {
	if r.skip == nil {
		r.skip = make([]byte, chunkBytes)
	}
	o := newOutliner(r.seed, c.off == 0, "")
	o.write(c.data)
	for r.pos < r.size {
		n := int(min(int64(len(r.skip)), r.size-r.pos))
		m, err := r.f.ReadAt(r.skip[:n], r.pos)
		if err = r.readErr(m, n, err); err != nil {
			return err
		}
		if i := bytes.IndexByte(r.skip[:m], '\n'); i >= 0 {
			o.write(r.skip[:i])
			r.pos += int64(i) + 1
			r.carry = append(r.carry, r.skip[i+1:m]...)
			r.pos += int64(m - i - 1)
			break
		}
		o.write(r.skip[:m])
		r.pos += int64(m)
	}
	end := r.pos - int64(len(r.carry))
	c.long = lineRec{off: c.off, fend: end, tooLong: true, ol: o.finish()}
	c.data = c.data[:0]
	return nil
}

// outlineBytes is the outline of line b (its line end excluded).
func outlineBytes(seed maphash.Seed, b []byte, fileStart bool, parKey string) *lineOutline {
	o := newOutliner(seed, fileStart, parKey)
	o.write(b)
	return o.finish()
}

// eachChunk reads the file's lines in chunks, runs work on the chunks in
// parallel (one goroutine per CPU) and consume on each in file order. The
// chunks in flight are bounded, so memory does not grow with the file.
// It returns when every goroutine it started has ended.
func (s *streamRepair) eachChunk(work func(*lineChunk), consume func(*lineChunk) error) error {
	workers := max(1, runtime.GOMAXPROCS(0))
	free := make(chan *lineChunk, 2*workers+2)
	for range cap(free) {
		free <- &lineChunk{}
	}
	todo := make(chan *lineChunk, cap(free))
	order := make(chan *lineChunk, cap(free))
	stop := make(chan struct{})
	var readErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // reader
		defer wg.Done()
		defer close(todo)
		defer close(order)
		r := &chunkReader{f: s.f, size: s.size, seed: s.seed}
		for {
			var c *lineChunk
			select {
			case c = <-free:
			case <-stop:
				return
			}
			if err := r.fill(c); err != nil {
				if !errors.Is(err, io.EOF) {
					readErr = err
				}
				return
			}
			c.done = make(chan struct{})
			todo <- c
			order <- c
		}
	}()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range todo {
				c.split()
				work(c)
				close(c.done)
			}
		}()
	}
	var err error
	idx := 0
	for c := range order {
		<-c.done
		c.first = idx
		idx += len(c.recs)
		if err == nil {
			err = consume(c)
			if err != nil {
				close(stop)
			}
		}
		if cap(c.data) > 4*chunkBytes {
			c.data = nil // it held a long line: not kept for the next chunks
		}
		free <- c
	}
	wg.Wait()
	if err != nil {
		return err
	}
	return readErr
}

// lines is a lineScanner over the whole file, which outlines long lines.
func (s *streamRepair) lines() *lineScanner {
	return &lineScanner{r: bufio.NewReaderSize(io.NewSectionReader(s.f, 0, s.size), int(min(1<<20, max(4096, s.size)))),
		outline: true, seed: s.seed, parKey: s.parK}
}
