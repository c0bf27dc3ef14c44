package fsstore

import (
	"container/heap"
	"maps"

	"github.com/belayhq/belay/store"
)

// job is a run as the scheduler sees it.
type job struct {
	id       string
	session  string
	provider string
	priority int
	order    uint64   // submission order
	front    bool     // runs before the session's other queued runs
	heap     *jobHeap // the heap holding it, nil if none
	index    int      // its index there
}

// scheduler decides which queued runs start: at most one active run per
// session (the conversation lease), global and per-provider caps never
// exceeded, and queued runs promoted by priority, then FIFO, as soon as
// capacity frees (G4, G5). It is a plain data structure, not safe for
// concurrent use: the runtime calls it under its lock. It performs
// nothing; it returns its decisions.
//
// Only the head of each session's queue can start. Heads of sessions with
// no active run wait in the ready heap; a head whose provider is at its
// cap is parked in that provider's heap until one of its runs finishes.
// So promotion pops only runs that start, plus at most one parked run per
// provider, and never scans the whole queue.
type scheduler struct {
	limits     store.Limits
	order      uint64
	active     map[string]*job   // run id -> active job
	bySession  map[string]string // session -> active run id
	byProvider map[string]int    // provider -> active count
	queued     map[string]*job   // run id -> queued job
	sessionQ   map[string][]*job // session -> queued runs in conversation order
	ready      jobHeap
	parked     map[string]*jobHeap // provider -> heads waiting for capacity
}

func newScheduler(l store.Limits) *scheduler {
	return &scheduler{
		limits:     l,
		active:     map[string]*job{},
		bySession:  map[string]string{},
		byProvider: map[string]int{},
		queued:     map[string]*job{},
		sessionQ:   map[string][]*job{},
		parked:     map[string]*jobHeap{},
	}
}

// add queues a run at the end of its session's queue, or, if front, at
// its head (ahead of earlier queued follow-ups). It does not start it:
// call promote.
func (s *scheduler) add(id, session, provider string, priority int, front bool) {
	if s.queued[id] != nil || s.active[id] != nil {
		return
	}
	s.order++
	j := &job{id: id, session: session, provider: provider, priority: priority, order: s.order, front: front}
	s.queued[id] = j
	q := s.sessionQ[session]
	if j.front && len(q) > 0 {
		// Next in the conversation, ahead of earlier queued follow-ups.
		unheap(q[0])
		q = append([]*job{j}, q...)
	} else {
		q = append(q, j)
	}
	s.sessionQ[session] = q
	s.offerHead(session)
}

// offerHead puts a session's head into the ready heap if the session has
// no active run and the head is not already waiting somewhere.
func (s *scheduler) offerHead(session string) {
	q := s.sessionQ[session]
	if len(q) == 0 || q[0].heap != nil {
		return
	}
	if _, busy := s.bySession[session]; busy {
		return
	}
	heap.Push(&s.ready, q[0])
}

// unheap takes a job out of whatever heap holds it.
func unheap(j *job) {
	if j.heap != nil {
		heap.Remove(j.heap, j.index)
	}
}

// restore adds a run that is already active (after a restart).
func (s *scheduler) restore(id, session, provider string) {
	s.occupy(&job{id: id, session: session, provider: provider})
}

// remove forgets a queued run (cancelled before it started). It reports
// whether the run was queued.
func (s *scheduler) remove(id string) bool {
	j, ok := s.queued[id]
	if !ok {
		return false
	}
	unheap(j)
	if s.dequeue(j) {
		s.offerHead(j.session)
	}
	return true
}

// finish releases an active run's capacity and conversation lease.
func (s *scheduler) finish(id string) {
	j, ok := s.active[id]
	if !ok {
		return
	}
	s.vacate(j)
	s.offerHead(j.session)
	// One slot of the provider freed: give its best parked run another go.
	if p := s.parked[j.provider]; p != nil && p.Len() > 0 {
		heap.Push(&s.ready, heap.Pop(p))
	}
}

// providerFull reports whether provider is at its cap.
func (s *scheduler) providerFull(provider string) bool {
	c := s.limits.PerProvider[provider]
	return c > 0 && s.byProvider[provider] >= c
}

// setLimits changes the caps. Runs parked under the old caps get another
// look.
func (s *scheduler) setLimits(l store.Limits) {
	if l.Global == s.limits.Global && maps.Equal(l.PerProvider, s.limits.PerProvider) {
		return
	}
	s.limits = store.Limits{Global: l.Global, PerProvider: maps.Clone(l.PerProvider)}
	for _, p := range s.parked {
		for p.Len() > 0 {
			heap.Push(&s.ready, heap.Pop(p))
		}
	}
}

// unpark moves parked heads back to the ready heap as far as their
// providers have room. A finish moves one parked head per run ended; but
// that head may leave the ready heap without starting (cancelled, or put
// behind an interrupting run), and its provider's room must not then go
// unused while the heads parked behind it wait.
func (s *scheduler) unpark() {
	for prov, p := range s.parked {
		room := p.Len()
		if c := s.limits.PerProvider[prov]; c > 0 {
			room = min(room, c-s.byProvider[prov])
		}
		for ; room > 0; room-- {
			heap.Push(&s.ready, heap.Pop(p))
		}
	}
}

