package pgstore

import (
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/belayhq/belay"
)

// Merged statements. A shared transaction (combine.go) carries the writes
// of many sessions, and most of them make the same few changes: a run
// created, a run's phase set, an inbox item posted. Each such change is a
// statement over a set of rows given as arrays (unnest), queued with one
// row; mergeQueued turns the same statement of many writes into one
// statement over all their rows. PostgreSQL's cost is mostly per
// statement (its plan's start and end, the table's and its indexes'
// opening, the constraints' expressions), not per row, so one statement
// of n rows costs much less than n statements of one.
//
// A mergeable statement takes only arrays, one element per row, and
// reaches its rows by key (planRobust). Statements of different writes
// commute: each write changes rows of its own session only. The
// statements of one write keep their order.

// mergeable names the statements mergeQueued merges.
var mergeable = map[string]bool{}

// merged registers sql as mergeable, also with returningRun, and returns
// it.
func merged(sql string) string {
	mergeable[sql] = true
	mergeable[sql+returningRun] = true
	return sql
}

// returningRun is the RETURNING clause whose rows are runs: a merged
// statement's rows reach each write's run by id, the first column.
const returningRun = ` RETURNING ` + runCols

// runOut is the run a queued statement returns (returningRun) and where it
// goes.
type runOut struct {
	id  string
	out *belay.Run
}

// mergeQueued returns the statements of lists (each write's, in its order)
// with the mergeable ones of different writes merged: at each step the
// writes whose next statement is not mergeable send it, and then the
// mergeable statement next for the most writes is sent once for them all.
// outs are the runs the statements return into (returningRun).
func mergeQueued(lists [][]*pgx.QueuedQuery, outs map[*pgx.QueuedQuery]runOut) ([]*pgx.QueuedQuery, error) {
	var out []*pgx.QueuedQuery
	next := make([]int, len(lists))
	for {
		left := false
		for i, l := range lists {
			for next[i] < len(l) && !mergeable[l[next[i]].SQL] {
				out = append(out, l[next[i]])
				next[i]++
			}
			left = left || next[i] < len(l)
		}
		if !left {
			return out, nil
		}
		count := map[string]int{}
		best := ""
		for i, l := range lists {
			if next[i] < len(l) {
				sql := l[next[i]].SQL
				count[sql]++
				if count[sql] > count[best] || count[sql] == count[best] && sql < best {
					best = sql
				}
			}
		}
		var group []*pgx.QueuedQuery
		for i, l := range lists {
			if next[i] < len(l) && l[next[i]].SQL == best {
				group = append(group, l[next[i]])
				next[i]++
			}
		}
		q, err := mergeGroup(group, outs)
		if err != nil {
			return nil, err
		}
		out = append(out, q)
	}
}

// mergeGroup is one statement for group, queued statements of the same
// mergeable SQL: their arrays joined.
func mergeGroup(group []*pgx.QueuedQuery, outs map[*pgx.QueuedQuery]runOut) (*pgx.QueuedQuery, error) {
	if len(group) == 1 {
		return group[0], nil
	}
	args := make([]any, len(group[0].Arguments))
	for j := range args {
		joined, err := joinArrays(group, j)
		if err != nil {
			return nil, err
		}
		args[j] = joined
	}
	b := &pgx.Batch{}
	q := b.Queue(group[0].SQL, args...)
	byID := map[string]*belay.Run{}
	for _, g := range group {
		if o, ok := outs[g]; ok {
			byID[o.id] = o.out
		}
	}
	if len(byID) == 0 {
		return q, nil
	}
	if len(byID) != len(group) {
		return nil, fmt.Errorf("pgstore: merged statement returns the runs of %d of its %d rows", len(byID), len(group))
	}
	q.Query(func(rows pgx.Rows) error {
		n := 0
		for rows.Next() {
			out, ok := byID[string(rows.RawValues()[0])]
			if !ok {
				return fmt.Errorf("pgstore: merged statement returned run %q, not one of its rows", rows.RawValues()[0])
			}
			r, err := scanRun(rows)
			if err != nil {
				return err
			}
			*out = r
			n++
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if n != len(byID) {
			// A row to change was not there: as QueryRow's.
			return pgx.ErrNoRows
		}
		return nil
	})
	return q, nil
}

// joinArrays joins argument j of every statement of group.
func joinArrays(group []*pgx.QueuedQuery, j int) (any, error) {
	switch group[0].Arguments[j].(type) {
	case []string:
		return join[string](group, j)
	case []*string:
		return join[*string](group, j)
	case []int64:
		return join[int64](group, j)
	case []bool:
		return join[bool](group, j)
	case []time.Time:
		return join[time.Time](group, j)
	case []*time.Time:
		return join[*time.Time](group, j)
	}
	return nil, fmt.Errorf("pgstore: merged statement argument %d is %T, not an array", j+1, group[0].Arguments[j])
}

func join[T any](group []*pgx.QueuedQuery, j int) ([]T, error) {
	var out []T
	for _, q := range group {
		a, ok := q.Arguments[j].([]T)
		if !ok {
			return nil, fmt.Errorf("pgstore: merged statement argument %d is %T and %T", j+1, group[0].Arguments[j], q.Arguments[j])
		}
		out = append(out, a...)
	}
	return out, nil
}

// nullable is s as an array element: NULL for "".
func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// nullableTime is t as an array element: NULL for the zero time.
func nullableTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}
