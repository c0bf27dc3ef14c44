package fsstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"
	"unicode/utf8"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/store"
)

// state is a session folded from its journal. It is what snapshot.json
// holds as the snapshot's state.
type state struct {
	Version int           `json:"version"`
	Session belay.Session `json:"session"`
	// Runs holds the runs not finished, in creation order, and done the
	// finished ones (but those done cannot keep, see errNotKept, which
	// stay in Runs). A snapshot lists all as "runs", in creation order.
	Runs         []*belay.Run      `json:"runs"`
	Deliveries   []*belay.Delivery `json:"deliveries"`
	RunKeys      map[string]string `json:"runKeys"`
	DeliveryKeys map[string]string `json:"deliveryKeys"`
	SessionKey   string            `json:"sessionKey,omitempty"`
	// Expired holds, per delivery returned to the inbox by a lease
	// expiry, the epoch of that lease, so that a late ack from it is told
	// lease_expired, not merely "not leased" (G7).
	Expired map[string]uint64 `json:"expired,omitempty"`
	// Front holds the queued runs submitted with policy interrupt: they
	// run next in the session, ahead of earlier queued runs.
	Front map[string]bool `json:"front,omitempty"`
	// Notifications holds the notifications of the session's deliveries,
	// by notifyKey (notify.go).
	Notifications map[string]*store.Notification `json:"notifications,omitempty"`

	runs       map[string]*belay.Run // Runs by id
	done       doneRuns
	deliveries map[string]*belay.Delivery
	// inputs holds the inputs of queued runs, small ones only and a bounded
	// number, as their run.created events carried them: a claim hands them
	// to the runner instead of its reading them back from the journal.
	// Not in snapshots; a run whose input is not here is read as before.
	inputs map[string]json.RawMessage
}

// Bounds of state.inputs.
const (
	maxCachedInput  = 4 << 10
	maxCachedInputs = 64
)

// stateVersion 2 folds notifications: a snapshot of version 1 is not
// trusted, so the journal is replayed once with them.
const stateVersion = 2

func newState() *state {
	return &state{
		Version:      stateVersion,
		RunKeys:      map[string]string{},
		DeliveryKeys: map[string]string{},
		runs:         map[string]*belay.Run{},
		deliveries:   map[string]*belay.Delivery{},
	}
}

// plainState is state without its JSON methods.
type plainState state

