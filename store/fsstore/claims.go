package fsstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/store"
)

// This file holds the decisions that must hold across runtime instances
// (issue 14): submit under a follow-up policy, claims under the caps with
// one active run per session, owner records and the rescue of their runs,
// durable cancel requests, and the change feed.
//
// fsstore admits one process per data directory (its lock), so what it
// decides in memory under its own locks is decided for every instance
// over it; the state it decides from is the sessions' folded journals,
// kept in step by the commit hook (afterCommit) so that no path can change
// a run without the scheduler seeing it. Owner records live in that
// process: an owner of a previous process is gone by definition (it no
// longer holds the lock), so its runs are rescued at once on the next
// claim.

// claims is the store-wide admission state. Lock order: a session's mu,
// then claims.mu (a leaf: nothing is locked while it is held).
type claims struct {
	mu     sync.Mutex
	sched  *scheduler
	owners map[string]*store.Owner
	// rescueAt is the earliest moment a run could become rescuable: a
	// lease or an owner record expiring. rescueNow says an owner went away.
	rescueAt  time.Time
	rescueNow bool
}

func (c *claims) init() {
	c.sched = newScheduler(store.Limits{})
	c.owners = map[string]*store.Owner{}
	c.rescueNow = true
}

// rearm makes the next claim look for runs to rescue again: this one
// stopped before it had looked at every run it listed.
func (c *claims) rearm() {
	c.mu.Lock()
	c.rescueNow = true
	c.mu.Unlock()
}

// noteExpiry makes the next claim look for runs to rescue at t.
func (c *claims) noteExpiry(t time.Time) {
	c.mu.Lock()
	if c.rescueAt.IsZero() || t.Before(c.rescueAt) {
		c.rescueAt = t
	}
	c.mu.Unlock()
}

// ownerLive reports whether owner has an unexpired record. c.mu is held.
func (c *claims) ownerLive(owner string, now time.Time) bool {
	o := c.owners[owner]
	return o != nil && now.Before(o.ExpiresAt)
}

// schedule adds a session's loaded runs to the scheduler: running runs
// are active, queued ones wait in their order.
func (s *Store) schedule(sessions []*session) {
	type q struct {
		r     *belay.Run
		front bool
	}
	var queued []q
	s.claims.mu.Lock()
	defer s.claims.mu.Unlock()
	for _, ss := range sessions {
		ss.mu.Lock()
		for _, r := range ss.st.Runs {
			switch {
			case r.Status == belay.RunRunning:
				s.claims.sched.restore(r.ID, r.Session, r.Provider)
			case r.Status == belay.RunQueued:
				queued = append(queued, q{r, ss.st.Front[r.ID]})
			}
		}
		ss.mu.Unlock()
	}
	sort.SliceStable(queued, func(i, j int) bool {
		if !queued[i].r.CreatedAt.Equal(queued[j].r.CreatedAt) {
			return queued[i].r.CreatedAt.Before(queued[j].r.CreatedAt)
		}
		return queued[i].r.InputSeq < queued[j].r.InputSeq
	})
	for _, e := range queued {
		s.claims.sched.add(e.r.ID, e.r.Session, e.r.Provider, e.r.Priority, e.front)
	}
}

// created tells the scheduler and the feed about a new session and its
// first run, written before the session was indexed.
func (s *Store) created(ss *session) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	evs := []belay.Event{{Type: belay.EventSessionCreated, Seq: 1}}
	for _, r := range ss.st.Runs {
		evs = append(evs, belay.Event{Type: belay.EventRunCreated, Seq: r.InputSeq, Run: r.ID})
	}
	s.afterCommit(ss, evs)
}

