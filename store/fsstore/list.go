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
// cursor, in the order less. Only the runs that enter the page are copied
// (a finished run decoded), so a page of a large store costs one pass over
// its runs' summaries.
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
	// take puts r in the page if it belongs there; full returns it whole
	// (a copy), r being only its key for a finished run.
	take := func(r *belay.Run, full func() (*belay.Run, error)) error {
		if after != nil && !after(r) {
			return nil
		}
		if len(page) == limit && !less(r, page[limit-1]) {
			more = true
			return nil
		}
		i := sort.Search(len(page), func(i int) bool { return less(r, page[i]) })
		c, err := full()
		if err != nil {
			return err
		}
		page = slices.Insert(page, i, c)
		if len(page) > limit {
			page, more = page[:limit], true
		}
		return nil
	}
	// A finished run's key holds what f asks but its provider and tags.
	keyed, whole := keyFilter(f)
	for _, ss := range sessions {
		ss.mu.Lock()
		err := func() error {
			for _, r := range ss.st.Runs {
				if !f.Match(r) {
					continue
				}
				if err := take(r, func() (*belay.Run, error) { c := copyRun(r); return &c, nil }); err != nil {
					return err
				}
			}
			d := &ss.st.done
			var key belay.Run
			for i := range d.len() {
				if d.keyInto(i, ss.id, &key); !keyed.Match(&key) {
					continue
				}
				k := d.key(i, ss.id)
				var r *belay.Run
				full := func() (*belay.Run, error) {
					if r != nil {
						return r, nil
					}
					return d.run(i)
				}
				if whole {
					var err error
					if r, err = d.run(i); err != nil {
						return err
					}
					if !f.Match(r) {
						continue
					}
				}
				if err := take(k, full); err != nil {
					return err
				}
			}
			return nil
		}()
		ss.mu.Unlock()
		if err != nil {
			return nil, false, err
		}
	}
	out := make([]belay.Run, len(page))
	for i, r := range page {
		out[i] = *r
	}
	return out, more, nil
}
