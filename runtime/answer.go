package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/delta"
	"github.com/belayhq/belay/store"
)

// errAnswerEnd ends a scan at the run's terminal event.
var errAnswerEnd = errors.New("runtime: end of the run")

// WriteAnswer writes run's answer text to w as it is in the store: the text
// of its last attempt (a resumed attempt continues the text before it; one
// sent again from scratch replaces it). It streams the session's journal
// from the run's input, so memory does not grow with the answer, and stops
// at the run's end, when ctx is done (the reader went away) or when w
// fails. A run that is still going gets the answer so far.
//
// A damaged journal fails the call after the text before the damage was
// written: the caller must report the answer as incomplete (G14).
func WriteAnswer(ctx context.Context, st store.Store, run belay.Run, w io.Writer) error {
	after := run.InputSeq
	if after > 0 {
		after--
	}
	if run.Attempt > 1 {
		// A later attempt may have started again from scratch: find the last
		// such start first, so that nothing written has to be taken back.
		err := st.ScanEvents(ctx, run.Session, after, func(e belay.Event) error {
			if e.Run != run.ID || e.Type != belay.EventRunUpdated {
				return nil
			}
			u, err := decodeRunUpdated(e)
			if err != nil {
				return err
			}
			if u.restarts() {
				after = e.Seq
			}
			if u.Phase.Status().Terminal() {
				return errAnswerEnd
			}
			return nil
		})
		if err != nil && !errors.Is(err, errAnswerEnd) {
			return err
		}
	}
	var buf []byte
	err := st.ScanEvents(ctx, run.Session, after, func(e belay.Event) error {
		if e.Run != run.ID {
			return nil
		}
		switch e.Type {
		case belay.EventRunText:
			var err error
			if buf, err = delta.AppendText(buf[:0], e.Data); err != nil {
				return fmt.Errorf("%w: run %s: seq %d: %v", belay.ErrInvalid, run.ID, e.Seq, err)
			}
			if _, err := w.Write(buf); err != nil {
				return err
			}
		case belay.EventRunUpdated:
			u, err := decodeRunUpdated(e)
			if err != nil {
				return err
			}
			// A restart after the first pass: the answer so far ends here.
			if u.restarts() || u.Phase.Status().Terminal() {
				return errAnswerEnd
			}
		}
		if cap(buf) > 1<<20 {
			buf = nil
		}
		return nil
	})
	if errors.Is(err, errAnswerEnd) {
		return nil
	}
	return err
}

// runUpdate is what WriteAnswer reads of a run.updated event.
type runUpdate struct {
	Phase belay.RunPhase `json:"phase"`
	Data  struct {
		Attempt int  `json:"attempt"`
		Resume  bool `json:"resume"`
	} `json:"data"`
}

// restarts reports whether the update starts an attempt from scratch.
func (u runUpdate) restarts() bool { return u.Data.Attempt > 1 && !u.Data.Resume }

func decodeRunUpdated(e belay.Event) (runUpdate, error) {
	var u runUpdate
	if err := json.Unmarshal(e.Data, &u); err != nil {
		return u, fmt.Errorf("runtime: run.updated at seq %d: %w", e.Seq, err)
	}
	return u, nil
}