// MarshalJSON writes the state with its finished runs among the others,
// in creation order, as the JSON they are kept as.
func (st *state) MarshalJSON() ([]byte, error) {
	runs := []byte{'['}
	sep := func() {
		if len(runs) > 1 {
			runs = append(runs, ',')
		}
	}
	err := st.inOrder(func(r *belay.Run) (bool, error) {
		b, err := json.Marshal(r)
		sep()
		runs = append(runs, b...)
		return true, err
	}, func(i int) (bool, error) {
		sep()
		runs = append(runs, st.done.raw(i)...)
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	runs = append(runs, ']')
	// The other fields, then "runs" spliced in as the last: run through
	// json.Marshal as a RawMessage, the runs (most of a snapshot) would be
	// scanned again to compact them. Runs below hides the field of the
	// same name in plainState; the object always has "version", so it
	// ends in "}" after at least one field.
	head, err := json.Marshal(struct {
		*plainState
		Runs *struct{} `json:"runs,omitempty"`
	}{plainState: (*plainState)(st)})
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(head)+len(`,"runs":`)+len(runs))
	out = append(out, head[:len(head)-1]...)
	out = append(out, `,"runs":`...)
	out = append(out, runs...)
	return append(out, '}'), nil
}

func decodeState(raw []byte) (*state, error) {
	st := newState()
	aux := struct {
		*plainState
		Runs []json.RawMessage `json:"runs"`
	}{plainState: (*plainState)(st)}
	if err := json.Unmarshal(raw, &aux); err != nil {
		return nil, err
	}
	for _, b := range aux.Runs {
		r := new(belay.Run)
		if err := json.Unmarshal(b, r); err != nil {
			return nil, err
		}
		if st.runs[r.ID] != nil {
			return nil, fmt.Errorf("two runs have id %q", r.ID)
		}
		if r.Status.Terminal() {
			err := st.done.add(r, b)
			if err == nil {
				continue
			}
			if !errors.Is(err, errNotKept) {
				return nil, err
			}
		}
		if st.done.has(r.ID) {
			return nil, fmt.Errorf("two runs have id %q", r.ID)
		}
		st.Runs = append(st.Runs, r)
		st.runs[r.ID] = r
	}
	if st.Version != stateVersion {
		return nil, fmt.Errorf("state version %d is not %d", st.Version, stateVersion)
	}
	if st.RunKeys == nil {
		st.RunKeys = map[string]string{}
	}
	if st.DeliveryKeys == nil {
		st.DeliveryKeys = map[string]string{}
	}
	for _, d := range st.Deliveries {
		st.deliveries[d.ID] = d
	}
	return st, nil
}

// apply folds one synced event into the state. Preconditions were checked
// before the event was appended; apply only replays. It fails only for an
// event that cannot be decoded or does not fit the state, which means the
// journal was written by something else.
func (st *state) apply(e *belay.Event) error { return st.applyWith(e, nil) }

// applyWith is apply given the payload the store encoded e's data from,
// when a decode of the data gives exactly that payload back (see
// payloadHint): the fold then skips the decode. With nil, or a payload of
// another type, it decodes. A field of a run.leased or run.updated payload
// that the fold starts to read must be checked by payloadHint too.
func (st *state) applyWith(e *belay.Event, hint any) error {
	if !belay.StoreEventType(e.Type) {
		// Caller events do not change the state; keeping them out makes the
		// fold through any seq before the next state change the same.
		return nil
	}
	if st.Session.ID == "" && e.Type != belay.EventSessionCreated {
		return corrupt(e, "comes before session.created")
	}
	switch e.Type {
	case belay.EventSessionCreated:
		var p belay.SessionCreatedData
		if err := decode(e, &p); err != nil {
			return err
		}
		if st.Session.ID != "" || p.ID == "" {
			return corrupt(e, "a second session.created, or one without an id")
		}
		st.Session = belay.Session{
			ID: p.ID, Provider: p.Provider, Model: p.Model, Labels: p.Labels, Options: p.Options,
			CreatedAt: e.TS, UpdatedAt: e.TS, LastSeq: e.Seq,
		}
		st.SessionKey = p.Key
	case belay.EventRunCreated:
		p, err := payload[belay.RunCreatedData](e, hint)
		if err != nil {
			return err
		}
		if p.ID == "" || st.runs[p.ID] != nil || st.done.has(p.ID) {
			return corrupt(e, fmt.Sprintf("run id %q is empty or taken", p.ID))
		}
		r := &belay.Run{
			ID: p.ID, Session: st.Session.ID, IdempotencyKey: p.Key, Status: belay.RunQueued,
			Phase: belay.PhaseQueued, Priority: p.Priority, Provider: p.Provider, Model: p.Model,
			Deadline: p.Deadline, InputSeq: e.Seq, CreatedAt: e.TS, UpdatedAt: e.TS,
			Tags: p.Tags, Meta: p.Meta,
		}
		st.Runs = append(st.Runs, r)
		st.runs[r.ID] = r
		if p.Key != "" {
			st.RunKeys[p.Key] = r.ID
		}
		if len(p.Input) <= maxCachedInput && len(st.inputs) < maxCachedInputs {
			if st.inputs == nil {
				st.inputs = map[string]json.RawMessage{}
			}
			st.inputs[r.ID] = p.Input
		}
		if p.Front {
			if st.Front == nil {
				st.Front = map[string]bool{}
			}
			st.Front[r.ID] = true
		}
	case belay.EventRunCancelRequested:
		r, err := st.run(e)
		if err != nil {
			return err
		}
		var p belay.CancelRequestedData
		if err := decode(e, &p); err != nil {
			return err
		}
		if r.Status.Terminal() {
			return corrupt(e, fmt.Sprintf("run %s is already %s", r.ID, r.Status))
		}
		r.CancelRequest = &belay.CancelRequest{Reason: p.Reason, By: p.By, At: e.TS}
		r.UpdatedAt = e.TS
	case belay.EventRunLeased:
		r, err := st.run(e)
		if err != nil {
			return err
		}
		p, err := payload[belay.RunLeasedData](e, hint)
		if err != nil {
			return err
		}
		if e.Epoch <= r.Epoch {
			return corrupt(e, fmt.Sprintf("epoch %d does not follow epoch %d of run %s", e.Epoch, r.Epoch, r.ID))
		}
		r.Epoch = e.Epoch
		r.Lease = &belay.Lease{Owner: p.Owner, Epoch: e.Epoch, GrantedAt: e.TS, ExpiresAt: p.ExpiresAt}
		if r.Phase == belay.PhaseQueued {
			r.Phase, r.Status = belay.PhaseAdmitted, belay.RunRunning
			r.StartedAt = e.TS
			delete(st.Front, r.ID)
		}
		r.UpdatedAt = e.TS
	case belay.EventRunRenewed:
		r, err := st.run(e)
		if err != nil {
			return err
		}
		var p belay.RunRenewedData
		if err := decode(e, &p); err != nil {
			return err
		}
		if r.Lease != nil {
			r.Lease.ExpiresAt = p.ExpiresAt
		}
		if p.Activity != nil {
			r.Activity = p.Activity
		}
		r.UpdatedAt = e.TS
	case belay.EventRunReleased:
		r, err := st.run(e)
		if err != nil {
			return err
		}
		r.Lease = nil
		r.UpdatedAt = e.TS
	case belay.EventRunUpdated:
		r, err := st.run(e)
		if err != nil {
			return err
		}
		p, err := payload[belay.RunUpdatedData](e, hint)
		if err != nil {
			return err
		}
		if p.Phase != "" && (p.Phase.Status() == "" || p.Phase == belay.PhaseQueued) {
			return corrupt(e, fmt.Sprintf("run %s cannot move to phase %q", r.ID, p.Phase))
		}
		if p.Phase != "" {
			r.Phase, r.Status = p.Phase, p.Phase.Status()
		}
		if p.Attempt != 0 {
			r.Attempt = p.Attempt
		}
		if p.Error != nil {
			r.Error = p.Error
		}
		if p.Reason != "" {
			r.Reason = p.Reason
		}
		if p.Ref != nil {
			r.Ref = *p.Ref
			st.Session.Ref = *p.Ref
		}
		r.UpdatedAt = e.TS
		if r.Status.Terminal() {
			r.Lease = nil
			r.EndedAt = e.TS
			delete(st.Front, r.ID)
			st.finish(r)
		}
	case belay.EventDeliveryPosted:
		p, err := payload[belay.DeliveryPostedData](e, hint)
		if err != nil {
			return err
		}
		if p.ID == "" || st.deliveries[p.ID] != nil {
			return corrupt(e, fmt.Sprintf("delivery id %q is empty or taken", p.ID))
		}
		d := &belay.Delivery{
			ID: p.ID, Session: st.Session.ID, Type: p.Type, Key: p.Key, Priority: p.Priority,
			Data: p.Data, Status: belay.DeliveryPending, Seq: e.Seq, CreatedAt: e.TS,
			To: p.To, AfterRun: p.AfterRun,
		}
		st.Deliveries = append(st.Deliveries, d)
		st.deliveries[d.ID] = d
		if p.Key != "" {
			st.DeliveryKeys[deliveryKey(p.Type, p.Key)] = d.ID
		}
	case belay.EventDeliveryLeased:
		var p belay.DeliveryLeasedData
		if err := decode(e, &p); err != nil {
			return err
		}
		d, err := st.delivery(e, p.ID)
		if err != nil {
			return err
		}
		if e.Epoch <= d.Epoch {
			return corrupt(e, fmt.Sprintf("epoch %d does not follow epoch %d of delivery %s", e.Epoch, d.Epoch, d.ID))
		}
		d.Status, d.Epoch = belay.DeliveryLeased, e.Epoch
		delete(st.Expired, d.ID)
		d.Lease = &belay.Lease{Owner: p.Owner, Epoch: e.Epoch, GrantedAt: e.TS, ExpiresAt: p.ExpiresAt}
		d.Attempts++
		d.NotBefore = time.Time{}
	case belay.EventDeliverySettled:
		var p belay.DeliverySettledData
		if err := decode(e, &p); err != nil {
			return err
		}
		d, err := st.delivery(e, p.ID)
		if err != nil {
			return err
		}
		switch p.Kind {
		case belay.SettleDone:
			d.Status, d.SettledAt = belay.DeliveryDone, e.TS
		case belay.SettleError:
			d.Status, d.SettledAt = belay.DeliveryError, e.TS
		case belay.SettleRelease, belay.SettleRetry:
			d.Status, d.NotBefore = belay.DeliveryPending, p.NotBefore
		default:
			return corrupt(e, fmt.Sprintf("settlement kind %q", p.Kind))
		}
		d.Lease = nil
		d.Result = p.Result
	case belay.EventNotifyClaimed, belay.EventNotifySettled:
		changed, err := st.applyNotify(e)
		if err != nil || !changed {
			return err
		}
	case belay.EventDeliveryExpired:
		var p belay.DeliveryExpiredData
		if err := decode(e, &p); err != nil {
			return err
		}
		d, err := st.delivery(e, p.ID)
		if err != nil {
			return err
		}
		d.Status, d.Lease = belay.DeliveryPending, nil
		if st.Expired == nil {
			st.Expired = map[string]uint64{}
		}
		st.Expired[d.ID] = e.Epoch
	}
	// Only an event that folds changes the state.
	st.Session.LastSeq = e.Seq
	if e.TS.After(st.Session.UpdatedAt) {
		st.Session.UpdatedAt = e.TS
	}
	if e.Run != "" && len(st.inputs) > 0 {
		if r := st.runs[e.Run]; r == nil || r.Status != belay.RunQueued {
			delete(st.inputs, e.Run) // leased or ended: a claim no longer needs it
		}
	}
	return nil
}

// payload returns the event's payload: the hint when it is one
// (applyWith), which the fold may keep (hints are the store's own copies),
// else the payload decoded from the data. (A decode into a variable of
// the fold's would put every payload on the heap, hinted or not.)
func payload[T any](e *belay.Event, hint any) (*T, error) {
	if h, ok := hint.(*T); ok {
		return h, nil
	}
	p := new(T)
	return p, decode(e, p)
}

// encodeChange encodes a state change's payload and returns, with its
// data, its hint for the fold (payloadHint).
func encodeChange(p any) (json.RawMessage, any, error) {
	data, err := marshal(p)
	if err != nil {
		return nil, nil, err
	}
	return data, payloadHint(p), nil
}

// payloadHint returns the payload an event's data is encoded from (or a
// copy of it), for the fold to take instead of decoding the data
// (applyWith), or nil where a decode could give something else or the
// fold would keep what the caller still holds: a string that is not valid
// UTF-8 (encoding replaces it), a time not in UTC without a monotonic
// reading, a run error (a pointer the fold would keep). Only the payloads
// of the runs' hot path are given: run.leased and run.updated here,
// run.created and delivery.posted by createdHint and postedHint.
func payloadHint(p any) any {
	switch p := p.(type) {
	case *belay.RunLeasedData:
		if utf8.ValidString(p.Owner) && p.ExpiresAt == p.ExpiresAt.UTC() {
			return p
		}
	case *belay.RunUpdatedData:
		if p.Error != nil || !utf8.ValidString(string(p.Phase)) || !utf8.ValidString(p.Reason) {
			return nil
		}
		if r := p.Ref; r != nil && !(utf8.ValidString(r.Kind) && utf8.ValidString(r.ID) && utf8.ValidString(r.URL) &&
			utf8.ValidString(r.Target) && utf8.ValidString(r.Cursor)) {
			return nil
		}
		// A copy holding nothing of the caller's: a buffered update waits
		// in the pending list until it is durable. (The fold does not read
		// Data.)
		h := *p
		h.Data = nil
		if p.Ref != nil {
			ref := *p.Ref
			h.Ref = &ref
		}
		return &h
	}
	return nil
}

// asWritten returns raw as encoding/json writes it inside a payload
// (compact, with <, > and & escaped), which is what decoding the payload
// gives back: a hint holding it folds as the decode would. Nil for none.
func asWritten(raw json.RawMessage) (json.RawMessage, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	return marshal(raw)
}

// createdHint is the hint of a run.created payload the store built (its
// input as written, asWritten), or nil where a decode could give
// something else: a string that is not valid UTF-8. The tags and meta are
// copies (the fold keeps them; the caller may change its own), nil when
// empty (as a decode leaves what was left out).
func createdHint(p *belay.RunCreatedData) any {
	if !utf8.ValidString(p.ID) || !utf8.ValidString(p.Key) || !utf8.ValidString(p.Provider) || !utf8.ValidString(p.Model) ||
		p.Deadline != p.Deadline.UTC() {
		return nil
	}
	h := *p
	h.Tags, h.Meta = nil, nil
	for _, t := range p.Tags {
		if !utf8.ValidString(t) {
			return nil
		}
		h.Tags = append(h.Tags, t)
	}
	for k, v := range p.Meta {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return nil
		}
		if h.Meta == nil {
			h.Meta = make(map[string]string, len(p.Meta))
		}
		h.Meta[k] = v
	}
	return &h
}

