package fsstore

import (
	"context"
	"slices"
	"sort"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/store"
)

var (
	_ store.RunLister        = (*Store)(nil)
	_ store.AddressedLeaser  = (*Store)(nil)
	_ store.RunStatusCounter = (*Store)(nil)
)

// RunStatusCounts counts the runs by status, the finished ones by their
// summaries.
func (s *Store) RunStatusCounts(context.Context) (map[belay.RunStatus]int, error) {
	sessions, err := s.allSessions()
	if err != nil {
		return nil, err
	}
	counts := map[belay.RunStatus]int{}
	for _, ss := range sessions {
		ss.mu.Lock()
		for _, r := range ss.st.Runs {
			counts[r.Status]++
		}
		for i := range ss.st.done.len() {
			counts[ss.st.done.status(i)]++
		}
		ss.mu.Unlock()
	}
	return counts, nil
}

// ListRuns selects a page of runs from the sessions' in-memory state (no
// journal is read): the first limit runs that match f and come after the
// cursor, in the order less. A finished run is judged by its summary, and
// only the runs still in the page once their session is passed are
// copied (a finished run decoded), so a page of a large store costs one
// pass over its runs' summaries and at most limit decodes per session.
func (s *Store) ListRuns(_ context.Context, f belay.RunFilter, less func(a, b *belay.Run) bool, after func(*belay.Run) bool, limit int) ([]belay.Run, bool, error) {
	sessions, err := s.sessionsFor(f.Session)
	if err != nil {
		return nil, false, err
	}
	if limit <= 0 {
		return nil, false, nil
	}
	// A page entry is a run of its own, or one of the session being
	// passed: a live run of its state (done == inState), or a finished
	// run's key (done: its entry), copied or decoded once it is passed.
	const (
		owned   = -1
		inState = -2
	)
	type entry struct {
		r    *belay.Run
		done int
	}
	page := make([]entry, 0, limit+1)
	more := false
	// take puts r in the page if it belongs there; spare is then a
	// finished run's key the page does not hold (r, or one it pushed out),
	// for the next key.
	var spare *belay.Run
	take := func(r *belay.Run, done int) {
		switch {
		case after != nil && !after(r):
		case len(page) == limit && !less(r, page[limit-1].r):
			more = true
		default:
			i := sort.Search(len(page), func(i int) bool { return less(r, page[i].r) })
			page = slices.Insert(page, i, entry{r, done})
			if len(page) > limit {
				if out := page[limit]; out.done >= 0 {
					spare = out.r
				}
				page, more = page[:limit], true
			}
			return
		}
		if done >= 0 {
			spare = r
		}
	}
	// A finished run's key holds what f asks but its provider and tags.
	keyed, whole := keyFilter(f)
	for _, ss := range sessions {
		ss.mu.Lock()
		err := func() error {
			for _, r := range ss.st.Runs {
				if f.Match(r) {
					take(r, inState)
				}
			}
			d := &ss.st.done
			var key belay.Run
			spare = nil
			for i := range d.len() {
				if d.keyInto(i, &key); !keyed.Match(&key) {
					continue
				}
				if whole {
					r, err := d.run(i)
					if err != nil {
						return err
					}
					if f.Match(r) {
						take(r, owned)
					}
					continue
				}
				k := spare
				if spare = nil; k == nil {
					k = new(belay.Run)
				}
				*k = key
				k.ID = d.id(i)
				take(k, i)
			}
			// What of the session stays in the page, whole and copied.
			for i, e := range page {
				switch {
				case e.done == inState:
					c := copyRun(e.r)
					page[i] = entry{&c, owned}
				case e.done >= 0:
					r, err := d.run(e.done)
					if err != nil {
						return err
					}
					page[i] = entry{r, owned}
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
	for i, e := range page {
		out[i] = *e.r
	}
	return out, more, nil
}