// afterCommit keeps the id indexes, the scheduler and the change feed in
// step with state changes a session just committed and applied. ss.mu is
// held.
//
// A new run or delivery is indexed here, before the scheduler or the feed
// can hand its id to anyone: a claim that promotes a run the moment it is
// queued (woken by another commit) must find it by id, or it would fail
// and give the run back with nobody left to wake for it.
func (s *Store) afterCommit(ss *session, evs []belay.Event) {
	var deliveries []string // by event, for the feed
	locked := false
	index := func() {
		if !locked {
			s.idxMu.Lock() // only for a commit that adds an id: readers come first
			locked = true
		}
	}
	for i := range evs {
		e := &evs[i]
		switch e.Type {
		case belay.EventRunCreated:
			if e.Run != "" {
				index()
				s.runs[e.Run] = ss.id
			}
		case belay.EventDeliveryPosted, belay.EventDeliveryLeased, belay.EventDeliverySettled,
			belay.EventDeliveryExpired, belay.EventDeliveryReturned:
			id := leadingID(e.Data)
			if deliveries == nil {
				deliveries = make([]string, len(evs))
			}
			deliveries[i] = id
			if e.Type == belay.EventDeliveryPosted && id != "" {
				index()
				s.deliveries[id] = ss.id
			}
		}
	}
	if locked {
		s.idxMu.Unlock()
	}
	var buf [4]store.Change // push copies them: most commits fit here
	changes := buf[:0]
	s.claims.mu.Lock()
	for i := range evs {
		e := &evs[i]
		ch := store.Change{Session: ss.id, Seq: e.Seq, Type: e.Type, Run: e.Run}
		if deliveries != nil {
			ch.Delivery = deliveries[i]
		}
		switch e.Type {
		case belay.EventRunCreated:
			if r := ss.st.runs[e.Run]; r != nil {
				s.claims.sched.add(r.ID, r.Session, r.Provider, r.Priority, ss.st.Front[r.ID])
			}
		case belay.EventRunLeased:
			s.claims.sched.activate(e.Run)
			if r := ss.st.runs[e.Run]; r != nil && r.Lease != nil && (s.claims.rescueAt.IsZero() || r.Lease.ExpiresAt.Before(s.claims.rescueAt)) {
				s.claims.rescueAt = r.Lease.ExpiresAt
			}
		case belay.EventRunUpdated:
			if ss.st.ended(e.Run) {
				s.claims.sched.end(e.Run)
				ch.Ended = true
			}
		}
		if store.InFeed(ch) {
			changes = append(changes, ch)
		}
	}
	s.claims.mu.Unlock()
	s.feed.push(changes)
}

// leadingID returns the "id" of a delivery event's payload, which the
// store wrote from a struct whose first field is the id: the id is read
// from the front of the JSON, without decoding the rest (an inbox item
// carries the caller's data). A payload that does not start so is decoded.
func leadingID(data []byte) string {
	if rest, ok := bytes.CutPrefix(data, []byte(idPrefix)); ok {
		if i := bytes.IndexByte(rest, '"'); i >= 0 && bytes.IndexByte(rest[:i], '\\') < 0 {
			return string(rest[:i])
		}
	}
	var p struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(data, &p) // the event was just written from such a struct
	return p.ID
}

// forget drops a removed session's runs from the scheduler. ss.mu is held.
func (s *Store) forget(ss *session) {
	s.claims.mu.Lock()
	defer s.claims.mu.Unlock()
	for _, r := range ss.st.Runs {
		if !r.Status.Terminal() {
			s.claims.sched.end(r.ID)
		}
	}
}

