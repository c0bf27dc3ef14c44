package doctor

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/lock"
	"github.com/belayhq/belay/store"
)

var (
	fuzzStatuses = []belay.RunStatus{"", "bogus", belay.RunQueued, belay.RunRunning, belay.RunComplete, belay.RunFailed, belay.RunCancelled, belay.RunStranded}
	fuzzPhases   = []belay.RunPhase{"", belay.PhaseQueued, belay.PhaseStreaming, belay.PhaseRetryWait, belay.PhaseRecovering, belay.PhaseComplete, belay.PhaseFailed, belay.PhaseStranded}
	fuzzClasses  = []belay.ErrorClass{"", belay.ClassAuth, belay.ClassChallenge, belay.ClassRateLimited, belay.ClassOverloaded, belay.ClassTransient, belay.ClassTimeout, belay.ClassInternal, belay.ClassInvalidRequest, "strange"}
	fuzzDStatus  = []belay.DeliveryStatus{"", belay.DeliveryPending, belay.DeliveryLeased, belay.DeliveryDone, belay.DeliveryError}
	fuzzReasons  = []lock.Reason{lock.ReasonFree, lock.ReasonHeld, lock.ReasonProcessGone, lock.ReasonExpired, lock.ReasonMetadataInGrace, "odd"}
)

// fuzzInput builds an Input from fuzz bytes: each byte picks one choice,
// ident goes into identifier fields and secret into every free-text field.
func fuzzInput(data []byte, ident, secret string) Input {
	i := 0
	next := func(n int) int {
		if n <= 0 {
			return 0
		}
		if i >= len(data) {
			return 0
		}
		b := int(data[i])
		i++
		return b % n
	}
	dur := func() time.Duration { return time.Duration(next(256)-128) * time.Duration(1+next(4)) * time.Hour / 4 }
	in := Input{
		Now: now,
		Session: belay.Session{
			ID: ident, Provider: ident, Model: ident, State: []belay.SessionState{"", belay.SessionIdle, belay.SessionActive, belay.SessionQuarantined}[next(4)],
			UpdatedAt: now.Add(dur() * 24), Labels: map[string]string{"k": secret}, Options: json.RawMessage(`0`),
			Ref: belay.ConversationRef{Kind: ident, ID: ident, URL: ident, Target: ident, Cursor: secret},
		},
		LastEventAt: now.Add(dur()),
		Offline:     next(2) == 0,
		Daemon:      Daemon{Reachable: next(2) == 0, Incarnation: []string{"", ident, incCur}[next(3)]},
		Journal:     Journal{Path: ident, Quarantined: next(5) == 0, BrokenCopy: []string{"", ident}[next(2)]},
		Retention:   store.PrunePolicy{KeepComplete: dur() * 24, KeepFailed: dur() * 48, Grace: dur()},
		Thresholds:  Thresholds{Quiet: dur(), RetryBackoff: dur(), MaxUnsettled: next(4) - 1},
		Facts:       map[string]RunFacts{},
	}
	if k := next(4); k > 0 {
		in.Daemon.Lock = &lock.Status{Path: ident, Verdict: lock.Verdict{Reason: fuzzReasons[next(len(fuzzReasons))], Stale: next(2) == 0, Detail: ident}}
		if k > 1 {
			in.Daemon.Lock.Holder = &lock.Owner{Host: ident, PID: next(100000), Incarnation: []string{ident, incCur, ""}[next(3)]}
		}
	}
	if next(3) == 0 {
		in.Daemon.OwnerAlive = map[string]bool{ident: next(2) == 0}
	}
	for n := next(6); n > 0; n-- {
		id := []string{runA, runB, ident, ""}[next(4)]
		r := belay.Run{
			ID: id, Status: fuzzStatuses[next(len(fuzzStatuses))], Phase: fuzzPhases[next(len(fuzzPhases))], Provider: ident,
			Reason: secret + ` tool "` + ident + `"`, IdempotencyKey: secret,
			CreatedAt: now.Add(dur()), UpdatedAt: now.Add(dur()), EndedAt: now.Add(dur()), Deadline: now.Add(dur()),
		}
		if c := next(len(fuzzClasses) + 1); c > 0 {
			r.Error = &belay.RunError{Class: fuzzClasses[c-1], Message: secret}
		}
		if next(2) == 0 {
			r.Lease = &belay.Lease{Owner: []string{ident, incCur + "/w", incOld}[next(3)], ExpiresAt: now.Add(dur())}
		}
		in.Runs = append(in.Runs, r)
		in.Facts[id] = RunFacts{LastActivity: now.Add(dur()), InactivityDeadline: now.Add(dur()), RetryAt: now.Add(dur()), SideEffects: []string{ident, secret}[:next(3)]}
	}
	for n := next(5); n > 0; n-- {
		d := belay.Delivery{
			ID: ident, Type: ident, Key: secret, Data: json.RawMessage(`0`), Result: secret, Status: fuzzDStatus[next(len(fuzzDStatus))],
			Priority: next(3), Seq: uint64(next(10)), NotBefore: now.Add(dur()), CreatedAt: now.Add(dur()), SettledAt: now.Add(dur()),
		}
		if next(2) == 0 {
			d.Lease = &belay.Lease{Owner: ident, ExpiresAt: now.Add(dur())}
		}
		in.Deliveries = append(in.Deliveries, d)
	}
	return in
}

// FuzzDiagnose checks that any input gives a report with a valid next
// action and a reason, without panicking, and that free text in the fields
// Diagnose must not read never reaches the report.
func FuzzDiagnose(f *testing.F) {
	f.Add([]byte{}, "", "")
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, sesID, secretText)
	f.Add([]byte{0, 0, 0, 3, 1, 2, 3, 3, 3, 2, 1, 0, 4, 3, 2, 1}, "inc_current/w", "a secret answer that must never be echoed")
	f.Add([]byte("\xff\xfe\x80\x00\x10quarantine"), "https://u:p@h.example/c/x?t=1", "tool \"x\" SECRET")
	f.Fuzz(func(t *testing.T, data []byte, ident, secret string) {
		rep := Diagnose(fuzzInput(data, ident, secret))
		if !rep.NextAction.Valid() {
			t.Fatalf("invalid nextAction %q", rep.NextAction)
		}
		if rep.Reason == "" || rep.Rule == "" {
			t.Fatalf("empty reason or rule: %+v", rep)
		}
		if (rep.NextAction == apitype.ActionNone) != (rep.Command == "") {
			t.Fatalf("command %q for %s", rep.Command, rep.NextAction)
		}
		for _, d := range rep.Diagnostics {
			if !d.Severity.Valid() || d.Code == "" {
				t.Fatalf("bad diagnostic %+v", d)
			}
		}
		b, err := json.Marshal(rep)
		if err != nil {
			t.Fatal(err)
		}
		// Free text (with a space, long enough not to occur by chance in
		// the report's own wording) never reaches the report.
		if len(secret) >= 24 && strings.Contains(secret, " ") && !strings.ContainsAny(secret, "\"\\<>&") &&
			!strings.Contains(ident, secret) && strings.Contains(string(b), secret) {
			t.Fatalf("report holds the secret %q: %s", secret, b)
		}
	})
}