// promote starts up to max queued runs that may start now (max <= 0: no
// bound), in order of priority, then submission, and returns their ids.
// They count as active at once: the caller leases them, and gives back
// with unstart those it could not.
func (s *scheduler) promote(max int) []string {
	s.unpark()
	var started []string
	for s.ready.Len() > 0 && (max <= 0 || len(started) < max) {
		if s.limits.Global > 0 && len(s.active) >= s.limits.Global {
			break
		}
		j := heap.Pop(&s.ready).(*job)
		if s.providerFull(j.provider) {
			p := s.parked[j.provider]
			if p == nil {
				p = &jobHeap{}
				s.parked[j.provider] = p
			}
			heap.Push(p, j)
			continue
		}
		s.start(j)
		started = append(started, j.id)
	}
	return started
}

// dequeue takes a queued job out of its session's queue, and reports
// whether the session still has queued runs.
func (s *scheduler) dequeue(j *job) bool {
	delete(s.queued, j.id)
	q := s.sessionQ[j.session]
	for i, o := range q {
		if o == j {
			q = append(q[:i:i], q[i+1:]...)
			break
		}
	}
	if len(q) == 0 {
		delete(s.sessionQ, j.session)
		return false
	}
	s.sessionQ[j.session] = q
	return true
}

// admit makes a new run active at once, as a claim would, and reports
// whether it did: only when a promote now would start it first (no head
// waits in the ready heap), its session has no run queued or active, and
// the caps leave room. The caller leases it in the same write that
// creates it, or gives it back with finish.
func (s *scheduler) admit(id, session, provider string) bool {
	s.unpark()
	if s.ready.Len() > 0 || s.queued[id] != nil || s.active[id] != nil || len(s.sessionQ[session]) > 0 {
		return false
	}
	if _, busy := s.bySession[session]; busy {
		return false
	}
	if s.limits.Global > 0 && len(s.active) >= s.limits.Global || s.providerFull(provider) {
		return false
	}
	s.order++
	s.occupy(&job{id: id, session: session, provider: provider, order: s.order})
	return true
}

// start moves the head of its session's queue to active.
func (s *scheduler) start(j *job) {
	s.dequeue(j)
	s.occupy(j)
}

// occupy makes j active: its session's run, one of its provider's.
func (s *scheduler) occupy(j *job) {
	s.active[j.id] = j
	s.bySession[j.session] = j.id
	s.byProvider[j.provider]++
}

// vacate undoes occupy.
func (s *scheduler) vacate(j *job) {
	delete(s.active, j.id)
	if s.bySession[j.session] == j.id {
		delete(s.bySession, j.session)
	}
	if s.byProvider[j.provider]--; s.byProvider[j.provider] <= 0 {
		delete(s.byProvider, j.provider)
	}
}

// activate makes a queued run active outside promote (a lease taken
// directly), whatever the caps: the store records what happened.
func (s *scheduler) activate(id string) {
	j, ok := s.queued[id]
	if !ok {
		return
	}
	unheap(j)
	s.start(j)
}

// unstart gives back a run promote started whose lease was not granted:
// it heads its session's queue again.
func (s *scheduler) unstart(id string) {
	j, ok := s.active[id]
	if !ok {
		return
	}
	s.vacate(j)
	s.queued[id] = j
	s.sessionQ[j.session] = append([]*job{j}, s.sessionQ[j.session]...)
	if q := s.sessionQ[j.session]; len(q) > 1 {
		unheap(q[1])
	}
	s.offerHead(j.session)
}

// end forgets a run that ended, queued or active.
func (s *scheduler) end(id string) {
	if !s.remove(id) {
		s.finish(id)
	}
}

// activeIn returns the session's active run, if any.
func (s *scheduler) activeIn(session string) string { return s.bySession[session] }

// queuedIn returns the session's queued runs, in conversation order.
func (s *scheduler) queuedIn(session string) []string {
	var ids []string
	for _, j := range s.sessionQ[session] {
		ids = append(ids, j.id)
	}
	return ids
}

// activeIDs returns the active runs.
func (s *scheduler) activeIDs() []string {
	ids := make([]string, 0, len(s.active))
	for id := range s.active {
		ids = append(ids, id)
	}
	return ids
}

// queuedCount returns how many runs are queued.
func (s *scheduler) queuedCount() int { return len(s.queued) }

// activeCount returns how many runs are active.
func (s *scheduler) activeCount() int { return len(s.active) }

// jobHeap orders jobs by priority (higher first), then submission order.
type jobHeap []*job

func (h jobHeap) Len() int { return len(h) }
func (h jobHeap) Less(i, j int) bool {
	a, b := h[i], h[j]
	if a.priority != b.priority {
		return a.priority > b.priority
	}
	return a.order < b.order
}
func (h jobHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *jobHeap) Push(x any) {
	j := x.(*job)
	j.index = len(*h)
	j.heap = h
	*h = append(*h, j)
}
func (h *jobHeap) Pop() any {
	old := *h
	j := old[len(old)-1]
	old[len(old)-1] = nil
	j.heap, j.index = nil, -1
	*h = old[:len(old)-1]
	return j
}
