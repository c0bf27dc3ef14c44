package fsstore

import (
	"context"
	"slices"
	"sort"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/store"
)

var (
	_ store.RunLister       = (*Store)(nil)
	_ store.AddressedLeaser = (*Store)(nil)
)

// ListRuns selects a page of runs from the sessions' in-memory state (no
// journal is read): the first limit runs that match f and come after the
// cursor, in the order less. Only the runs that enter the page are copied,
// so a page of a large store costs one pass over its runs.
func (s *Store) ListRuns(_ context.Context, f belay.RunFilter, less func(a, b *belay.Run) bool, after func(*belay.Run) bool, limit int) ([]belay.Run, bool, error) {
	sessions, err := s.sessionsFor(f.Session)
	if err != nil {
		return nil, false, err
	}
	if limit <= 0 {
		return nil, false, nil
	}
	page := make([]*belay.Run, 0, limit+1)
	more := false
	for _, ss := range sessions {
		ss.mu.Lock()
		for _, r := range ss.st.Runs {
			if !f.Match(r) || after != nil && !after(r) {
				continue
			}
			if len(page) == limit && !less(r, page[limit-1]) {
				more = true
				continue
			}
			i := sort.Search(len(page), func(i int) bool { return less(r, page[i]) })
			c := copyRun(r)
			page = slices.Insert(page, i, &c)
			if len(page) > limit {
				page, more = page[:limit], true
			}
		}
		ss.mu.Unlock()
	}
	out := make([]belay.Run, len(page))
	for i, r := range page {
		out[i] = *r
	}
	return out, more, nil
}
