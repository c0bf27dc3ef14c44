package fsstore

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/clock"
	"github.com/belayhq/belay/journal"
)

// foldSeed returns the journal lines of a session that went through every
// state change the store journals.
func foldSeed(tb testing.TB) []byte {
	ctx := context.Background()
	dir := tb.TempDir()
	clk := clock.NewFake(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	s, err := Open(ctx, dir, Options{Clock: clk})
	must := func(err error) {
		tb.Helper()
		if err != nil {
			tb.Fatal(err)
		}
	}
	must(err)
	sess, err := s.CreateSession(ctx, belay.SessionInput{Provider: "fake", Model: "m", Labels: map[string]string{"a": "b"}, IdempotencyKey: "sk"})
	must(err)
	r1, _, err := s.CreateRun(ctx, belay.RunInput{Session: sess.ID, IdempotencyKey: "k1", Provider: "fake", Input: json.RawMessage(`{"prompt":"p"}`)})
	must(err)
	r2, _, err := s.CreateRun(ctx, belay.RunInput{Session: sess.ID, Provider: "fake", Priority: 2, Deadline: clk.Now().Add(time.Hour)})
	must(err)
	r1, err = s.AcquireRunLease(ctx, r1.ID, "w1", time.Minute, 0)
	must(err)
	_, err = s.Append(ctx, sess.ID, belay.Sync, belay.Event{Type: "delta", Run: r1.ID, Epoch: r1.Epoch, Data: json.RawMessage(`{"text":"hi"}`)})
	must(err)
	_, err = s.RenewRunLease(ctx, r1.ID, r1.Epoch, time.Minute, nil)
	must(err)
	_, err = s.UpdateRun(ctx, r1.ID, r1.Epoch, belay.RunUpdate{Phase: belay.PhaseStreaming, Attempt: 1,
		Ref: &belay.ConversationRef{Kind: "x", ID: "resp_1", Cursor: "3"}})
	must(err)
	_, err = s.ReleaseRunLease(ctx, r1.ID, r1.Epoch)
	must(err)
	r1, err = s.AcquireRunLease(ctx, r1.ID, "w2", time.Minute, 0)
	must(err)
	_, err = s.UpdateRun(ctx, r1.ID, r1.Epoch, belay.RunUpdate{Phase: belay.PhaseFailed, Reason: "r",
		Error: &belay.RunError{Class: belay.ClassTransient, Message: "m"}})
	must(err)
	_, err = s.CancelQueuedRun(ctx, r2.ID, "no")
	must(err)
	d1, _, err := s.PostDelivery(ctx, belay.DeliveryInput{Session: sess.ID, Type: "ui.click", Key: "c1", Data: json.RawMessage(`[1]`)})
	must(err)
	_, _, err = s.PostDelivery(ctx, belay.DeliveryInput{Session: sess.ID, Type: "ui.click", Priority: 1})
	must(err)
	ds, err := s.LeaseDeliveries(ctx, sess.ID, "c", time.Minute, 2)
	must(err)
	_, err = s.SettleDelivery(ctx, ds[0].ID, belay.Settlement{Kind: belay.SettleRetry, Epoch: ds[0].Epoch, Delay: time.Second})
	must(err)
	_, err = s.SettleDelivery(ctx, ds[1].ID, belay.Settlement{Kind: belay.SettleRelease, Epoch: ds[1].Epoch})
	must(err)
	clk.Advance(2 * time.Second)
	ds, err = s.LeaseDeliveries(ctx, sess.ID, "c", time.Minute, 2)
	must(err)
	for _, d := range ds {
		if d.ID == d1.ID {
			_, err = s.SettleDelivery(ctx, d.ID, belay.Settlement{Kind: belay.SettleDone, Epoch: d.Epoch, Result: "ok"})
			must(err)
		}
	}
	clk.Advance(2 * time.Minute)
	_, _, err = s.ExpireDeliveryLeases(ctx)
	must(err)
	must(s.Close())
	raw, err := os.ReadFile(filepath.Join(dir, SessionsName, sess.ID, journal.FileName))
	must(err)
	return raw
}

// parseFoldInput reads one event a line; seqs are assigned in order, so
// that the fold sees what a journal would give it. Lines that are not
// events are skipped.
func parseFoldInput(in []byte) []belay.Event {
	var evs []belay.Event
	sc := bufio.NewScanner(bytes.NewReader(in))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e belay.Event
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		e.Seq = uint64(len(evs) + 1)
		evs = append(evs, e)
	}
	return evs
}