// postedHint is the hint of a delivery.posted payload the store built
// (its data as written, asWritten), or nil where a decode could give
// something else.
func postedHint(p *belay.DeliveryPostedData) any {
	if !utf8.ValidString(p.ID) || !utf8.ValidString(p.Type) || !utf8.ValidString(p.Key) || !utf8.ValidString(p.To) || !utf8.ValidString(p.AfterRun) {
		return nil
	}
	h := *p
	return &h
}

func decode(e *belay.Event, v any) error {
	if err := json.Unmarshal(e.Data, v); err != nil {
		return fmt.Errorf("%w: seq %d (%s): %v", belay.ErrCorruptRecord, e.Seq, e.Type, err)
	}
	return nil
}

// corrupt is the error of an event that does not fit the state.
func corrupt(e *belay.Event, why string) error {
	return fmt.Errorf("%w: seq %d (%s): %s", belay.ErrCorruptRecord, e.Seq, e.Type, why)
}

// run returns the run an event changes; a finished run takes no changes.
func (st *state) run(e *belay.Event) (*belay.Run, error) {
	r, ok := st.runs[e.Run]
	if !ok {
		if i := st.done.find(e.Run); i >= 0 {
			return nil, corrupt(e, fmt.Sprintf("changes run %s, which is %s", e.Run, st.done.status(i)))
		}
		return nil, corrupt(e, fmt.Sprintf("names unknown run %q", e.Run))
	}
	if r.Status.Terminal() {
		return nil, corrupt(e, fmt.Sprintf("changes run %s, which is %s", r.ID, r.Status))
	}
	return r, nil
}

