package pgstore

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
)

var (
	mergeA = merged(`-- a`)
	mergeB = merged(`-- b`)
)

// TestMergeQueued: each write's statements keep their order; the same
// mergeable statement of different writes is sent once with their arrays
// joined; any other statement is sent as it was.
func TestMergeQueued(t *testing.T) {
	q := func(sql string, arg ...string) *pgx.QueuedQuery {
		return &pgx.QueuedQuery{SQL: sql, Arguments: []any{arg}}
	}
	lists := [][]*pgx.QueuedQuery{
		{q(mergeA, "1"), q("-- x1"), q(mergeB, "1")},
		{q(mergeB, "2"), q(mergeA, "2")},
		{q("-- x3"), q(mergeA, "3"), q(mergeA, "3'")},
	}
	out, err := mergeQueued(lists, nil)
	require.NoError(t, err)
	var got []string
	for _, x := range out {
		got = append(got, x.SQL)
		if len(x.Arguments) > 0 {
			for _, a := range x.Arguments[0].([]string) {
				got = append(got, " "+a)
			}
		}
	}
	require.Equal(t, []string{
		"-- x3",            // not mergeable: sent first
		mergeA, " 1", " 3", // next for two writes
		"-- x1",
		mergeB, " 1", " 2",
		mergeA, " 2", " 3'", // the third write's second: after its first
	}, got)

	// Arrays of different types are a bug, not a statement.
	_, err = mergeQueued([][]*pgx.QueuedQuery{
		{{SQL: mergeA, Arguments: []any{[]string{"1"}}}},
		{{SQL: mergeA, Arguments: []any{[]int64{2}}}},
	}, nil)
	require.ErrorContains(t, err, "argument 1 is []string and []int64")
	_, err = mergeQueued([][]*pgx.QueuedQuery{
		{{SQL: mergeA, Arguments: []any{"1"}}},
		{{SQL: mergeA, Arguments: []any{"2"}}},
	}, nil)
	require.ErrorContains(t, err, "not an array")

	// Some of the rows return their runs and some do not: a bug too.
	a, b := q(mergeA, "1"), q(mergeA, "2")
	_, err = mergeQueued([][]*pgx.QueuedQuery{{a}, {b}}, map[*pgx.QueuedQuery]runOut{a: {id: "run_1", out: &belay.Run{}}})
	require.ErrorContains(t, err, "returns the runs of 1 of its 2 rows")
}