// fold applies events until the first that does not fold, as openSession
// does, and returns how many folded.
func fold(st *state, evs []belay.Event) (int, error) {
	for i := range evs {
		if err := st.apply(&evs[i]); err != nil {
			return i, err
		}
	}
	return len(evs), nil
}

// checkState checks the invariants every folded state keeps.
func checkState(st *state) error {
	if len(st.Runs) != len(st.runs) || len(st.Deliveries) != len(st.deliveries) {
		return fmt.Errorf("%d runs but %d by id, %d deliveries but %d by id", len(st.Runs), len(st.runs), len(st.Deliveries), len(st.deliveries))
	}
	if err := checkDone(st); err != nil {
		return err
	}
	for _, r := range st.Runs {
		switch {
		case r.ID == "" || st.runs[r.ID] != r:
			return fmt.Errorf("run %q is not the run of its id", r.ID)
		case st.done.has(r.ID):
			return fmt.Errorf("run %s is both finished and not", r.ID)
		case r.Session != st.Session.ID:
			return fmt.Errorf("run %s belongs to session %q, not %q", r.ID, r.Session, st.Session.ID)
		case !r.Status.Valid() || r.Phase.Status() != r.Status:
			return fmt.Errorf("run %s is %q in phase %q", r.ID, r.Status, r.Phase)
		case r.Status.Terminal() && r.Lease != nil:
			return fmt.Errorf("run %s is %s but leased", r.ID, r.Status)
		case r.Lease != nil && r.Lease.Epoch != r.Epoch:
			return fmt.Errorf("run %s has epoch %d but a lease of epoch %d", r.ID, r.Epoch, r.Lease.Epoch)
		}
	}
	for k, id := range st.RunKeys {
		if !st.hasRun(id) {
			return fmt.Errorf("run key %q names unknown run %q", k, id)
		}
	}
	for _, d := range st.Deliveries {
		switch {
		case d.ID == "" || st.deliveries[d.ID] != d:
			return fmt.Errorf("delivery %q is not the delivery of its id", d.ID)
		case d.Session != st.Session.ID:
			return fmt.Errorf("delivery %s belongs to session %q", d.ID, d.Session)
		case (d.Status == belay.DeliveryLeased) != (d.Lease != nil):
			return fmt.Errorf("delivery %s is %s with lease %v", d.ID, d.Status, d.Lease)
		}
		switch d.Status {
		case belay.DeliveryPending, belay.DeliveryLeased, belay.DeliveryDone, belay.DeliveryError:
		default:
			return fmt.Errorf("delivery %s has status %q", d.ID, d.Status)
		}
	}
	for k, id := range st.DeliveryKeys {
		if st.deliveries[id] == nil {
			return fmt.Errorf("delivery key %q names unknown delivery %q", k, id)
		}
	}
	return nil
}

