package journal

import (
	"bytes"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/belayhq/belay"
)

// indexInterval is how many bytes of journal one sparse index entry covers
// at most: a seek reads at most this much before reaching its seq.
const indexInterval = 64 << 10

// indexEntry says that the line holding seq starts at off.
type indexEntry struct {
	Seq uint64 `json:"s"`
	Off int64  `json:"o"`
}

// scanState is what a scan learns and what recovery extends.
type scanState struct {
	lastSeq uint64
	size    int64 // end of the last good line
	index   []indexEntry
	ids     map[string]uint64
	lastIdx int64   // offset of the last index entry
	lastCRC [8]byte // checksum digits of the last good line
	// lastTS is the time of the last good line (unix nanoseconds), as a
	// scan found it (tsRaw, its text, parsed at the end) or a commit set.
	lastTS int64
	tsRaw  [len(tsLayout)]byte
}

// stampRaw records the time text of line, the last good one.
func (s *scanState) stampRaw(line []byte) {
	const key = `,"ts":"`
	if i := bytes.Index(line[:min(len(line), maxPrefixLen)], []byte(key)); i >= 0 && len(line) >= i+len(key)+len(tsLayout) {
		copy(s.tsRaw[:], line[i+len(key):])
	}
}

// parseStamp sets lastTS from the last good line's time text.
func (s *scanState) parseStamp() {
	if s.tsRaw[0] == 0 {
		return
	}
	if t, err := time.Parse(tsLayout, string(s.tsRaw[:])); err == nil {
		s.lastTS = t.UnixNano()
	}
	s.tsRaw = [len(tsLayout)]byte{}
}

func (s *scanState) add(seq uint64, id string, off, end int64) {
	if len(s.index) == 0 || off-s.lastIdx >= indexInterval {
		s.index = append(s.index, indexEntry{seq, off})
		s.lastIdx = off
	}
	if id != "" {
		s.ids[id] = seq
	}
	s.lastSeq = seq
	s.size = end
}

// damage describes the first bad line found by a scan.
type damage struct {
	off    int64
	reason string
	torn   bool // nothing valid follows it
}

// lineReader reads '\n'-terminated lines from a region of a file. It reads
// in chunks of readChunk and grows its buffer only for a long line, never
// beyond MaxRecordSize: a longer line is skipped, not buffered.
type lineReader struct {
	r        io.ReaderAt
	end      int64 // end of the region
	pos      int64 // file offset of buf[0]
	buf      []byte
	start, n int   // unread data is buf[start:n]
	off      int64 // offset of the next line
	eof      bool
}

const readChunk = 32 << 10

var chunkPool = sync.Pool{New: func() any { b := make([]byte, readChunk); return &b }}

func newLineReader(r io.ReaderAt, off, end int64) *lineReader {
	return &lineReader{r: r, end: end, pos: off, off: off, buf: (*chunkPool.Get().(*[]byte))[:readChunk]}
}

// release returns the reader's buffer to the pool; the reader and the lines
// it returned must not be used after.
func (lr *lineReader) release() {
	if cap(lr.buf) == readChunk {
		b := lr.buf[:readChunk]
		chunkPool.Put(&b)
	}
	lr.buf = nil
}

// fill reads more of the region into the buffer, growing it when full.
func (lr *lineReader) fill() error {
	if lr.start > 0 {
		copy(lr.buf, lr.buf[lr.start:lr.n])
		lr.pos += int64(lr.start)
		lr.n -= lr.start
		lr.start = 0
	}
	if lr.n == len(lr.buf) {
		nb := make([]byte, min(2*len(lr.buf), belay.MaxRecordSize+1))
		copy(nb, lr.buf[:lr.n])
		lr.buf = nb
	}
	want := min(int64(len(lr.buf)-lr.n), lr.end-(lr.pos+int64(lr.n)))
	if want <= 0 {
		lr.eof = true
		return nil
	}
	got, err := lr.r.ReadAt(lr.buf[lr.n:lr.n+int(want)], lr.pos+int64(lr.n))
	lr.n += got
	if err == io.EOF || got < int(want) && err == nil {
		lr.eof = true
		err = nil
	}
	return err
}

