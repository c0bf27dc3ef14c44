package journal

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"time"
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

// lineReader reads '\n'-terminated lines from a region of a file without
// ever buffering more than MaxRecordSize for one line.
type lineReader struct {
	br  *bufio.Reader
	off int64
}

func newLineReader(r io.ReaderAt, off, end int64) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(io.NewSectionReader(r, off, end-off), MaxRecordSize), off: off}
}

// next returns the next line without its '\n' and the line's offset.
// complete is false for a line that ends at EOF without '\n' or that is
// longer than MaxRecordSize (then the rest of it is skipped).
func (lr *lineReader) next() (line []byte, off int64, complete bool, err error) {
	off = lr.off
	line, err = lr.br.ReadSlice('\n')
	lr.off += int64(len(line))
	switch {
	case err == nil:
		return line[:len(line)-1], off, true, nil
	case errors.Is(err, bufio.ErrBufferFull):
		// Over-long line: skip to its end so the scan can go on.
		for errors.Is(err, bufio.ErrBufferFull) {
			var more []byte
			more, err = lr.br.ReadSlice('\n')
			lr.off += int64(len(more))
		}
		if err == io.EOF {
			return nil, off, false, nil
		}
		return nil, off, false, err
	case err == io.EOF:
		if len(line) == 0 {
			return nil, off, false, io.EOF
		}
		return line, off, false, nil
	default:
		return nil, off, false, err
	}
}

// scan reads lines from st.size to end, extending st with every good line,
// and stops at the first damaged one, which it classifies as torn (nothing
// valid after it) or not.
func scan(r io.ReaderAt, st *scanState, end int64) (*damage, error) {
	lr := newLineReader(r, st.size, end)
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
		} else if h, herr := decodeHeader(line); herr != nil {
			d = &damage{off: off, reason: herr.Error()}
		} else if h.Seq != st.lastSeq+1 {
			d = &damage{off: off, reason: fmt.Sprintf("seq %d follows seq %d", h.Seq, st.lastSeq)}
		} else {
			st.add(h.Seq, h.ID, off, lr.off)
			copy(st.lastCRC[:], line[len(line)-10:])
			continue
		}
		// Is anything valid after the damage? Then it is not a torn tail.
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