// Submit creates a run under a follow-up policy (see store.Store).
func (s *Store) Submit(ctx context.Context, in store.SubmitInput) (store.SubmitResult, error) {
	var res store.SubmitResult
	if !in.Policy.Valid() {
		return res, fmt.Errorf("%w: policy %q is not enqueue, reject, interrupt or replace", belay.ErrInvalid, in.Policy)
	}
	if in.Claim != nil {
		if err := in.Claim.Check(); err != nil {
			return res, err
		}
	}
	if err := checkJSON("run input", in.Input); err != nil {
		return res, err
	}
	if err := belay.CheckTags(in.Tags, in.Meta); err != nil {
		return res, err
	}
	if err := belay.CheckPriority(in.Priority); err != nil {
		return res, err
	}
	ss, err := s.session(in.Session)
	if err != nil {
		return res, err
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if in.IdempotencyKey != "" {
		if id, ok := ss.st.RunKeys[in.IdempotencyKey]; ok {
			r, err := ss.st.keyed(id)
			if err != nil {
				return res, err
			}
			res.Run = copyRun(r)
			return res, nil
		}
	}
	if err := ss.writable(); err != nil {
		return res, err
	}
	s.claims.mu.Lock()
	active, queued := s.claims.sched.activeIn(ss.id), s.claims.sched.queuedIn(ss.id)
	s.claims.mu.Unlock()
	front := false
	switch in.Policy {
	case belay.PolicyReject:
		if active != "" || len(queued) > 0 {
			return res, store.ErrConversationBusy
		}
	case belay.PolicyReplace:
		res.Cancelled = queued
	case belay.PolicyInterrupt:
		front = true
		if active != "" {
			res.Interrupted = active
		}
	}
	create, id, createHint, err := runCreatedEvent(in.RunInput, ss.st.Session.Provider, ss.st.Session.Model, front)
	if err != nil {
		return res, err
	}
	var evs []belay.Event
	for _, q := range res.Cancelled {
		reason := "replaced by " + id
		data, err := marshal(belay.RunUpdatedData{Phase: belay.PhaseCancelled, Reason: reason,
			Error: &belay.RunError{Class: belay.ClassCancelled, Message: reason}})
		if err != nil {
			return res, err
		}
		evs = append(evs, belay.Event{Type: belay.EventRunUpdated, Run: q, Data: data})
	}
	if a := res.Interrupted; a != "" {
		if r := ss.st.runs[a]; r != nil && r.CancelRequest == nil {
			data, err := marshal(belay.CancelRequestedData{Reason: "interrupted by run " + id, By: id})
			if err != nil {
				return res, err
			}
			evs = append(evs, belay.Event{Type: belay.EventRunCancelRequested, Run: a, Data: data})
		}
	}
	hints := make([]any, len(evs)+1, len(evs)+2)
	hints[len(evs)] = createHint
	evs = append(evs, create)
	leased := false
	if c := in.Claim; c != nil && active == "" && len(queued) == 0 {
		prov := in.Provider
		if prov == "" {
			prov = ss.st.Session.Provider
		}
		if leased = s.admitNow(id, ss.id, prov, c.Limits); leased {
			lease, hint, err := leaseEvent(id, 1, belay.RunLeasedData{Owner: c.Owner, ExpiresAt: s.clock.Now().Add(c.TTL)})
			if err != nil {
				s.unadmit(id)
				return res, err
			}
			hints = append(hints, hint)
			evs = append(evs, lease)
		}
	}
	if _, err := ss.commitAll(ctx, hints, evs...); err != nil {
		if leased {
			s.unadmit(id)
		}
		return store.SubmitResult{}, err
	}
	r := ss.st.runs[id]
	res.Run, res.Created = copyRun(r), true
	if leased {
		sess := ss.st.Session // the runner reads its options and ref
		sess.State = belay.SessionActive
		res.Claimed = &store.Claimed{Run: copyRun(r), Input: in.Input, Session: &sess} // its own copy: the runner's
	}
	return res, nil
}

// admitNow makes a new run active in the scheduler when a claim now
// would lease it first (scheduler.admit) and no run may be waiting to be
// rescued, so that Submit can lease it in the write that creates it.
func (s *Store) admitNow(id, session, provider string, l store.Limits) bool {
	now := s.clock.Now()
	s.claims.mu.Lock()
	defer s.claims.mu.Unlock()
	if s.claims.rescueNow || !s.claims.rescueAt.IsZero() && !now.Before(s.claims.rescueAt) {
		return false // a claim looks for runs to rescue first
	}
	s.claims.sched.setLimits(l)
	return s.claims.sched.admit(id, session, provider)
}

// unadmit gives back what admitNow took when the write failed.
func (s *Store) unadmit(id string) {
	s.claims.mu.Lock()
	s.claims.sched.finish(id)
	s.claims.mu.Unlock()
}

// leaseEvent is run.leased granting p's lease at epoch, with its payload
// hint: every lease a claim, a submit or a direct acquire grants.
func leaseEvent(run string, epoch uint64, p belay.RunLeasedData) (belay.Event, any, error) {
	p.ExpiresAt = p.ExpiresAt.UTC()
	data, hint, err := encodeChange(&p)
	if err != nil {
		return belay.Event{}, nil, err
	}
	return belay.Event{Type: belay.EventRunLeased, Run: run, Epoch: epoch, Data: data}, hint, nil
}

// defaultClaimMax bounds one claim when the caller names no maximum.
const defaultClaimMax = 64

// ClaimRuns leases runnable runs to an owner (see store.Store).
func (s *Store) ClaimRuns(ctx context.Context, c store.Claim) ([]store.Claimed, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	if err := s.writable(); err != nil {
		return nil, err
	}
	max := c.Max
	if max <= 0 {
		max = defaultClaimMax
	}
	var out []store.Claimed
	var firstErr error
	for _, id := range s.rescuable() {
		if len(out) >= max {
			// The rest are the next claim's: the look is not over.
			s.claims.rearm()
			break
		}
		run, ok, err := s.rescue(ctx, id, c.Owner, c.TTL)
		switch {
		case err != nil:
			if !errors.Is(err, belay.ErrReadOnly) {
				// Looked at again by the next claim (a quarantined session,
				// or a store that lost its lock, stays as it is).
				s.claims.rearm()
			}
			if firstErr == nil {
				firstErr = err
			}
		case ok:
			out = append(out, store.Claimed{Run: run, Rescued: true})
		}
	}
	if len(out) >= max {
		return out, nil
	}
	s.claims.mu.Lock()
	s.claims.sched.setLimits(c.Limits)
	picked := s.claims.sched.promote(max - len(out))
	s.claims.mu.Unlock()
	// The picked runs are in different sessions: their lease writes go
	// to different journals and are synced side by side, not one after
	// another.
	type lease struct {
		c   store.Claimed
		ok  bool
		err error
	}
	leases := make([]lease, len(picked))
	var wg sync.WaitGroup
	for i, id := range picked {
		wg.Go(func() {
			claimed, ok, err := s.leaseQueued(ctx, id, c.Owner, c.TTL)
			leases[i] = lease{claimed, ok, err}
		})
	}
	wg.Wait()
	out = slices.Grow(out, len(leases))
	var back []string
	for i, l := range leases {
		switch {
		case l.err != nil:
			back = append(back, picked[i])
			if firstErr == nil {
				firstErr = l.err
			}
		case l.ok:
			out = append(out, l.c)
		}
	}
	if len(back) > 0 {
		s.claims.mu.Lock()
		for _, id := range back {
			s.claims.sched.unstart(id)
		}
		s.claims.mu.Unlock()
	}
	if len(out) == 0 && firstErr != nil {
		// Nothing could be leased: say why. (Runs leased alongside a
		// failure are returned; the failed ones are tried again later.)
		return nil, firstErr
	}
	return out, nil
}

// rescuable lists runs that may need rescue now, when a lease or owner
// could have expired since the last look; it is cheap otherwise.
func (s *Store) rescuable() []string {
	now := s.clock.Now()
	s.claims.mu.Lock()
	defer s.claims.mu.Unlock()
	if !s.claims.rescueNow && (s.claims.rescueAt.IsZero() || now.Before(s.claims.rescueAt)) {
		return nil
	}
	s.claims.rescueNow, s.claims.rescueAt = false, time.Time{}
	ids := s.claims.sched.activeIDs()
	// The owners' expiries bound the next look, whatever the runs say.
	for _, o := range s.claims.owners {
		if now.Before(o.ExpiresAt) && (s.claims.rescueAt.IsZero() || o.ExpiresAt.Before(s.claims.rescueAt)) {
			s.claims.rescueAt = o.ExpiresAt
		}
	}
	return ids
}

// rescue takes over a running run whose owner is gone or whose lease
// expired, unless it is the claimer's own. It reports whether it did.
func (s *Store) rescue(ctx context.Context, id, owner string, ttl time.Duration) (belay.Run, bool, error) {
	ss, r, err := s.runSession(id)
	if err != nil {
		return belay.Run{}, false, nil // gone since the look: nothing to rescue
	}
	defer ss.mu.Unlock()
	if r.Status.Terminal() || r.Status == belay.RunQueued && r.Lease == nil {
		return belay.Run{}, false, nil
	}
	now := s.clock.Now()
	if l := r.Lease; l != nil {
		if l.Owner == owner {
			// The claimer's own: its runner (or retry) has it. Another
			// owner's claim may rescue it once it expires: look then.
			// (Expired already, it is for another owner's claim, if there
			// is one, to rescue; this owner's own claims would only look
			// again and again.)
			s.claims.mu.Lock()
			others := len(s.claims.owners) > 1
			s.claims.mu.Unlock()
			if now.Before(l.ExpiresAt) || others {
				s.claims.noteExpiry(l.ExpiresAt)
			}
			return belay.Run{}, false, nil
		}
		s.claims.mu.Lock()
		live := s.claims.ownerLive(l.Owner, now)
		s.claims.mu.Unlock()
		if live && !l.Expired(now) {
			s.claims.noteExpiry(l.ExpiresAt)
			return belay.Run{}, false, nil
		}
	}
	if err := ss.writable(); err != nil {
		return belay.Run{}, false, err
	}
	lease, hint, err := leaseEvent(id, r.Epoch+1, belay.RunLeasedData{Owner: owner, ExpiresAt: now.Add(ttl), Takeover: r.Epoch})
	if err != nil {
		return belay.Run{}, false, err
	}
	if _, err := ss.commitHinted(ctx, hint, lease); err != nil {
		return belay.Run{}, false, err
	}
	return copyRun(r), true, nil
}

// leaseQueued leases a run the scheduler promoted. It reports false when
// the run is no longer queued (cancelled, or leased directly meanwhile).
func (s *Store) leaseQueued(ctx context.Context, id, owner string, ttl time.Duration) (store.Claimed, bool, error) {
	ss, r, err := s.runSession(id)
	if err != nil {
		return store.Claimed{}, false, err
	}
	defer ss.mu.Unlock()
	if r.Status != belay.RunQueued || r.Lease != nil {
		return store.Claimed{}, false, nil
	}
	if err := ss.writable(); err != nil {
		return store.Claimed{}, false, err
	}
	lease, hint, err := leaseEvent(id, r.Epoch+1, belay.RunLeasedData{Owner: owner, ExpiresAt: s.clock.Now().Add(ttl)})
	if err != nil {
		return store.Claimed{}, false, err
	}
	input := ss.st.inputs[id] // (the lease's fold drops it)
	if _, err := ss.commitHinted(ctx, hint, lease); err != nil {
		return store.Claimed{}, false, err
	}
	return store.Claimed{Run: copyRun(r), Input: input}, true, nil
}

// HeartbeatOwner records that owner is alive for ttl more.
func (s *Store) HeartbeatOwner(_ context.Context, owner string, ttl time.Duration) error {
	if owner == "" || ttl <= 0 {
		return fmt.Errorf("%w: an owner heartbeat needs an owner and a positive ttl", belay.ErrInvalid)
	}
	if err := s.writable(); err != nil {
		return err
	}
	now := s.clock.Now()
	s.claims.mu.Lock()
	defer s.claims.mu.Unlock()
	o := s.claims.owners[owner]
	if o == nil {
		o = &store.Owner{ID: owner, Since: now}
		s.claims.owners[owner] = o
	}
	o.Heartbeat, o.ExpiresAt = now, now.Add(ttl)
	if s.claims.rescueAt.IsZero() || o.ExpiresAt.Before(s.claims.rescueAt) {
		s.claims.rescueAt = o.ExpiresAt
	}
	return nil
}

// RetireOwner ends owner's record; its runs may be rescued at once.
func (s *Store) RetireOwner(_ context.Context, owner string) error {
	s.claims.mu.Lock()
	defer s.claims.mu.Unlock()
	delete(s.claims.owners, owner)
	s.claims.rescueNow = true
	return nil
}

// Owners lists the owner records of this process.
func (s *Store) Owners(context.Context) ([]store.Owner, error) {
	now := s.clock.Now()
	s.claims.mu.Lock()
	defer s.claims.mu.Unlock()
	out := make([]store.Owner, 0, len(s.claims.owners))
	for _, o := range s.claims.owners {
		c := *o
		c.Live = now.Before(o.ExpiresAt)
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b store.Owner) int { return a.Since.Compare(b.Since) })
	return out, nil
}

