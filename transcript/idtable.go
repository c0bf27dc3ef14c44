package transcript

// idTable maps id hashes to window slots: the scan's index of its window
// of recent ids, looked up for every line. It is open addressing with
// linear probing in a fixed table of at least twice as many cells as it
// ever holds, which is several times faster than a map for this load.
type idTable struct {
	keys []uint64
	vals []int32 // -1: empty cell
	mask int
}

func newIDTable(n int) *idTable {
	size := 16
	for size < 2*n {
		size *= 2
	}
	t := &idTable{keys: make([]uint64, size), vals: make([]int32, size), mask: size - 1}
	for i := range t.vals {
		t.vals[i] = -1
	}
	return t
}

func (t *idTable) home(h uint64) int { return int((h * 0x9e3779b97f4a7c15) >> 32 & uint64(t.mask)) }

// get returns the value of h.
func (t *idTable) get(h uint64) (int32, bool) {
	for i := t.home(h); ; i = (i + 1) & t.mask {
		switch {
		case t.vals[i] < 0:
			return 0, false
		case t.keys[i] == h:
			return t.vals[i], true
		}
	}
}

// put sets the value of h, which must not be in the table.
func (t *idTable) put(h uint64, v int32) {
	i := t.home(h)
	for t.vals[i] >= 0 {
		i = (i + 1) & t.mask
	}
	t.keys[i], t.vals[i] = h, v
}

// del removes h, moving back the cells after it that its cell kept from
// their home.
func (t *idTable) del(h uint64) {
	i := t.home(h)
	for {
		if t.vals[i] < 0 {
			return
		}
		if t.keys[i] == h {
			break
		}
		i = (i + 1) & t.mask
	}
	for j := (i + 1) & t.mask; t.vals[j] >= 0; j = (j + 1) & t.mask {
		// The cell at j may move to i if its home is not in (i, j].
		k := t.home(t.keys[j])
		if i <= j && (k <= i || k > j) || i > j && k <= i && k > j {
			t.keys[i], t.vals[i] = t.keys[j], t.vals[j]
			i = j
		}
	}
	t.vals[i] = -1
}
