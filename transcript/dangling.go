package transcript

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"os"
)

// This file counts what a file-level repair (repairLines: --lines-only,
// or a pi or Claude Code file too large for the in-memory repair that the
// streaming one leaves to it) leaves broken in a tree: it drops lines but
// copies every other byte range as it is, so no parent link changes, and
// an entry whose parent was on a dropped line still names it. A reader
// walking parents from the leaf stops there.

// salvageRead bounds the bytes of a dropped line read for its id.
const salvageRead = 64 << 10

// dangling is what danglingChildren found.
type dangling struct {
	children int // entries that name as parent the entry of a dropped line
	unread   int // dropped lines with entries after them whose id was torn away
}

// danglingChildren counts the entries of a pi or Claude Code file that
// name as parent an entry on a line (or torn fragment) that bad drops,
// when the id of that entry is in its first bytes; a dropped line whose id
// was torn away is counted in unread instead, unless no entry follows it
// (a torn last line has no children). Only the lines after the first
// dropped one with an id are read again, and only when there is one.
func danglingChildren(in *os.File, size int64, f Format, bad []badLine) (dangling, error) {
	idKey, parentKey := "id", "parentId"
	if f == FormatClaude {
		idKey, parentKey = "uuid", "parentUuid"
	}
	var out dangling
	gone := map[string]bool{}
	from := int64(-1) // where the first dropped entry with an id is
	last, err := lastKept(in, size, bad)
	if err != nil {
		return out, err
	}
	buf := make([]byte, salvageRead)
	for _, b := range bad {
		if b.ins != "" || b.off == 0 && b.end == int64(len(utf8BOM)) && isBOM(in) {
			continue // a line end put between entries, or the byte-order mark
		}
		if b.end > last {
			continue // no entry after it: a torn last line has no children
		}
		n := min(b.end-b.off, salvageRead)
		m, err := in.ReadAt(buf[:n], b.off)
		if err != nil && !errors.Is(err, io.EOF) {
			return out, fmt.Errorf("transcript: %w", err)
		}
		line := bytes.TrimRight(buf[:m], "\r\n")
		if id, ok := salvageID(line, idKey); ok {
			gone[id] = true
			if from < 0 {
				from = b.off
			}
			continue
		}
		if namesParent(line, parentKey) {
			out.unread++ // an entry, whose children cannot be told
		}
	}
	if len(gone) == 0 {
		return out, nil
	}
	s := &lineScanner{r: bufio.NewReaderSize(io.NewSectionReader(in, from, size-from), 1<<20), off: from,
		outline: true, seed: maphash.MakeSeed(), parKey: parentKey}
	k := 0 // the first bad span not before the line
	for {
		line, off, end, tooLong, err := s.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return out, fmt.Errorf("transcript: %w", err)
		}
		for k < len(bad) && bad[k].end <= off && bad[k].off < off {
			k++
		}
		if tooLong {
			// Longer than maxLineSize: read on its outline when kept
			// whole (but for a byte-order mark), dropped whole when valid
			// JSON, else read whole: it is damaged.
			ol, spans := s.ol, 0
			for j := k; j < len(bad) && bad[j].off < end; j++ {
				if !(bad[j].off == 0 && ol.bom && bad[j].end == int64(len(utf8BOM))) {
					spans++
				}
			}
			switch {
			case spans == 0:
				if namesGone(ol.out, parentKey, gone) {
					out.children++
				}
				continue
			case ol.valid:
				continue
			}
			if line, err = readLine(in, off, end); err != nil {
				return out, err
			}
		}
		if k == len(bad) || bad[k].off >= end {
			if namesGone(line, parentKey, gone) {
				out.children++ // the line is kept whole
			}
			continue
		}
		for _, e := range keptEntries(line, off, end, bad[k:]) {
			if namesGone(e, parentKey, gone) {
				out.children++
			}
		}
	}
	return out, nil
}

// namesGone reports whether the entry's parent is in gone, decoding it
// only when it holds an escape.
func namesGone(e []byte, parentKey string, gone map[string]bool) bool {
	v, ok := getField(e, parentKey)
	if !ok || len(v) < 2 || v[0] != '"' {
		return false
	}
	if bytes.IndexByte(v, '\\') < 0 {
		return gone[string(v[1:len(v)-1])]
	}
	p, ok := jsonString(v)
	return ok && gone[p]
}