// RequestCancel cancels a queued run, or asks the owner of a running one
// to (see store.Store).
func (s *Store) RequestCancel(ctx context.Context, id, reason string) (belay.Run, error) {
	if reason == "" {
		reason = "cancelled by request"
	}
	ss, r, err := s.runSession(id)
	if err != nil {
		return belay.Run{}, err
	}
	defer ss.mu.Unlock()
	switch {
	case r.Status.Terminal():
		return copyRun(r), fmt.Errorf("%w: run %s is %s", belay.ErrTerminal, id, r.Status)
	case r.CancelRequest != nil:
		return copyRun(r), nil
	}
	if err := ss.writable(); err != nil {
		return belay.Run{}, err
	}
	if r.Status == belay.RunQueued && r.Lease == nil {
		return s.updateRunLocked(ctx, ss, r, 0, belay.RunUpdate{
			Phase: belay.PhaseCancelled, Reason: reason,
			Error: &belay.RunError{Class: belay.ClassCancelled, Message: reason},
		})
	}
	data, err := marshal(belay.CancelRequestedData{Reason: reason})
	if err != nil {
		return belay.Run{}, err
	}
	if _, err := ss.commit(ctx, belay.Event{Type: belay.EventRunCancelRequested, Run: id, Data: data}); err != nil {
		return belay.Run{}, err
	}
	return copyRun(r), nil
}

