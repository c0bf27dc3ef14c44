package fsstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/ids"
)

// runSession finds the session holding a run, locked. The caller unlocks.
func (s *Store) runSession(id string) (*session, *belay.Run, error) {
	if err := ids.Check(ids.Run, id); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", belay.ErrInvalid, err)
	}
	s.idxMu.RLock()
	sid, ok := s.runs[id]
	s.idxMu.RUnlock()
	if !ok {
		return nil, nil, fmt.Errorf("%w: run %s", belay.ErrNotFound, id)
	}
	ss, err := s.session(sid)
	if err != nil {
		return nil, nil, err
	}
	ss.mu.Lock()
	r, ok, err := ss.st.get(id)
	if err != nil || !ok {
		ss.mu.Unlock()
		if err == nil {
			err = fmt.Errorf("%w: run %s", belay.ErrNotFound, id)
		}
		return nil, nil, err
	}
	return ss, r, nil
}

// CreateRun creates a queued run, idempotently by key within the session.
func (s *Store) CreateRun(ctx context.Context, in belay.RunInput) (belay.Run, bool, error) {
	if err := checkJSON("run input", in.Input); err != nil {
		return belay.Run{}, false, err
	}
	if err := belay.CheckTags(in.Tags, in.Meta); err != nil {
		return belay.Run{}, false, err
	}
	if err := belay.CheckPriority(in.Priority); err != nil {
		return belay.Run{}, false, err
	}
	ss, err := s.session(in.Session)
	if err != nil {
		return belay.Run{}, false, err
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if in.IdempotencyKey != "" {
		if id, ok := ss.st.RunKeys[in.IdempotencyKey]; ok {
			r, err := ss.st.keyed(id)
			if err != nil {
				return belay.Run{}, false, err
			}
			return copyRun(r), false, nil
		}
	}
	if err := ss.writable(); err != nil {
		return belay.Run{}, false, err
	}
	e, id, hint, err := runCreatedEvent(in, ss.st.Session.Provider, ss.st.Session.Model, false)
	if err != nil {
		return belay.Run{}, false, err
	}
	if _, err := ss.commitHinted(ctx, hint, e); err != nil {
		return belay.Run{}, false, err
	}
	return copyRun(ss.st.runs[id]), true, nil
}

// runCreatedEvent is the run.created event of a new run in a session whose
// provider and model are sessProvider and sessModel; it returns the new
// run's id and the event's payload hint (createdHint). A front run goes
// ahead of the session's queued runs.
func runCreatedEvent(in belay.RunInput, sessProvider, sessModel string, front bool) (belay.Event, string, any, error) {
	input, err := asWritten(in.Input)
	if err != nil {
		return belay.Event{}, "", nil, err
	}
	p := belay.RunCreatedData{
		ID: ids.New(ids.Run), Key: in.IdempotencyKey, Priority: in.Priority,
		Provider: in.Provider, Model: in.Model, Deadline: in.Deadline.UTC(), Input: input,
		Tags: in.Tags, Meta: in.Meta, Front: front,
	}
	if p.Provider == "" {
		p.Provider, p.Model = sessProvider, sessModel
	}
	if p.Deadline.IsZero() {
		p.Deadline = time.Time{}
	}
	data, err := marshal(p)
	if err != nil {
		return belay.Event{}, "", nil, err
	}
	e := belay.Event{Type: belay.EventRunCreated, Run: p.ID, Data: data}
	if in.IdempotencyKey != "" {
		e.ID = storeIDPrefix + "run/" + in.IdempotencyKey
	}
	return e, p.ID, createdHint(&p), nil
}

// Run returns one run.
func (s *Store) Run(_ context.Context, id string) (belay.Run, error) {
	ss, r, err := s.runSession(id)
	if err != nil {
		return belay.Run{}, err
	}
	defer ss.mu.Unlock()
	return copyRun(r), nil
}

// RunInput returns the input journaled in the run's run.created event.
func (s *Store) RunInput(ctx context.Context, id string) (json.RawMessage, error) {
	ss, r, err := s.runSession(id)
	if err != nil {
		return nil, err
	}
	seq := r.InputSeq
	ss.mu.Unlock()
	j, err := ss.acquire()
	if err != nil {
		return nil, ss.wrap(err)
	}
	defer ss.release(j)
	evs, err := j.Read(seq-1, 1)
	if err != nil || len(evs) != 1 || evs[0].Type != belay.EventRunCreated {
		return nil, fmt.Errorf("%w: run %s: input at seq %d unreadable: %v", belay.ErrCorruptRecord, id, seq, ss.wrap(err))
	}
	var p belay.RunCreatedData
	if err := decode(&evs[0], &p); err != nil {
		return nil, err
	}
	return p.Input, nil
}

// Runs lists runs in creation order (by session, newest session first,
// when no session is named).
func (s *Store) Runs(_ context.Context, f belay.RunFilter) ([]belay.Run, error) {
	var sessions []*session
	if f.Session != "" {
		ss, err := s.session(f.Session)
		if err != nil {
			return nil, err
		}
		sessions = []*session{ss}
	} else {
		all, err := s.allSessions()
		if err != nil {
			return nil, err
		}
		sessions = all
	}
	var out []belay.Run
	for _, ss := range sessions {
		ss.mu.Lock()
		err := ss.st.eachMatch(f, func(r *belay.Run) bool {
			out = append(out, copyRun(r))
			return true
		})
		ss.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// AcquireRunLease grants a lease on a run and increments its epoch.
func (s *Store) AcquireRunLease(ctx context.Context, id, owner string, ttl time.Duration, takeover uint64) (belay.Run, error) {
	if owner == "" || ttl <= 0 {
		return belay.Run{}, fmt.Errorf("%w: a lease needs an owner and a positive ttl", belay.ErrInvalid)
	}
	ss, r, err := s.runSession(id)
	if err != nil {
		return belay.Run{}, err
	}
	defer ss.mu.Unlock()
	if err := ss.writable(); err != nil {
		return belay.Run{}, err
	}
	if r.Status.Terminal() {
		return belay.Run{}, fmt.Errorf("%w: run %s is %s", belay.ErrTerminal, id, r.Status)
	}
	now := s.clock.Now()
	if r.Lease != nil && !r.Lease.Expired(now) && takeover != r.Epoch {
		return belay.Run{}, fmt.Errorf("%w: run %s is leased by %s at epoch %d until %s",
			belay.ErrLeaseHeld, id, r.Lease.Owner, r.Epoch, r.Lease.ExpiresAt.Format(time.RFC3339))
	}
	lease, hint, err := leaseEvent(id, r.Epoch+1, belay.RunLeasedData{Owner: owner, ExpiresAt: now.Add(ttl), Takeover: takeover})
	if err != nil {
		return belay.Run{}, err
	}
	if _, err := ss.commitHinted(ctx, hint, lease); err != nil {
		return belay.Run{}, err
	}
	return copyRun(r), nil
}

// leased checks that epoch names the current lease of r. ss.mu is held.
func leased(r *belay.Run, epoch uint64) error {
	if r.Status.Terminal() {
		return fmt.Errorf("%w: run %s is %s", belay.ErrTerminal, r.ID, r.Status)
	}
	if epoch != r.Epoch {
		return &belay.StaleEpochError{Kind: "run", ID: r.ID, Got: epoch, Current: r.Epoch}
	}
	if r.Lease == nil {
		return fmt.Errorf("%w: run %s has no lease at epoch %d", belay.ErrNotLeased, r.ID, epoch)
	}
	return nil
}

// leasedRun calls fn for a run held under the lease of epoch, with its
// session locked and writable.
func (s *Store) leasedRun(id string, epoch uint64, fn func(ss *session, r *belay.Run) (belay.Run, error)) (belay.Run, error) {
	ss, r, err := s.runSession(id)
	if err != nil {
		return belay.Run{}, err
	}
	defer ss.mu.Unlock()
	if err := ss.writable(); err != nil {
		return belay.Run{}, err
	}
	if err := leased(r, epoch); err != nil {
		return belay.Run{}, err
	}
	return fn(ss, r)
}

// RenewRunLease extends the lease of the given epoch.
func (s *Store) RenewRunLease(ctx context.Context, id string, epoch uint64, ttl time.Duration, act *belay.RunActivity) (belay.Run, error) {
	if ttl <= 0 {
		return belay.Run{}, fmt.Errorf("%w: ttl must be positive", belay.ErrInvalid)
	}
	return s.leasedRun(id, epoch, func(ss *session, r *belay.Run) (belay.Run, error) {
		p := belay.RunRenewedData{ExpiresAt: s.clock.Now().Add(ttl).UTC()}
		if act != nil {
			a := *act
			a.LastProgress = a.LastProgress.UTC()
			p.Activity = &a
		}
		data, err := marshal(p)
		if err != nil {
			return belay.Run{}, err
		}
		if _, err := ss.commit(ctx, belay.Event{Type: belay.EventRunRenewed, Run: id, Epoch: epoch, Data: data}); err != nil {
			return belay.Run{}, err
		}
		return copyRun(r), nil
	})
}

// ReleaseRunLease drops the lease of the given epoch; the run stays as it is.
func (s *Store) ReleaseRunLease(ctx context.Context, id string, epoch uint64) (belay.Run, error) {
	return s.leasedRun(id, epoch, func(ss *session, r *belay.Run) (belay.Run, error) {
		if _, err := ss.commit(ctx, belay.Event{Type: belay.EventRunReleased, Run: id, Epoch: epoch, Data: []byte(`{}`)}); err != nil {
			return belay.Run{}, err
		}
		return copyRun(r), nil
	})
}

// UpdateRun changes a run under its lease.
func (s *Store) UpdateRun(ctx context.Context, id string, epoch uint64, u belay.RunUpdate) (belay.Run, error) {
	if u.Phase != "" && (u.Phase.Status() == "" || u.Phase == belay.PhaseQueued) {
		return belay.Run{}, fmt.Errorf("%w: phase %q", belay.ErrInvalid, u.Phase)
	}
	if u.Error != nil && u.Error.Class == "" {
		return belay.Run{}, fmt.Errorf("%w: a run error needs a class", belay.ErrInvalid)
	}
	if err := u.CheckBuffered(); err != nil {
		return belay.Run{}, err
	}
	if d := u.Deliver; d != nil {
		if err := checkDeliveryInput(*d); err != nil {
			return belay.Run{}, err
		}
	}
	return s.leasedRun(id, epoch, func(ss *session, r *belay.Run) (belay.Run, error) {
		return s.updateRunLocked(ctx, ss, r, epoch, u)
	})
}

func (s *Store) updateRunLocked(ctx context.Context, ss *session, r *belay.Run, epoch uint64, u belay.RunUpdate) (belay.Run, error) {
	data, hint, err := encodeChange(&belay.RunUpdatedData{Phase: u.Phase, Attempt: u.Attempt, Error: u.Error, Reason: u.Reason, Ref: u.Ref, Data: u.Data})
	if err != nil {
		return belay.Run{}, err
	}
	evs := []belay.Event{{Type: belay.EventRunUpdated, Run: r.ID, Epoch: epoch, Data: data}}
	hints := []any{hint}
	if u.Buffered && r.Status == belay.RunRunning {
		// A phase change a crash may take back: it rides on the next
		// synced write (docs/journal-format.md, "What a crash may take
		// back"). It is folded, and seen by readers, once durable; the
		// caller gets the run as it will be then.
		if err := ss.commitBuffered(ctx, hints, evs...); err != nil {
			return belay.Run{}, err
		}
		out := copyRun(r)
		out.Phase = u.Phase
		return out, nil
	}
	var posted string
	if d := u.Deliver; d != nil {
		if d.Session != "" && d.Session != ss.id {
			return belay.Run{}, fmt.Errorf("%w: a run's delivery goes to its own session", belay.ErrInvalid)
		}
		ev, id, dh, err := s.postEvent(ss, *d)
		if err != nil {
			return belay.Run{}, err
		}
		if id != "" {
			evs, hints, posted = append(evs, ev), append(hints, dh), id
		}
	}
	if _, err := ss.commitAll(ctx, hints, evs...); err != nil {
		return belay.Run{}, err
	}
	if posted != "" {
		s.notify.posted(ss.st.deliveries[posted])
	}
	return copyRun(r), nil
}

// CancelQueuedRun ends a run that was never leased as cancelled.
func (s *Store) CancelQueuedRun(ctx context.Context, id, reason string) (belay.Run, error) {
	ss, r, err := s.runSession(id)
	if err != nil {
		return belay.Run{}, err
	}
	defer ss.mu.Unlock()
	if err := ss.writable(); err != nil {
		return belay.Run{}, err
	}
	if r.Status != belay.RunQueued || r.Lease != nil {
		return belay.Run{}, fmt.Errorf("%w: run %s is %s, not queued", belay.ErrActive, id, r.Status)
	}
	if reason == "" {
		reason = "cancelled while queued"
	}
	return s.updateRunLocked(ctx, ss, r, 0, belay.RunUpdate{
		Phase: belay.PhaseCancelled, Reason: reason,
		Error: &belay.RunError{Class: belay.ClassCancelled, Message: reason},
	})
}
