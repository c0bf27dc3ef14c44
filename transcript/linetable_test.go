package transcript

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLineTableSpills holds the line table, with 3 blocks of 8 lines in
// memory, to plain arrays through random reads and writes, forwards,
// backwards and scattered, as the passes go.
func TestLineTableSpills(t *testing.T) {
	defer func(shift, resident int) { tableShift, tableResident = shift, resident }(tableShift, tableResident)
	tableShift, tableResident = 3, 3
	lt := newLineTable()
	defer lt.close()
	r := rand.New(rand.NewPCG(1, 2))
	var parent []int32
	var flags, marks []uint8
	for i := 0; i < 1000; i++ {
		lt.add(int64(i) * 77)
		parent, flags, marks = append(parent, noParent), append(flags, 0), append(marks, 0)
		if r.IntN(3) == 0 {
			p := int32(r.IntN(i + 1))
			lt.setParent(i, p)
			parent[i] = p
		}
		fl := uint8(r.UintN(256))
		lt.setFlags(i, fl)
		flags[i] = fl
	}
	require.NotNil(t, lt.spill, "the table spilled")
	for _, order := range []func(int) int{
		func(k int) int { return k },
		func(k int) int { return 999 - k },
		func(int) int { return r.IntN(1000) },
	} {
		for k := 0; k < 1000; k++ {
			i := order(k)
			require.Equal(t, parent[i], lt.parent(i), "line %d", i)
			require.Equal(t, flags[i], lt.flags(i), "line %d", i)
			require.Equal(t, marks[i], lt.marks(i), "line %d", i)
			require.Equal(t, int64(i)*77, lt.offset(i), "line %d", i)
			m := uint8(1) << r.IntN(8)
			lt.mark(i, m)
			marks[i] |= m
			if r.IntN(4) == 0 {
				p := int32(r.IntN(1000))
				lt.setParent(i, p)
				parent[i] = p
			}
		}
	}
	require.NoError(t, lt.err)
}