// FuzzFold folds arbitrary event sequences into a session's state. The
// fold must never panic; an event it refuses is an ErrCorruptRecord; every
// state it reaches keeps the invariants (so an event that would break one
// must be refused); a finished run or settled delivery never changes and
// epochs never go back; and folding a snapshot of any prefix, decoded
// again, then the rest gives the same state as folding everything (the
// snapshot path of openSession).
func FuzzFold(f *testing.F) {
	seed := foldSeed(f)
	f.Add(seed, uint8(5))
	lines := bytes.SplitAfter(seed, []byte("\n"))
	f.Add(bytes.Join(lines[1:], nil), uint8(0))                                                    // no session.created
	f.Add(bytes.Join(append([][]byte{lines[0]}, lines...), nil), uint8(1))                         // two
	f.Add(bytes.Join(append(append([][]byte{}, lines[:3]...), lines[1]), nil), uint8(2))           // a run created twice
	f.Add(bytes.Join(append(append([][]byte{}, lines...), lines[len(lines)-6]), nil), uint8(0xff)) // a late change
	// A finished run kept as bytes, with characters json.Marshal escapes.
	f.Add([]byte(`{"ts":"2026-01-01T00:00:00Z","type":"session.created","data":{"id":"ses_x","provider":"fake"}}`+"\n"+
		`{"ts":"2026-01-01T00:00:00Z","type":"run.created","run":"run_x","data":{"id":"run_x","provider":"fake","tags":["a<b"],"meta":{"k":"x & y>"}}}`+"\n"+
		`{"type":"run.leased","run":"run_x","epoch":1,"data":{"owner":"o","expiresAt":"2026-01-01T00:00:00Z"}}`+"\n"+
		`{"ts":"2026-01-01T00:00:01Z","type":"run.updated","run":"run_x","epoch":1,"data":{"phase":"complete"}}`+"\n"), uint8(4))
	for _, extra := range []string{
		`{"type":"run.updated","run":"run_x","epoch":1,"data":{"phase":"bogus"}}`,
		`{"type":"run.updated","run":"run_x","epoch":1,"data":{"phase":"queued"}}`,
		`{"type":"run.leased","run":"run_x","epoch":1,"data":{"owner":"o","expiresAt":"2026-01-01T00:00:00Z"}}`,
		`{"type":"delivery.settled","data":{"id":"dlv_x","kind":"maybe"}}`,
		`{"type":"delivery.posted","data":{"id":"","type":"t"}}`,
		`{"type":"run.created","data":{"id":""}}`,
		`{"type":"session.created","data":{"id":""}}`,
		`{"type":"delivery.leased","data":{"id":"dlv_x","owner":"o"}}`,
		`{"type":"delivery.returned","data":{}}`,
		`{"type":"notify.claimed","epoch":1,"data":{"delivery":"dlv_x","target":"t","owner":"o","expiresAt":"2026-01-01T00:00:00Z","attempt":1}}`,
		`{"type":"notify.claimed","epoch":1,"data":{"delivery":"dlv_y","target":"t"}}`,
		`{"type":"notify.settled","epoch":1,"data":{"delivery":"dlv_x","target":"t","outcome":"sent"}}`,
		`{"type":"notify.settled","data":{"delivery":"dlv_x","target":"t","ok":true,"attempt":2}}`,
		`{"type":"notify.claimed","data":{"delivery":"dlv_x","target":"t","attempt":1}}`,
		`{"type":"notify.settled","epoch":2,"data":{"delivery":"dlv_x","target":"t","outcome":"maybe"}}`,
		`{"type":"notify.settled","epoch":1,"data":{"delivery":"","target":""}}`,
	} {
		f.Add([]byte(`{"type":"session.created","data":{"id":"ses_x","provider":"fake"}}`+"\n"+
			`{"type":"run.created","run":"run_x","data":{"id":"run_x","provider":"fake"}}`+"\n"+
			`{"type":"run.leased","run":"run_x","epoch":1,"data":{"owner":"o","expiresAt":"2026-01-01T00:00:00Z"}}`+"\n"+
			`{"type":"delivery.posted","data":{"id":"dlv_x","type":"t"}}`+"\n"+extra+"\n"), uint8(3))
	}
	f.Fuzz(func(t *testing.T, in []byte, cut uint8) {
		evs := parseFoldInput(in)
		st := newState()
		n := 0
		for ; n < len(evs); n++ {
			var prev *state
			if before, err := json.Marshal(st); err == nil {
				if prev, err = decodeState(before); err != nil {
					t.Fatalf("state does not decode: %v", err)
				}
			}
			err := st.apply(&evs[n])
			if err != nil {
				if !errors.Is(err, belay.ErrCorruptRecord) {
					t.Fatalf("seq %d: error is not ErrCorruptRecord: %v", n+1, err)
				}
				break
			}
			if err := checkState(st); err != nil {
				t.Fatalf("after seq %d (%s %s): %v", n+1, evs[n].Type, evs[n].Data, err)
			}
			if prev != nil {
				if err := checkChange(prev, st); err != nil {
					t.Fatalf("seq %d (%s %s): %v", n+1, evs[n].Type, evs[n].Data, err)
				}
			}
		}
		folded := evs[:n]
		k := 0
		if len(folded) > 0 {
			k = int(cut) % (len(folded) + 1)
		}
		head := newState()
		if _, err := fold(head, folded[:k]); err != nil {
			t.Fatalf("prefix of a good fold failed: %v", err)
		}
		raw, err := json.Marshal(head)
		if err != nil {
			return // a time out of JSON's range: no snapshot is written
		}
		resumed, err := decodeState(raw)
		if err != nil {
			t.Fatalf("snapshot of the state does not decode: %v", err)
		}
		if _, err := fold(resumed, folded[k:]); err != nil {
			t.Fatalf("fold after a snapshot at %d of %d failed: %v", k, len(folded), err)
		}
		want, _ := json.Marshal(st)
		got, _ := json.Marshal(resumed)
		if !bytes.Equal(want, got) {
			t.Fatalf("fold through a snapshot at %d differs:\n%s\n%s", k, got, want)
		}
		// Snapshots and the index take MarshalJSON's bytes as they are:
		// they must be what json.Marshal makes of them (compact, escaped).
		for _, s := range []*state{st, resumed} {
			enc, err := s.MarshalJSON()
			if err != nil {
				t.Fatalf("MarshalJSON: %v", err)
			}
			if byMarshal, _ := json.Marshal(s); !bytes.Equal(enc, byMarshal) {
				t.Fatalf("MarshalJSON differs from json.Marshal:\n%s\n%s", enc, byMarshal)
			}
		}
	})
}