// keptEntries returns the entries a file-level repair keeps of the line
// at [off, end) (its terminator excluded from line): none if a bad span
// drops it, else the line without the fragments bad drops, split where
// bad puts line ends. bad starts with the spans at or after off.
func keptEntries(line []byte, off, end int64, bad []badLine) [][]byte {
	var out [][]byte
	cur := 0
	for _, b := range bad {
		if b.off >= end {
			break
		}
		rs, re := int(b.off-off), int(min(b.end-off, int64(len(line))))
		if rs > cur {
			out = append(out, line[cur:rs])
		}
		cur = max(cur, re)
	}
	if cur < len(line) {
		out = append(out, line[cur:])
	}
	kept := out[:0]
	for _, e := range out {
		if len(bytes.TrimSpace(e)) > 0 {
			kept = append(kept, e)
		}
	}
	return kept
}

// salvageID returns the id a dropped line still holds whole.
func salvageID(line []byte, idKey string) (string, bool) {
	var id string
	ok := false
	topFields(line, func(f field) bool {
		if f.end >= len(line) {
			return false // the value runs to the tear: not whole
		}
		if string(f.key) == idKey {
			id, ok = jsonString(line[f.start:f.end])
			return false
		}
		return true
	})
	return id, ok && id != ""
}

// namesParent reports whether a dropped line is what is left of an entry:
// its parent key is whole (a string or null), as the writer puts it on
// every entry. A run of zeros or other debris is not.
func namesParent(line []byte, parentKey string) bool {
	ok := false
	topFields(line, func(f field) bool {
		if string(f.key) != parentKey {
			return true
		}
		if f.end < len(line) {
			v := line[f.start:f.end]
			_, isString := jsonString(v)
			ok = isString || string(v) == "null"
		}
		return false
	})
	return ok
}

// isBOM reports whether the file begins with a byte-order mark.
func isBOM(in *os.File) bool {
	b := make([]byte, len(utf8BOM))
	n, _ := in.ReadAt(b, 0)
	return bytes.Equal(b[:n], utf8BOM)
}

// lastKept returns where the last byte that is kept and not blank is
// (-1: none), reading back from the end of the file.
func lastKept(r io.ReaderAt, size int64, bad []badLine) (int64, error) {
	buf := make([]byte, 64<<10)
	end := size
	for j := len(bad); j >= 0; j-- {
		start := int64(0)
		if j > 0 {
			start = bad[j-1].end
		}
		for end > start {
			n := min(int64(len(buf)), end-start)
			m, err := r.ReadAt(buf[:n], end-n)
			if int64(m) < n {
				if err == nil || errors.Is(err, io.EOF) {
					err = io.ErrUnexpectedEOF
				}
				return 0, fmt.Errorf("transcript: %w", err)
			}
			for i := m - 1; i >= 0; i-- {
				if !isSpace(buf[i]) {
					return end - n + int64(i), nil
				}
			}
			end -= n
		}
		if j > 0 {
			end = bad[j-1].off
		}
	}
	return -1, nil
}

// danglingNote says what a file-level repair left of the links of the
// entries whose parent it dropped, and what relinks them.
func danglingNote(d dangling, linesOnly bool) string {
	if d.children == 0 && d.unread == 0 {
		return ""
	}
	entries := func(n int) string {
		if n == 1 {
			return "1 entry still names"
		}
		return fmt.Sprintf("%d entries still name", n)
	}
	lines := func(n int) string {
		if n == 1 {
			return "1 dropped entry whose own id was torn away"
		}
		return fmt.Sprintf("%d dropped entries whose own id was torn away", n)
	}
	var what string
	switch {
	case d.children > 0 && d.unread > 0:
		what = fmt.Sprintf("%s as parent an entry on a dropped line, and entries after %s may still name it", entries(d.children), lines(d.unread))
	case d.children > 0:
		what = entries(d.children) + " as parent an entry on a dropped line"
	default:
		what = fmt.Sprintf("entries after %s may still name it as parent (which, belay cannot tell)", lines(d.unread))
	}
	what += ": a file-level repair changes no parent link, and a reader walking parents from the leaf stops at such a link and loses what is before it"
	if linesOnly {
		return what + "; run belay repair on the file without --lines-only to relink them to their nearest surviving ancestors"
	}
	return what + "; relinking them needs the in-memory repair, which a file over the message-level limit does not get"
}
