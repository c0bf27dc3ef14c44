package transcript

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestIDTable holds idTable to a map under the scan's use: a window of n
// ids, each put once, the oldest removed as a new one comes, with keys
// from a small range so that cells collide and wrap around the table.
func TestIDTable(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 3, 8, 100} {
		tab := newIDTable(n)
		want := map[uint64]int32{}
		var window []uint64
		for step := 0; step < 20000; step++ {
			h := r.Uint64N(uint64(4 * n))
			if r.IntN(8) == 0 {
				h = r.Uint64() // far keys too
			}
			v, ok := tab.get(h)
			wv, wok := want[h]
			require.Equal(t, wok, ok, "step %d", step)
			require.Equal(t, wv, v)
			if ok {
				continue
			}
			if len(window) == n {
				old := window[0]
				window = window[1:]
				tab.del(old)
				delete(want, old)
				_, ok := tab.get(old)
				require.False(t, ok)
			}
			tab.put(h, int32(step))
			want[h] = int32(step)
			window = append(window, h)
		}
		for h, v := range want {
			got, ok := tab.get(h)
			require.True(t, ok)
			require.Equal(t, v, got)
		}
	}
}