// Counts returns how many runs are queued and running.
func (s *Store) Counts(context.Context) (store.Counts, error) {
	s.claims.mu.Lock()
	defer s.claims.mu.Unlock()
	return store.Counts{Queued: s.claims.sched.queuedCount(), Running: s.claims.sched.activeCount()}, nil
}

// feed is the change feed: a ring of the latest changes, in commit order.
type feed struct {
	mu      sync.Mutex
	ring    []store.Change
	head    uint64 // cursor of the last change
	changed chan struct{}
}

// feedSize is how many changes the feed keeps: a follower further behind
// rereads the state (store.ErrCursorExpired).
const feedSize = 1 << 16

func (f *feed) init() {
	f.ring = make([]store.Change, feedSize)
	f.changed = make(chan struct{})
}

func (f *feed) push(changes []store.Change) {
	if len(changes) == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range changes {
		f.head++
		c.Cursor = f.head
		f.ring[f.head%feedSize] = c
	}
	close(f.changed)
	f.changed = make(chan struct{})
}

// Changes returns the changes after a cursor.
func (s *Store) Changes(ctx context.Context, after uint64, max int) ([]store.Change, uint64, error) {
	if err := ctx.Err(); err != nil {
		return nil, after, context.Cause(ctx)
	}
	f := &s.feed
	f.mu.Lock()
	defer f.mu.Unlock()
	if after > f.head {
		return nil, after, fmt.Errorf("%w: cursor %d is ahead of the feed (%d): the store was reopened", store.ErrCursorExpired, after, f.head)
	}
	if f.head-after > feedSize {
		return nil, after, fmt.Errorf("%w: cursor %d is more than %d changes behind", store.ErrCursorExpired, after, feedSize)
	}
	n := int(f.head - after)
	if max > 0 && n > max {
		n = max
	}
	out := make([]store.Change, n)
	for i := range out {
		out[i] = f.ring[(after+uint64(i)+1)%feedSize]
	}
	return out, after + uint64(n), nil
}

