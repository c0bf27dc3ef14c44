package journal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"sort"
)

// Read returns up to max events with seq > after, in order (max <= 0 means
// no limit). It sees only synced events. It seeks through the sparse index,
// so its cost does not grow with after.
//
// On a quarantined journal Read serves the events before the damage and
// returns the *QuarantineError with the last of them: a damaged journal is
// never read as if it simply ended.
func (j *Journal) Read(after uint64, max int) ([]Event, error) {
	var out []Event
	err := j.scanFrom(after, func(e Event) bool {
		out = append(out, e)
		return max <= 0 || len(out) < max
	})
	return out, err
}

// scanFrom calls fn for each synced event after seq after until fn returns
// false.
func (j *Journal) scanFrom(after uint64, fn func(Event) bool) error {
	return j.scanLines(after, decodeLine, fn)
}

// scanLines is scanFrom with the line decoder given.
func (j *Journal) scanLines(after uint64, decode func([]byte) (Event, error), fn func(Event) bool) error {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return ErrClosed
	}
	last, end, q := j.durable.lastSeq, j.durable.size, j.quarantine
	index := j.durable.index
	j.mu.Unlock()
	if after >= last {
		if q != nil {
			return q
		}
		return nil
	}
	off, err := j.seek(index, end, after+1)
	if err != nil {
		return fmt.Errorf("journal: read %s: %w", j.path, err)
	}
	lr := newLineReader(j.f, off, end)
	defer lr.release()
	for {
		line, loff, complete, err := lr.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("journal: read %s: %w", j.path, err)
		}
		if !complete {
			return j.corruptAt(loff, after, "partial line inside the synced journal")
		}
		// Lines before the target are skipped by their seq prefix alone; the
		// line that is returned is verified in full, seq included.
		if seq, ok := peekSeq(line); ok && seq <= after {
			continue
		}
		e, err := decode(line)
		if err != nil {
			return j.corruptAt(loff, after, err.Error())
		}
		if e.Seq != after+1 {
			return j.corruptAt(loff, after, fmt.Sprintf("seq %d follows seq %d", e.Seq, after))
		}
		after = e.Seq
		if !fn(e) || after >= last {
			break
		}
	}
	if after >= last && q != nil {
		return q
	}
	return nil
}

// corruptAt quarantines the journal after a read found damage inside the
// part that Open trusted from the snapshot.
// The quarantine is recorded durably (QuarantineName), so that it survives
// a restart even though the next Open may trust the snapshot and never
// read the damaged range again.
func (j *Journal) corruptAt(off int64, lastGood uint64, reason string) error {
	q := &QuarantineError{Path: j.path, Offset: off, LastSeq: lastGood, Reason: reason}
	j.mu.Lock()
	first := j.quarantine == nil
	if first {
		j.quarantine = q
		j.err = q
		j.wake()
	}
	q, size := j.quarantine, j.durable.size
	j.mu.Unlock()
	if first && !j.readOnly {
		if err := j.writeQuarantine(q, size); err != nil {
			return errors.Join(q, err)
		}
		if j.onQuar != nil {
			j.onQuar()
		}
	}
	return q
}

// seekOffset returns the offset of the last index entry at or before seq.
func seekOffset(index []indexEntry, seq uint64) indexEntry {
	i := sort.Search(len(index), func(i int) bool { return index[i].Seq > seq })
	if i == 0 {
		return indexEntry{Seq: 1}
	}
	return index[i-1]
}

// seek returns an offset at or before the start of the line holding seq,
// and at most about indexInterval before it. Between two index entries that
// are far apart (a snapshot keeps a thinned index) it bisects the file by
// the seq prefixes of lines, so a seek costs O(log n) short reads.
func (j *Journal) seek(index []indexEntry, end int64, seq uint64) (int64, error) {
	lo := seekOffset(index, seq)
	hi := end
	if i := sort.Search(len(index), func(i int) bool { return index[i].Seq > seq }); i < len(index) {
		hi = index[i].Off
	}
	for hi-lo.Off > 2*indexInterval {
		mid := lo.Off + (hi-lo.Off)/2
		off, s, ok, err := j.lineAfter(mid, hi)
		if err != nil {
			return 0, err
		}
		switch {
		case !ok:
			return lo.Off, nil // no parsable line there: scan from lo
		case s <= seq:
			lo = indexEntry{Seq: s, Off: off}
		default:
			hi = off
		}
	}
	return lo.Off, nil
}

// lineAfter finds the first line that starts after off (and before end) and
// returns its offset and seq, read from the seq prefix.
func (j *Journal) lineAfter(off, end int64) (int64, uint64, bool, error) {
	lr := newLineReader(j.f, off, end)
	defer lr.release()
	if _, _, _, err := lr.next(); err != nil { // the line mid-way through
		if err == io.EOF {
			return 0, 0, false, nil
		}
		return 0, 0, false, err
	}
	line, loff, complete, err := lr.next()
	if err == io.EOF || !complete {
		return 0, 0, false, nil
	}
	if err != nil {
		return 0, 0, false, err
	}
	seq, ok := peekSeq(line)
	return loff, seq, ok, nil
}

// Wait blocks until an event with seq > after is synced, the journal fails
// or closes, or ctx is done.
func (j *Journal) Wait(ctx context.Context, after uint64) error {
	for {
		j.mu.Lock()
		switch {
		case j.durable.lastSeq > after:
			j.mu.Unlock()
			return nil
		case j.closed:
			j.mu.Unlock()
			return ErrClosed
		case j.err != nil && !j.readOnly:
			// Failed or quarantined: nothing more will be appended.
			err := j.err
			j.mu.Unlock()
			return err
		case j.quarantine != nil:
			q := j.quarantine
			j.mu.Unlock()
			return q
		}
		ch := j.changed
		j.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// Follow yields every event after seq after, in order, then keeps waiting
// for new ones until ctx is done or the journal closes. It stops after
// yielding an error.
func (j *Journal) Follow(ctx context.Context, after uint64) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		for {
			stop := false
			err := j.scanFrom(after, func(e Event) bool {
				after = e.Seq
				if !yield(e, nil) {
					stop = true
					return false
				}
				return true
			})
			if stop {
				return
			}
			if err == nil {
				err = j.Wait(ctx, after)
			}
			if err != nil {
				yield(Event{}, err)
				return
			}
		}
	}
}
