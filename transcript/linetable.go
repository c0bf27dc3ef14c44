package transcript

import (
	"encoding/binary"
	"fmt"
	"os"
)

// lineTable is the per-line state of a streaming repair: each line's
// parent (a line index), its offset in the file, its scan flags and its
// marks (path, result child, children counted), 14 bytes a line. It is held in blocks of
// lines, at most tableResident of them in memory; the others are written
// to a spill file (created in the temporary directory when first needed,
// unlinked at once where the system allows), so memory stays the same
// whatever the number of lines. The passes go through the lines in order,
// forwards or backwards, so a small number of blocks is enough.
//
// Reading it moves blocks in and out: one goroutine at a time uses it (the
// passes' consumers, never their parallel workers).
//
// An I/O error of the spill file is kept (err) and every accessor then
// works on zeroed data: each pass checks err before it returns.
type lineTable struct {
	n      int
	blocks []tableBlock
	live   []int // resident blocks, least recently used first
	cur    int   // the block last used (-1: none)
	curB   []byte
	spill  *os.File
	remove string // the spill file's name, when it could not be unlinked at once
	err    error
}

type tableBlock struct {
	data   []byte // nil when not resident
	dirty  bool   // changed since it was last written
	onDisk bool   // written to the spill file at least once
}

// Vars for tests, which make small files spill.
var (
	tableShift    = 13 // 8,192 lines a block (112 KiB)
	tableResident = 6  // blocks in memory at most
)

// Line marks.
const (
	mPath  uint8 = 1 << iota // on the path from the leaf
	mResCh                   // claude: a path line whose path child is a result line
	mKid1                    // has a child
	mKid2                    // has two children or more
	// The path as the scan reads it, before the leaf is known (check.go).
	mSpec      // on it
	mSpecResCh // its child on it is a result line
	mSpecBr    // claude: a result line attached to its call's line
)

// A row of the table: parent (4 bytes), offset (8), flags (1), marks (1),
// each column a run of the block.
const tableRow = 14

func newLineTable() *lineTable { return &lineTable{cur: -1} }

func (t *lineTable) blockLen() int { return 1 << tableShift }

// block returns the data of line i's block, loading it if needed.
func (t *lineTable) block(i int) ([]byte, int) {
	b, j := i>>tableShift, i&(1<<tableShift-1)
	if b == t.cur {
		return t.curB, j
	}
	return t.load(b), j
}

func (t *lineTable) load(b int) []byte {
	blk := &t.blocks[b]
	if blk.data != nil {
		for k, r := range t.live {
			if r == b {
				copy(t.live[k:], t.live[k+1:])
				t.live[len(t.live)-1] = b
				break
			}
		}
		t.cur, t.curB = b, blk.data
		return blk.data
	}
	var data []byte
	if len(t.live) >= tableResident {
		old := t.live[0]
		t.live = t.live[1:]
		ob := &t.blocks[old]
		if ob.dirty {
			t.write(old, ob.data)
			ob.dirty, ob.onDisk = false, true
		}
		data, ob.data = ob.data, nil
	} else {
		data = make([]byte, tableRow<<tableShift)
	}
	if blk.onDisk {
		if t.err == nil {
			if _, err := t.spill.ReadAt(data, int64(b)*int64(len(data))); err != nil {
				t.err = fmt.Errorf("transcript: reading the line table's spill file: %w", err)
			}
		}
		if t.err != nil {
			clear(data)
		}
	} else {
		clear(data)
	}
	blk.data = data
	t.live = append(t.live, b)
	t.cur, t.curB = b, data
	return data
}

func (t *lineTable) write(b int, data []byte) {
	if t.err != nil {
		return
	}
	if t.spill == nil {
		f, err := os.CreateTemp("", "belay-repair-lines-*")
		if err != nil {
			t.err = fmt.Errorf("transcript: the line table's spill file: %w", err)
			return
		}
		t.spill = f
		if os.Remove(f.Name()) != nil {
			t.remove = f.Name() // open files cannot be removed here: at close
		}
	}
	if _, err := t.spill.WriteAt(data, int64(b)*int64(len(data))); err != nil {
		t.err = fmt.Errorf("transcript: writing the line table's spill file: %w", err)
	}
}

// close removes the spill file.
func (t *lineTable) close() {
	if t.spill == nil {
		return
	}
	// Nothing more is read from it: an error closing it loses nothing.
	_ = t.spill.Close()
	if t.remove != "" {
		_ = os.Remove(t.remove) // best effort: a temporary file
	}
	t.spill = nil
}

// add appends a line at offset off with no parent, flags or marks.
func (t *lineTable) add(off int64) {
	if t.n>>tableShift == len(t.blocks) {
		t.blocks = append(t.blocks, tableBlock{})
	}
	t.n++
	d, j := t.block(t.n - 1)
	binary.LittleEndian.PutUint32(d[4*j:], 1<<32-1) // noParent
	binary.LittleEndian.PutUint64(d[4<<tableShift+8*j:], uint64(off))
	t.blocks[t.cur].dirty = true
}

// offset returns where line i starts in the file.
func (t *lineTable) offset(i int) int64 {
	d, j := t.block(i)
	return int64(binary.LittleEndian.Uint64(d[4<<tableShift+8*j:]))
}

func (t *lineTable) parent(i int) int32 {
	d, j := t.block(i)
	return int32(binary.LittleEndian.Uint32(d[4*j:]))
}

func (t *lineTable) setParent(i int, p int32) {
	d, j := t.block(i)
	binary.LittleEndian.PutUint32(d[4*j:], uint32(p))
	t.blocks[t.cur].dirty = true
}

func (t *lineTable) flags(i int) uint8 {
	d, j := t.block(i)
	return d[12<<tableShift+j]
}

func (t *lineTable) setFlags(i int, fl uint8) {
	d, j := t.block(i)
	d[12<<tableShift+j] = fl
	t.blocks[t.cur].dirty = true
}

func (t *lineTable) marks(i int) uint8 {
	d, j := t.block(i)
	return d[13<<tableShift+j]
}

func (t *lineTable) mark(i int, m uint8) {
	d, j := t.block(i)
	d[13<<tableShift+j] |= m
	t.blocks[t.cur].dirty = true
}

func (t *lineTable) unmark(i int, m uint8) {
	d, j := t.block(i)
	d[13<<tableShift+j] &^= m
	t.blocks[t.cur].dirty = true
}

// onPath reports whether line i is on the path.
func (t *lineTable) onPath(i int) bool { return t.marks(i)&mPath != 0 }
