package doctor

import (
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/lock"
)

// Fixtures shared by the tests. Times are fixed so reports are golden.
var now = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

const (
	sesID  = "ses_01jfz00000000000000000000a"
	runA   = "run_01jfz00000000000000000000a"
	runB   = "run_01jfz00000000000000000000b"
	dlvA   = "dlv_01jfz00000000000000000000a"
	dlvB   = "dlv_01jfz00000000000000000000b"
	incCur = "inc_current"
	incOld = "inc_previous"
)

func ago(d time.Duration) time.Time { return now.Add(-d) }

const day = 24 * time.Hour

// setup returns a session with no runs, a reachable daemon of incarnation
// incCur and the data-dir lock held by it.
func setup() Input {
	return Input{
		Now: now,
		Session: belay.Session{
			ID: sesID, Provider: "openai", Model: "gpt-5-pro", State: belay.SessionIdle,
			CreatedAt: ago(2 * time.Hour), UpdatedAt: ago(time.Minute),
		},
		Daemon: Daemon{Reachable: true, Incarnation: incCur, Lock: heldLock(incCur)},
	}
}

func heldLock(inc string) *lock.Status {
	return &lock.Status{
		Path: "/data/belay.lock",
		Holder: &lock.Owner{Host: "box", PID: 4242, Incarnation: inc, Purpose: "daemon",
			AcquiredAt: ago(time.Hour), HeartbeatAt: ago(5 * time.Second), ExpiresAt: now.Add(25 * time.Second)},
		Now:     now,
		Verdict: lock.Verdict{Reason: lock.ReasonHeld, Alive: true, Local: true, Detail: "held by pid 4242 on host box, expires in 25s"},
	}
}

func staleLock() *lock.Status {
	st := heldLock(incOld)
	st.Verdict = lock.Verdict{Reason: lock.ReasonProcessGone, Stale: true, Local: true, Detail: "holder pid 4242 is not running"}
	return st
}

func freeLock() *lock.Status {
	return &lock.Status{Path: "/data/belay.lock", Now: now, Verdict: lock.Verdict{Reason: lock.ReasonFree, Detail: "no lock file"}}
}

// running returns a streaming run leased by a worker of the current
// daemon, with progress 5s ago.
func running(in *Input, id string) *belay.Run {
	in.Session.State = belay.SessionActive
	in.Runs = append(in.Runs, belay.Run{
		ID: id, Session: sesID, Status: belay.RunRunning, Phase: belay.PhaseStreaming, Provider: "openai",
		Epoch: 2, Attempt: 1, Lease: &belay.Lease{Owner: incCur + "/w1", Epoch: 2, GrantedAt: ago(10 * time.Minute), ExpiresAt: now.Add(30 * time.Second)},
		Deadline: now.Add(40 * time.Minute), CreatedAt: ago(11 * time.Minute), StartedAt: ago(10 * time.Minute), UpdatedAt: ago(10 * time.Second),
	})
	setFacts(in, id, RunFacts{LastActivity: ago(5 * time.Second)})
	return &in.Runs[len(in.Runs)-1]
}

func queued(in *Input, id string) *belay.Run {
	in.Session.State = belay.SessionActive
	in.Runs = append(in.Runs, belay.Run{
		ID: id, Session: sesID, Status: belay.RunQueued, Phase: belay.PhaseQueued, Provider: "openai",
		CreatedAt: ago(time.Minute), UpdatedAt: ago(time.Minute),
	})
	return &in.Runs[len(in.Runs)-1]
}

// finished returns a run that ended endedAgo ago in status s.
func finished(in *Input, id string, s belay.RunStatus, class belay.ErrorClass, endedAgo time.Duration) *belay.Run {
	r := belay.Run{
		ID: id, Session: sesID, Status: s, Phase: belay.RunPhase(s), Provider: in.Session.Provider, Epoch: 1, Attempt: 1,
		CreatedAt: ago(endedAgo + 10*time.Minute), StartedAt: ago(endedAgo + 9*time.Minute), EndedAt: ago(endedAgo), UpdatedAt: ago(endedAgo),
	}
	if class != "" {
		r.Error = &belay.RunError{Class: class, Message: "provider said no"}
	}
	in.Runs = append(in.Runs, r)
	in.Session.UpdatedAt = ago(endedAgo)
	return &in.Runs[len(in.Runs)-1]
}

func setFacts(in *Input, id string, f RunFacts) {
	if in.Facts == nil {
		in.Facts = map[string]RunFacts{}
	}
	in.Facts[id] = f
}

func delivery(in *Input, id string, s belay.DeliveryStatus, seq uint64) *belay.Delivery {
	d := belay.Delivery{
		ID: id, Session: sesID, Type: "ui.comment", Status: s, Seq: seq, Epoch: 3,
		CreatedAt: ago(time.Minute), Data: []byte(`{"run":"` + runA + `"}`),
	}
	switch s {
	case belay.DeliveryLeased:
		d.Lease = &belay.Lease{Owner: "agent-1", Epoch: 3, GrantedAt: ago(10 * time.Second), ExpiresAt: now.Add(50 * time.Second)}
	case belay.DeliveryDone, belay.DeliveryError:
		d.SettledAt = ago(30 * time.Second)
	}
	in.Deliveries = append(in.Deliveries, d)
	return &in.Deliveries[len(in.Deliveries)-1]
}