// checkDone checks the finished runs' entries against their JSON: each
// decodes to a finished run of the session with the entry's id, status,
// times and input seq, entries are in input seq order, each is found by
// its id, and the count of failed ones is right.
func checkDone(st *state) error {
	d := &st.done
	failed := 0
	for i := range d.len() {
		r, err := d.run(i)
		if err != nil {
			return err
		}
		k := d.key(i)
		switch {
		case r.ID != k.ID || r.Status != k.Status || r.InputSeq != k.InputSeq || r.Session != k.Session:
			return fmt.Errorf("finished run %s (%s, seq %d) has the entry of %s (%s, seq %d)", r.ID, r.Status, r.InputSeq, k.ID, k.Status, k.InputSeq)
		case !r.CreatedAt.Equal(k.CreatedAt) || !r.UpdatedAt.Equal(k.UpdatedAt):
			return fmt.Errorf("finished run %s has times %v %v, its entry %v %v", r.ID, r.CreatedAt, r.UpdatedAt, k.CreatedAt, k.UpdatedAt)
		case !r.Status.Terminal() || r.Lease != nil || r.Phase.Status() != r.Status:
			return fmt.Errorf("finished run %s is %s in phase %s, lease %v", r.ID, r.Status, r.Phase, r.Lease)
		case i > 0 && d.ents[i-1].seq >= d.ents[i].seq:
			return fmt.Errorf("finished run %s is out of input seq order", r.ID)
		case d.find(r.ID) != i:
			return fmt.Errorf("finished run %s is not found by its id", r.ID)
		case st.runs[r.ID] != nil:
			return fmt.Errorf("run %s is both finished and not", r.ID)
		}
		if r.Status == belay.RunFailed || r.Status == belay.RunStranded {
			failed++
		}
	}
	if failed != d.failed {
		return fmt.Errorf("%d finished runs failed, counted %d", failed, d.failed)
	}
	return nil
}

// allRuns returns every run of st by id, the finished ones decoded.
func allRuns(st *state) map[string]*belay.Run {
	all := map[string]*belay.Run{}
	if err := st.eachRun(func(r *belay.Run) bool { all[r.ID] = r; return true }); err != nil {
		panic(err) // checkState has decoded them all
	}
	return all
}