// finish moves a run that just finished from Runs to done, unless its
// JSON cannot be written: such a run stays in Runs, as all did once.
func (st *state) finish(r *belay.Run) {
	if st.done.add(r, nil) != nil {
		return
	}
	delete(st.runs, r.ID)
	st.Runs = slices.DeleteFunc(st.Runs, func(x *belay.Run) bool { return x == r })
}

// ended reports whether run id is finished.
func (st *state) ended(id string) bool {
	if r, ok := st.runs[id]; ok {
		return r.Status.Terminal()
	}
	return st.done.has(id)
}

// get returns run id, finished or not; a finished run is decoded afresh,
// so changing it changes nothing.
func (st *state) get(id string) (*belay.Run, bool, error) {
	if r, ok := st.runs[id]; ok {
		return r, true, nil
	}
	i := st.done.find(id)
	if i < 0 {
		return nil, false, nil
	}
	r, err := st.done.run(i)
	return r, err == nil, err
}

// keyed returns the run an idempotency key names.
func (st *state) keyed(id string) (*belay.Run, error) {
	r, ok, err := st.get(id)
	if err == nil && !ok {
		err = fmt.Errorf("%w: run key names unknown run %s", belay.ErrCorruptRecord, id)
	}
	return r, err
}

// hasRun reports whether the session has run id, finished or not.
func (st *state) hasRun(id string) bool {
	_, ok := st.runs[id]
	return ok || st.done.has(id)
}

