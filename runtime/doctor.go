package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/doctor"
	"github.com/belayhq/belay/provider"
	"github.com/belayhq/belay/store"
)

// Doctor diagnoses a session from the live runtime (G11). It only reads.
func (r *Runtime) Doctor(ctx context.Context, session string) (apitype.DoctorReport, error) {
	in, err := DoctorInput(ctx, r.store, session)
	if err != nil {
		return apitype.DoctorReport{}, err
	}
	in.Now = r.clk.Now()
	in.Daemon = doctor.Daemon{Reachable: true, Incarnation: r.opts.Incarnation}
	// A lease held by another runtime over the same store (another node)
	// is judged by its owner record, not as a previous incarnation's.
	owners, err := r.store.Owners(ctx)
	if err != nil {
		return apitype.DoctorReport{}, err
	}
	in.Daemon.OwnerAlive = map[string]bool{}
	for _, o := range owners {
		in.Daemon.OwnerAlive[o.ID] = o.Live
	}
	in.Retention = r.opts.Retention
	r.mu.Lock()
	for _, run := range in.Runs {
		if err := r.stallErr[run.ID]; err != nil && in.Journal.WriteError == "" {
			// The runner stopped on a refused write and waits to retry:
			// the store's own last write may have succeeded since (space
			// freed by the cut-back), but the run is still waiting.
			in.Journal.WriteError = err.Error()
			var full *belay.DiskFullError
			if errors.As(err, &full) {
				in.Journal.DiskFull, in.Journal.FreeBytes = true, full.Free
			}
		}
		if rn := r.runners[run.ID]; rn != nil {
			a := rn.activity()
			f := in.Facts[run.ID]
			f.LastActivity = a.LastProgress
			if !a.LastProgress.IsZero() {
				f.InactivityDeadline = a.LastProgress.Add(r.opts.Tiers.timeoutOf(a.Tier))
			}
			in.Facts[run.ID] = f
		}
	}
	r.mu.Unlock()
	return doctor.Diagnose(in), nil
}

func (t Tiers) timeoutOf(tier belay.Tier) time.Duration {
	w := watchdog{tiers: t.withDefaults()}
	return w.timeout(tier)
}

// DoctorInput gathers what a store says about a session for doctor: the
// session, its runs and deliveries, the side-effecting tool calls of its
// unfinished or failed runs (names only), and the journal facts when the
// store is the file store. The caller fills in the time, the daemon and
// the retention policy. It reads no prompt or answer text into the input.
func DoctorInput(ctx context.Context, st store.Store, session string) (doctor.Input, error) {
	sess, err := st.Session(ctx, session)
	if err != nil {
		return doctor.Input{}, err
	}
	runs, err := st.Runs(ctx, belay.RunFilter{Session: session})
	if err != nil {
		return doctor.Input{}, err
	}
	ds, err := st.Deliveries(ctx, belay.DeliveryFilter{Session: session})
	if err != nil {
		return doctor.Input{}, err
	}
	in := doctor.Input{Session: sess, Runs: runs, Deliveries: ds, LastEventAt: sess.UpdatedAt, Facts: map[string]doctor.RunFacts{}}
	for _, run := range runs {
		if run.Status == belay.RunComplete || run.Status == belay.RunCancelled || run.Status == belay.RunQueued {
			continue
		}
		f := doctor.RunFacts{}
		if names, err := settledSideEffects(ctx, st, run); err == nil {
			f.SideEffects = names
		}
		if e := run.Error; e != nil && e.RetryAfterSeconds > 0 && !run.EndedAt.IsZero() {
			// The provider's Retry-After, not the default backoff.
			f.RetryAt = run.EndedAt.Add(time.Duration(e.RetryAfterSeconds * float64(time.Second)))
		}
		if len(f.SideEffects) > 0 || !f.RetryAt.IsZero() {
			in.Facts[run.ID] = f
		}
	}
	if ji, ok := st.(store.JournalInspector); ok {
		if info, err := ji.JournalInfo(session); err == nil {
			in.Journal.Path = info.Path
			in.Journal.Quarantined = info.Quarantined
			in.Journal.QuarantineOffset = info.QuarantineOffset
			in.Journal.LastGoodSeq = info.LastGoodSeq
			if n := len(info.BrokenCopies); n > 0 {
				in.Journal.BrokenCopy = info.BrokenCopies[n-1]
			}
			in.Journal.WriteError, in.Journal.DiskFull, in.Journal.FreeBytes = info.WriteError, info.DiskFull, info.FreeBytes
			in.Journal.Missing, in.Journal.Empty = info.Missing, info.Empty
			in.Journal.OpenError = info.OpenError
		}
	}
	return in, nil
}

// settledSideEffects returns the names of the run's side-effecting tool
// calls that ran (or may have), from its journal.
func settledSideEffects(ctx context.Context, st store.Store, run belay.Run) ([]string, error) {
	effects, err := scanRunEffects(ctx, st, run)
	if err != nil {
		return nil, err
	}
	return effects.names(), nil
}

// scanRunEffects rebuilds a run's side-effect record from its journal.
func scanRunEffects(ctx context.Context, st store.Store, run belay.Run) (*sideEffects, error) {
	effects := newSideEffects()
	after := run.InputSeq
	for {
		evs, err := st.Events(ctx, run.Session, after, 1024)
		if err != nil {
			return effects, err
		}
		if len(evs) == 0 {
			return effects, nil
		}
		for _, e := range evs {
			after = e.Seq
			if e.Run != run.ID {
				continue
			}
			switch e.Type {
			case belay.EventRunToolCall:
				var c provider.Call
				if json.Unmarshal(e.Data, &c) == nil {
					effects.intent(c.ID, c.Name, c.SideEffect)
				}
			case belay.EventRunToolResult:
				var res provider.Result
				if json.Unmarshal(e.Data, &res) == nil {
					effects.settle(res.CallID, res.NotExecuted())
				}
			}
		}
	}
}

// scanRunText returns where the run's answer and thinking text stand in
// the journal since its last fresh attempt: how many bytes it holds, and
// how many it held when the run's ref was last updated (what a resumed
// provider continues from: see streamPos), and that fresh attempt's
// number (1 if none started again).
func scanRunText(ctx context.Context, st store.Store, run belay.Run) (text, thinking streamPos, fresh int, err error) {
	fresh = 1
	after := run.InputSeq
	for {
		evs, err := st.Events(ctx, run.Session, after, 1024)
		if err != nil {
			return text, thinking, fresh, err
		}
		if len(evs) == 0 {
			return text, thinking, fresh, nil
		}
		for _, e := range evs {
			after = e.Seq
			if e.Run != run.ID {
				continue
			}
			switch e.Type {
			case belay.EventRunText, belay.EventRunThinking:
				var d belay.TextData
				if json.Unmarshal(e.Data, &d) == nil {
					if e.Type == belay.EventRunText {
						text.n += len(d.Text)
					} else {
						thinking.n += len(d.Text)
					}
				}
			case belay.EventRunUpdated:
				var d struct {
					Ref  *belay.ConversationRef `json:"ref"`
					Data *belay.AttemptData     `json:"data"`
				}
				if json.Unmarshal(e.Data, &d) != nil {
					continue
				}
				if d.Data != nil && d.Data.Attempt > 1 && !d.Data.Resume {
					text, thinking, fresh = streamPos{}, streamPos{}, d.Data.Attempt
				}
				if d.Ref != nil {
					text.atRef, thinking.atRef = text.n, thinking.n
				}
			}
		}
	}
}