// checkChange checks what one folded event may change: a finished run or
// settled delivery stays as it was, and epochs never go back.
func checkChange(prev, st *state) error {
	now := allRuns(st)
	for id, p := range allRuns(prev) {
		r := now[id]
		if r == nil {
			return fmt.Errorf("run %s vanished", id)
		}
		if r.Epoch < p.Epoch {
			return fmt.Errorf("run %s went from epoch %d to %d", id, p.Epoch, r.Epoch)
		}
		if p.Status.Terminal() {
			a, _ := json.Marshal(p)
			b, _ := json.Marshal(r)
			if !bytes.Equal(a, b) {
				return fmt.Errorf("run %s changed after it ended:\n%s\n%s", id, a, b)
			}
		}
	}
	for id, p := range prev.deliveries {
		d := st.deliveries[id]
		if d == nil {
			return fmt.Errorf("delivery %s vanished", id)
		}
		if d.Epoch < p.Epoch {
			return fmt.Errorf("delivery %s went from epoch %d to %d", id, p.Epoch, d.Epoch)
		}
		if p.Status == belay.DeliveryDone || p.Status == belay.DeliveryError {
			a, _ := json.Marshal(p)
			b, _ := json.Marshal(d)
			if !bytes.Equal(a, b) {
				return fmt.Errorf("delivery %s changed after it was settled:\n%s\n%s", id, a, b)
			}
		}
	}
	if prev.Session.ID != "" && st.Session.ID != prev.Session.ID {
		return fmt.Errorf("session %s became %s", prev.Session.ID, st.Session.ID)
	}
	return nil
}

// FuzzLeadingID: the id read from the front of a delivery event's payload
// is the one a decode of the payload gives, for every payload the store
// writes (any id, any caller data), escaped ids included.
func FuzzLeadingID(f *testing.F) {
	f.Add("dlv_01m8ft3mj85jmdm6f8fhvf7e8z", `{"run":"run_1","status":"complete"}`)
	f.Add(`a"b\c`, `null`)
	f.Add("<&>\u2028\xff", `{"id":"not this one"}`)
	f.Add("", `[]`)
	f.Fuzz(func(t *testing.T, id, data string) {
		var raw json.RawMessage
		if json.Valid([]byte(data)) {
			raw = json.RawMessage(data)
		}
		for _, v := range []any{
			belay.DeliveryPostedData{ID: id, Type: "run.completed", Key: id, Data: raw},
			belay.DeliveryLeasedData{ID: id, Owner: data},
			belay.DeliverySettledData{ID: id, Kind: belay.SettleDone, Result: data},
			belay.DeliveryExpiredData{ID: id},
		} {
			b, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			var p struct {
				ID string `json:"id"`
			}
			if err := json.Unmarshal(b, &p); err != nil {
				t.Fatal(err)
			}
			if got := leadingID(b); got != p.ID {
				t.Fatalf("leadingID(%s) = %q, the decode gives %q", b, got, p.ID)
			}
		}
	})
}

