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
// sent again from scratch replaces it), or, when the provider journaled a
// final answer (run.answer: a chat site's copy of the answer) since then,
// that answer in place of the streamed text. It streams the session's
// journal from the run's input, so memory does not grow with the answer,
// and stops at the run's end, when ctx is done (the reader went away) or
// when w fails. A run that is still going gets the answer so far.
//
// A damaged journal fails the call after the text before the damage was
// written: the caller must report the answer as incomplete (G14).
func WriteAnswer(ctx context.Context, st store.Store, run belay.Run, w io.Writer) error {
	after := run.InputSeq
	if after > 0 {
		after--
	}
	// A first pass finds where the last attempt that started from scratch
	// began, and the last whole final answer after it, so that nothing
	// written has to be taken back.
	var final answerSet
	var cur answerSet
	err := st.ScanEvents(ctx, run.Session, after, func(e belay.Event) error {
		if e.Run != run.ID {
			return nil
		}
		switch e.Type {
		case belay.EventRunUpdated:
			u, err := decodeRunUpdated(e)
			if err != nil {
				return err
			}
			if u.restarts() {
				after = e.Seq
				final, cur = answerSet{}, answerSet{}
			}
			if u.Phase.Status().Terminal() {
				return errAnswerEnd
			}
		case belay.EventRunAnswer:
			d, err := decodeAnswer(e)
			if err != nil {
				return err
			}
			if d.SHA256 != cur.sha || d.Size != cur.size || d.Offset == 0 {
				cur = answerSet{sha: d.SHA256, size: d.Size, from: e.Seq}
			}
			if d.Offset == cur.next {
				cur.next += int64(len(d.Text))
			}
			if cur.next == cur.size {
				final = cur
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, errAnswerEnd) {
		return err
	}
	if final.sha != "" {
		return writeFinal(ctx, st, run, final, w)
	}
	var buf []byte
	err = st.ScanEvents(ctx, run.Session, after, func(e belay.Event) error {
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

// answerSet is a final answer's parts as a scan meets them: its hash and
// size, the seq of its first part, and the offset its parts cover to.
type answerSet struct {
	sha  string
	size int64
	from uint64
	next int64
}

// writeFinal writes the parts of the final answer a to w.
func writeFinal(ctx context.Context, st store.Store, run belay.Run, a answerSet, w io.Writer) error {
	var next int64
	err := st.ScanEvents(ctx, run.Session, a.from-1, func(e belay.Event) error {
		if e.Run != run.ID || e.Type != belay.EventRunAnswer {
			return nil
		}
		d, err := decodeAnswer(e)
		if err != nil {
			return err
		}
		if d.SHA256 != a.sha || d.Size != a.size || d.Offset != next {
			return nil
		}
		if _, err := io.WriteString(w, d.Text); err != nil {
			return err
		}
		if next += int64(len(d.Text)); next == a.size {
			return errAnswerEnd
		}
		return nil
	})
	if errors.Is(err, errAnswerEnd) {
		return nil
	}
	if err == nil {
		return fmt.Errorf("%w: run %s: the final answer's parts from seq %d end at byte %d of %d", belay.ErrCorruptRecord, run.ID, a.from, next, a.size)
	}
	return err
}

func decodeAnswer(e belay.Event) (belay.AnswerData, error) {
	var d belay.AnswerData
	if err := json.Unmarshal(e.Data, &d); err != nil {
		return d, fmt.Errorf("%w: run %s: run.answer at seq %d: %v", belay.ErrInvalid, e.Run, e.Seq, err)
	}
	return d, nil
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