// eachRun calls fn with every run in creation order, the finished ones
// decoded, until fn returns false.
func (st *state) eachRun(fn func(r *belay.Run) bool) error {
	return st.eachMatch(belay.RunFilter{}, fn)
}

// eachMatch calls fn with every run that matches f, in creation order,
// until fn returns false. A finished run is decoded only if its key
// matches f (see keyFilter).
func (st *state) eachMatch(f belay.RunFilter, fn func(r *belay.Run) bool) error {
	keyed, _ := keyFilter(f)
	var k belay.Run
	return st.inOrder(func(r *belay.Run) (bool, error) {
		return !f.Match(r) || fn(r), nil
	}, func(i int) (bool, error) {
		if st.done.keyInto(i, &k); !keyed.Match(&k) {
			return true, nil
		}
		r, err := st.done.run(i)
		if err != nil {
			return false, err
		}
		return !f.Match(r) || fn(r), nil
	})
}

// inOrder calls live with each run of Runs and done with the index of each
// finished run, all in creation order, until one says to stop or fails.
func (st *state) inOrder(live func(r *belay.Run) (bool, error), done func(i int) (bool, error)) error {
	runs, i := st.Runs, 0
	for len(runs) > 0 || i < st.done.len() {
		var more bool
		var err error
		if i == st.done.len() || len(runs) > 0 && runs[0].InputSeq < st.done.ents[i].seq {
			more, err = live(runs[0])
			runs = runs[1:]
		} else {
			more, err = done(i)
			i++
		}
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// keyFilter returns the part of f a finished run's key (doneRuns.key)
// answers, and whether f asks more (its provider or a tag).
func keyFilter(f belay.RunFilter) (keyed belay.RunFilter, whole bool) {
	keyed = f
	keyed.Provider, keyed.Tag = "", ""
	return keyed, keyed != f
}

// delivery returns the delivery an event changes; a settled one takes no
// changes.
func (st *state) delivery(e *belay.Event, id string) (*belay.Delivery, error) {
	d, ok := st.deliveries[id]
	if !ok {
		return nil, corrupt(e, fmt.Sprintf("names unknown delivery %q", id))
	}
	if d.Status == belay.DeliveryDone || d.Status == belay.DeliveryError {
		return nil, corrupt(e, fmt.Sprintf("changes delivery %s, which is settled (%s)", d.ID, d.Status))
	}
	return d, nil
}

func deliveryKey(typ, key string) string { return typ + "\x00" + key }

// active reports whether any run is queued or running.
func (st *state) active() bool {
	for _, r := range st.Runs {
		if !r.Status.Terminal() {
			return true
		}
	}
	return false
}

// failed reports whether any run failed or was stranded.
func (st *state) failed() bool {
	for _, r := range st.Runs {
		if r.Status == belay.RunFailed || r.Status == belay.RunStranded {
			return true
		}
	}
	return st.done.failed > 0
}

// sortedDeliveries returns the deliveries in delivery order: priority
// class (higher first), then seq.
func (st *state) sortedDeliveries() []*belay.Delivery {
	out := append([]*belay.Delivery(nil), st.Deliveries...)
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Priority != out[j].Priority {
			return out[i].Priority > out[j].Priority
		}
		return out[i].Seq < out[j].Seq
	})
	return out
}

func copyRun(r *belay.Run) belay.Run {
	c := *r
	if r.Lease != nil {
		l := *r.Lease
		c.Lease = &l
	}
	if r.Error != nil {
		e := *r.Error
		c.Error = &e
	}
	if r.CancelRequest != nil {
		cr := *r.CancelRequest
		c.CancelRequest = &cr
	}
	if r.Activity != nil {
		a := *r.Activity
		c.Activity = &a
	}
	c.Tags, c.Meta = slices.Clone(r.Tags), maps.Clone(r.Meta)
	return c
}

func copyDelivery(d *belay.Delivery) belay.Delivery {
	c := *d
	if d.Lease != nil {
		l := *d.Lease
		c.Lease = &l
	}
	return c
}