// FuzzPayloadHint: the fold given a payload hint (applyWith) ends in the
// same state as the fold that decodes the data, for every lease and run
// update the store can write, and the hint is refused where they would
// differ.
func FuzzPayloadHint(f *testing.F) {
	f.Add("inc_1", int64(1_700_000_000_123_456_789), 0, "streaming", 1, "", "fake", "c1", false)
	f.Add("inc_\xff", int64(0), 0, "complete", 0, "done <&>", "", "", true)
	f.Add("owner", int64(-1), 0, "failed", 2, "bad \xc3", "k\u2028", "\x00", true)
	f.Add("o", int64(1<<62), 0, "", 0, "", "", "", false)
	f.Add("o", int64(5), 0, "streaming", 1, "bad \xc3", "k", "c", true)
	f.Add("o", int64(5), 0, "streaming", 1, "", "\xff", "c", true)
	f.Add("o", int64(5), 0, "streaming", 1, "", "k", "c\xff", true)
	f.Add("o", int64(5), 60, "awaiting_response", 1, "", "", "", false)
	f.Fuzz(func(t *testing.T, owner string, expires int64, zone int, phase string, attempt int, reason, kind, cursor string, withRef bool) {
		at := time.Unix(0, expires).UTC()
		if zone %= 24 * 60; zone != 0 {
			at = at.In(time.FixedZone("", zone*60)) // not the store's: it writes UTC
		}
		start := func(t *testing.T) *state {
			t.Helper()
			st := newState()
			ts := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
			for i, v := range []struct {
				typ  string
				run  string
				data any
			}{
				{belay.EventSessionCreated, "", belay.SessionCreatedData{ID: "ses_1", Provider: "fake"}},
				{belay.EventRunCreated, "run_1", belay.RunCreatedData{ID: "run_1", Provider: "fake"}},
			} {
				b, err := json.Marshal(v.data)
				if err != nil {
					t.Fatal(err)
				}
				if err := st.apply(&belay.Event{Seq: uint64(i + 1), TS: ts, Type: v.typ, Run: v.run, Data: b}); err != nil {
					t.Fatal(err)
				}
			}
			return st
		}
		// both applies one event to two states, with the hint and without,
		// and requires the same outcome; it reports whether the hint was
		// taken.
		both := func(t *testing.T, with, without *state, e belay.Event, payload any) bool {
			t.Helper()
			b, err := json.Marshal(payload)
			if err != nil {
				return false // not written by the store either
			}
			e.Data = b
			hint := payloadHint(payload)
			e1, e2 := e, e
			err1, err2 := with.applyWith(&e1, hint), without.apply(&e2)
			if (err1 == nil) != (err2 == nil) || err1 != nil && err1.Error() != err2.Error() {
				t.Fatalf("%s %s: with the hint %v, decoding %v", e.Type, b, err1, err2)
			}
			r1, _, err1 := with.get("run_1")
			r2, _, err2 := without.get("run_1")
			if err1 != nil || err2 != nil {
				t.Fatalf("run_1 does not read back: %v, %v", err1, err2)
			}
			if !reflect.DeepEqual(r1, r2) || !reflect.DeepEqual(with.Session, without.Session) {
				t.Fatalf("%s %s: with the hint the run is %+v, decoding %+v", e.Type, b, r1, r2)
			}
			return hint != nil
		}
		with, without := start(t), start(t)
		lease := &belay.RunLeasedData{Owner: owner, ExpiresAt: at}
		if both(t, with, without, belay.Event{Seq: 3, TS: at, Type: belay.EventRunLeased, Run: "run_1", Epoch: 1}, lease) != (utf8.ValidString(owner) && zone == 0 && at.Year() >= 0 && at.Year() <= 9999) {
			t.Fatalf("lease %+v: hint given where it should not be, or refused where it should be", lease)
		}
		upd := &belay.RunUpdatedData{Phase: belay.RunPhase(phase), Attempt: attempt, Reason: reason}
		if withRef {
			upd.Ref = &belay.ConversationRef{Kind: kind, Cursor: cursor}
		}
		both(t, with, without, belay.Event{Seq: 4, TS: at, Type: belay.EventRunUpdated, Run: "run_1", Epoch: 1}, upd)
		upd.Error = &belay.RunError{Class: belay.ClassInternal, Message: reason}
		if payloadHint(upd) != nil {
			t.Fatal("a run error is given as a hint: the fold would keep the caller's pointer")
		}
	})
}

