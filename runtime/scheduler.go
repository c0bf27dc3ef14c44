package runtime

import (
	"container/heap"
	"fmt"

	"github.com/belayhq/belay"
)

// Policy says what a new run does when its session already has a run
// queued or running (G4).
type Policy string

// Follow-up policies.
const (
	// PolicyEnqueue queues the new run behind the session's others (FIFO).
	PolicyEnqueue Policy = "enqueue"
	// PolicyReject refuses the new run with ErrConversationBusy.
	PolicyReject Policy = "reject"
	// PolicyInterrupt cancels the active run and runs the new one next.
	PolicyInterrupt Policy = "interrupt"
	// PolicyReplace cancels the session's queued runs; the active one goes
	// on and the new one runs after it.
	PolicyReplace Policy = "replace"
)

// Valid reports whether p is a known policy ("" counts as enqueue).
func (p Policy) Valid() bool {
	switch p {
	case "", PolicyEnqueue, PolicyReject, PolicyInterrupt, PolicyReplace:
		return true
	}
	return false
}

// Limits are the admission caps (G5). Zero means unlimited.
type Limits struct {
	Global      int            `json:"global"`
	PerProvider map[string]int `json:"perProvider,omitempty"`
}

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
	limits     Limits
	order      uint64
	active     map[string]*job   // run id -> active job
	bySession  map[string]string // session -> active run id
	byProvider map[string]int    // provider -> active count
	queued     map[string]*job   // run id -> queued job
	sessionQ   map[string][]*job // session -> queued runs in conversation order
	ready      jobHeap
	parked     map[string]*jobHeap // provider -> heads waiting for capacity
}

func newScheduler(l Limits) *scheduler {
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

// ErrConversationBusy is returned for a run submitted with PolicyReject to
// a session that has a run queued or running.
var ErrConversationBusy = fmt.Errorf("%w: the session already has a run; submit with policy enqueue, interrupt or replace", belay.ErrActive)

// submitResult says what submitting a run requires of the runtime.
type submitResult struct {
	// Cancel lists runs to cancel: the active run (interrupt) or queued
	// ones (replace).
	Cancel []string
}

// busy reports whether a session has a run queued or running.
func (s *scheduler) busy(session string) bool {
	_, active := s.bySession[session]
	return active || len(s.sessionQ[session]) > 0
}

// submit queues a run under a policy. It does not start it: call promote.
func (s *scheduler) submit(id, session, provider string, priority int, p Policy) (submitResult, error) {
	var res submitResult
	if s.queued[id] != nil || s.active[id] != nil {
		return res, nil
	}
	switch p {
	case PolicyReject:
		if s.busy(session) {
			return res, ErrConversationBusy
		}
	case PolicyInterrupt:
		if a, ok := s.bySession[session]; ok {
			res.Cancel = append(res.Cancel, a)
		}
	case PolicyReplace:
		for _, q := range s.sessionQ[session] {
			res.Cancel = append(res.Cancel, q.id)
		}
	}
	s.order++
	j := &job{id: id, session: session, provider: provider, priority: priority, order: s.order, front: p == PolicyInterrupt}
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
	return res, nil
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
	j := &job{id: id, session: session, provider: provider}
	s.active[id] = j
	s.bySession[session] = id
	s.byProvider[provider]++
}

// remove forgets a queued run (cancelled before it started). It reports
// whether the run was queued.
func (s *scheduler) remove(id string) bool {
	j, ok := s.queued[id]
	if !ok {
		return false
	}
	delete(s.queued, j.id)
	unheap(j)
	q := s.sessionQ[j.session]
	for i, o := range q {
		if o == j {
			q = append(q[:i:i], q[i+1:]...)
			break
		}
	}
	if len(q) == 0 {
		delete(s.sessionQ, j.session)
	} else {
		s.sessionQ[j.session] = q
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
	delete(s.active, id)
	if s.bySession[j.session] == id {
		delete(s.bySession, j.session)
	}
	if s.byProvider[j.provider]--; s.byProvider[j.provider] <= 0 {
		delete(s.byProvider, j.provider)
	}
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

// promote starts every queued run that may start now, in order of
// priority, then submission, and returns their ids.
func (s *scheduler) promote() []string {
	var started []string
	for s.ready.Len() > 0 {
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
		delete(s.queued, j.id)
		if q := s.sessionQ[j.session][1:]; len(q) == 0 {
			delete(s.sessionQ, j.session)
		} else {
			s.sessionQ[j.session] = q
		}
		s.active[j.id] = j
		s.bySession[j.session] = j.id
		s.byProvider[j.provider]++
		started = append(started, j.id)
	}
	return started
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
