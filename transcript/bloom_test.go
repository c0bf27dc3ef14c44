package transcript

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// The id filter never forgets an id it was given, and at the load its
// comment names (400,000 ids) says "maybe" for about one absent id in
// 40,000 or fewer.
func TestBloomFilter(t *testing.T) {
	s := &streamRepair{bloom: make([]uint64, bloomBits/64)}
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 400_000
	in := make([]uint64, n)
	for i := range in {
		in[i] = rng.Uint64()
		s.bloomAdd(in[i])
	}
	for _, h := range in {
		require.True(t, s.bloomHas(h))
	}
	fp := 0
	for range n {
		if s.bloomHas(rng.Uint64()) {
			fp++
		}
	}
	t.Logf("false positives: %d of %d", fp, n)
	require.LessOrEqual(t, fp, n/40_000, "about one in 40,000 or fewer")
}