// next returns the next line without its '\n' and the line's offset.
// complete is false for a line that ends at the end of the region without
// '\n', or that is longer than MaxRecordSize (then the rest of it is
// skipped). The line is valid until the next call.
func (lr *lineReader) next() (line []byte, off int64, complete bool, err error) {
	off = lr.off
	for {
		if i := bytes.IndexByte(lr.buf[lr.start:lr.n], '\n'); i >= 0 {
			line = lr.buf[lr.start : lr.start+i]
			lr.start += i + 1
			lr.off += int64(i + 1)
			if i+1 > belay.MaxRecordSize {
				return nil, off, false, nil
			}
			return line, off, true, nil
		}
		if lr.n-lr.start > belay.MaxRecordSize {
			// Over-long: drop what is buffered and look for its end.
			lr.off += int64(lr.n - lr.start)
			lr.start = lr.n
			if err := lr.skipToNewline(); err != nil {
				return nil, off, false, err
			}
			return nil, off, false, nil
		}
		if lr.eof {
			if lr.n == lr.start {
				return nil, off, false, io.EOF
			}
			line = lr.buf[lr.start:lr.n]
			lr.off += int64(lr.n - lr.start)
			lr.start = lr.n
			return line, off, false, nil
		}
		if err := lr.fill(); err != nil {
			return nil, off, false, err
		}
	}
}

// skipToNewline discards input up to and including the next '\n'.
func (lr *lineReader) skipToNewline() error {
	for {
		if i := bytes.IndexByte(lr.buf[lr.start:lr.n], '\n'); i >= 0 {
			lr.start += i + 1
			lr.off += int64(i + 1)
			return nil
		}
		lr.off += int64(lr.n - lr.start)
		lr.start = lr.n
		if lr.eof {
			return nil
		}
		if err := lr.fill(); err != nil {
			return err
		}
	}
}

// scan reads lines from st.size to end, extending st with every good line,
// and stops at the first damaged one, which it classifies as torn (nothing
// valid after it) or not.
func scan(r io.ReaderAt, st *scanState, end int64) (*damage, error) {
	lr := newLineReader(r, st.size, end)
	defer lr.release()
	defer st.parseStamp()
	for {
		line, off, complete, err := lr.next()
		if err == io.EOF {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		var d *damage
		if !complete {
			d = &damage{off: off, reason: "partial or over-long line"}
		} else if _, cerr := checkLine(line); cerr != nil {
			d = &damage{off: off, reason: cerr.Error()}
		} else if h, herr := decodeHeader(line); herr != nil {
			// A line whose checksum holds was written whole: it is not torn.
			return &damage{off: off, reason: herr.Error()}, nil
		} else if h.Seq != st.lastSeq+1 {
			return &damage{off: off, reason: fmt.Sprintf("seq %d follows seq %d", h.Seq, st.lastSeq)}, nil
		} else {
			st.add(h.Seq, h.ID, off, lr.off)
			copy(st.lastCRC[:], line[len(line)-10:])
			st.stampRaw(line)
			continue
		}
		// A partial line or a bad checksum is a torn write only if nothing
		// valid follows it; otherwise it is damage before the tail.
		d.torn = true
		for {
			line, _, complete, err := lr.next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return nil, err
			}
			if complete {
				if _, cerr := checkLine(line); cerr == nil {
					d.torn = false
					break
				}
			}
		}
		return d, nil
	}
}

// brokenName is the name of the copy kept before truncating a torn tail.
func brokenName(base string, now time.Time) string {
	return base + ".broken-" + now.UTC().Format("20060102T150405.000000000Z")
}