// FuzzCreatedAndPostedHints: a run.created and a delivery.posted the store
// builds (runCreatedEvent, postedEvent) fold the same with their payload
// hints as decoded from their data, whatever the caller's strings, tags,
// meta, input and item data (JSON with white space, escapes, <>&,
// U+2028, bytes that are not UTF-8), and the fold keeps nothing the caller
// changes afterwards.
func FuzzCreatedAndPostedHints(f *testing.F) {
	f.Add("key", "fake", "m", "t1", "k", "v", `{"prompt": "hi <&> \u2028"}`, int64(1_700_000_000_123_456_789), 3, true, "run.completed", `[1, 2 ,{"a" :"b"}]`)
	f.Add("", "", "", "", "", "", ``, int64(0), 0, false, "t", ``)
	f.Add("k\xff", "p", "", "x\xc3", "\xff", "v", `"s\xff"`, int64(-5), -1, false, "t\xff", `null`)
	f.Add("k", "p", "m", "", "k", "", "  {\n}  ", int64(1<<62), 0, true, "t", "\t[ ]\n")
	f.Fuzz(func(t *testing.T, key, prov, model, tag, mk, mv, input string, deadline int64, prio int, front bool, typ, data string) {
		in := belay.RunInput{IdempotencyKey: key, Provider: prov, Model: model, Priority: prio, Input: json.RawMessage(input)}
		if deadline != 0 {
			in.Deadline = time.Unix(0, deadline)
		}
		if tag != "" {
			in.Tags = []string{tag}
		}
		if mk != "" {
			in.Meta = map[string]string{mk: mv}
		}
		if len(in.Input) > 0 && !json.Valid(in.Input) {
			return // refused at the door (checkJSON)
		}
		e, id, hint, err := runCreatedEvent(in, "fake", "echo", front)
		if err != nil {
			return // not written by the store either
		}
		with, without := newState(), newState()
		ts := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
		created, err := json.Marshal(belay.SessionCreatedData{ID: "ses_1", Provider: "fake"})
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range []*state{with, without} {
			if err := st.apply(&belay.Event{Seq: 1, TS: ts, Type: belay.EventSessionCreated, Data: created}); err != nil {
				t.Fatal(err)
			}
		}
		both := func(e belay.Event, hint any) {
			t.Helper()
			e1, e2 := e, e
			err1, err2 := with.applyWith(&e1, hint), without.apply(&e2)
			if (err1 == nil) != (err2 == nil) || err1 != nil && err1.Error() != err2.Error() {
				t.Fatalf("%s %s: with the hint %v, decoding %v", e.Type, e.Data, err1, err2)
			}
		}
		e.Seq, e.TS = 2, ts
		both(e, hint)
		used := key + tag
		if prov != "" {
			used += prov + model // else the session's, which are UTF-8
		}
		if mk != "" {
			used += mk + mv
		}
		if hint != nil && !utf8.ValidString(used) {
			t.Fatalf("a hint with strings that are not UTF-8: %+v", hint)
		}
		// The caller changes its own values afterwards.
		if len(in.Tags) > 0 {
			in.Tags[0] = "changed"
		}
		for k := range in.Meta {
			in.Meta[k] = "changed"
		}
		if len(input) > 0 {
			in.Input[0] = ' '
		}
		r1, _, err1 := with.get(id)
		r2, _, err2 := without.get(id)
		if err1 != nil || err2 != nil {
			t.Fatalf("the run does not read back: %v, %v", err1, err2)
		}
		if !reflect.DeepEqual(r1, r2) {
			t.Fatalf("with the hint the run is %+v, decoding %+v", r1, r2)
		}
		if !bytes.Equal(with.inputs[id], without.inputs[id]) {
			t.Fatalf("with the hint the input is %q, decoding %q", with.inputs[id], without.inputs[id])
		}

		d := belay.DeliveryInput{Type: typ, Key: key, Priority: prio, Data: json.RawMessage(data), To: mv, AfterRun: id}
		if len(d.Data) > 0 && !json.Valid(d.Data) {
			return
		}
		pe, did, phint, err := postedEvent(d)
		if err != nil {
			return
		}
		pe.Seq, pe.TS = 3, ts
		both(pe, phint)
		if len(data) > 0 {
			d.Data[0] = ' '
		}
		if !reflect.DeepEqual(with.deliveries[did], without.deliveries[did]) {
			t.Fatalf("with the hint the item is %+v, decoding %+v", with.deliveries[did], without.deliveries[did])
		}
	})
}