// ChangeHead is the cursor of the last change.
func (s *Store) ChangeHead(context.Context) (uint64, error) {
	s.feed.mu.Lock()
	defer s.feed.mu.Unlock()
	return s.feed.head, nil
}

// WaitChanges blocks until a change after cursor after, or ctx is done.
func (s *Store) WaitChanges(ctx context.Context, after uint64) error {
	for {
		s.feed.mu.Lock()
		head, ch := s.feed.head, s.feed.changed
		s.feed.mu.Unlock()
		if head != after {
			return nil
		}
		s.mu.RLock()
		closed := s.closed
		s.mu.RUnlock()
		if closed {
			return belay.ErrStoreClosed
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-s.closing:
			return belay.ErrStoreClosed
		}
	}
}

// batchLanes is how many sessions of a SubmitBatch are written at once.
const batchLanes = 16

// SubmitBatch makes many submissions (see store.Store). Each session's
// journal takes its submissions in order, one durable append each (its
// group commit joins those that wait together); up to batchLanes sessions
// are written at once.
func (s *Store) SubmitBatch(ctx context.Context, ins []store.SubmitInput) ([]store.SubmitResult, []error) {
	res, errs := make([]store.SubmitResult, len(ins)), make([]error, len(ins))
	lane := map[string]int{}
	var lanes [][]int
	for i, in := range ins {
		l, ok := lane[in.Session]
		if !ok {
			l = len(lanes)
			lane[in.Session] = l
			lanes = append(lanes, nil)
		}
		lanes[l] = append(lanes[l], i)
	}
	work := make(chan []int)
	var wg sync.WaitGroup
	for range min(batchLanes, len(lanes)) {
		wg.Go(func() {
			for lane := range work {
				for _, i := range lane {
					res[i], errs[i] = s.Submit(ctx, ins[i])
				}
			}
		})
	}
	for _, lane := range lanes {
		work <- lane
	}
	close(work)
	wg.Wait()
	return res, errs
}
