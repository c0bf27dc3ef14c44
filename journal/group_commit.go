package journal

import (
	"context"
	"fmt"
	"time"
)

// batch is a group of encoded events committed by one write and one sync.
type batch struct {
	buf     []byte
	recs    []pendingRec
	hasSync bool      // a Sync appender waits on it
	first   time.Time // when its first event was added
	done    chan struct{}
	err     error
}

type pendingRec struct {
	seq      uint64
	id       string
	off, end int // within buf
}

func newBatch() *batch { return &batch{done: make(chan struct{})} }

// Append adds events to the journal and returns their seqs, in order.
//
// An event whose idempotency ID is already in the journal is not written
// again: its original seq is returned instead. The caller sets Type and
// optionally ID, Run, Epoch, Data and TS (the time of the change it records;
// zero means now); Seq is assigned.
//
// With Sync, Append returns after the events are on disk. With Buffered it
// returns at once. A cancelled ctx stops Append only before the events are
// queued: once queued they are committed (or the journal fails) regardless.
func (j *Journal) Append(ctx context.Context, d Durability, evs ...Event) ([]uint64, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for i := range evs {
		if err := validate(&evs[i]); err != nil {
			return nil, err
		}
	}
	seqs := make([]uint64, len(evs))
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return nil, ErrClosed
	}
	if j.err != nil {
		err := j.err
		j.mu.Unlock()
		return nil, err
	}
	b := j.cur
	mark := len(b.buf)
	nrecs := len(b.recs)
	startSeq := j.nextSeq
	var waitSeq uint64 // the highest seq this call must see durable
	ts := j.now().UTC()
	for i := range evs {
		e := evs[i] // a copy: the caller's events are not modified
		if e.ID != "" {
			if seq, ok := j.ids[e.ID]; ok {
				seqs[i] = seq
				waitSeq = max(waitSeq, seq)
				continue
			}
		}
		e.Seq = j.nextSeq
		if e.TS.IsZero() {
			e.TS = ts
		}
		var err error
		if b.buf, err = appendRecord(b.buf, &e); err != nil {
			// Undo this call's events so the batch stays all-or-nothing.
			for _, r := range b.recs[nrecs:] {
				if r.id != "" {
					delete(j.ids, r.id)
				}
			}
			b.buf, b.recs = b.buf[:mark], b.recs[:nrecs]
			j.nextSeq = startSeq
			j.mu.Unlock()
			return nil, fmt.Errorf("%w: event %d (%s) would be more than %d bytes", err, i, e.Type, MaxRecordSize)
		}
		start := mark
		if n := len(b.recs); n > 0 {
			start = b.recs[n-1].end
		}
		b.recs = append(b.recs, pendingRec{seq: e.Seq, id: e.ID, off: start, end: len(b.buf)})
		if e.ID != "" {
			j.ids[e.ID] = e.Seq
		}
		seqs[i] = e.Seq
		waitSeq = max(waitSeq, e.Seq)
		j.nextSeq++
	}
	added := len(b.recs) > nrecs
	if added {
		// Wake the committer only when it has something new to decide: a
		// batch was started (arm the buffered timer) or needs a sync now.
		kick := nrecs == 0
		if nrecs == 0 {
			b.first = time.Now()
		}
		if d == Sync && !b.hasSync {
			b.hasSync, kick = true, true
		}
		if kick {
			select {
			case j.kick <- struct{}{}:
			default:
			}
		}
	}
	durable := j.durable.lastSeq
	j.mu.Unlock()

	if d == Buffered || waitSeq <= durable {
		return seqs, nil
	}
	if added {
		<-b.done
		if b.err != nil {
			return nil, b.err
		}
		return seqs, nil
	}
	// Only duplicates of events still being committed: wait for them.
	return seqs, j.waitDurable(waitSeq)
}

// waitDurable blocks until seq is synced or the journal fails.
func (j *Journal) waitDurable(seq uint64) error {
	for {
		j.mu.Lock()
		switch {
		case j.durable.lastSeq >= seq:
			j.mu.Unlock()
			return nil
		case j.err != nil:
			err := j.err
			j.mu.Unlock()
			return err
		case j.closed:
			j.mu.Unlock()
			return ErrClosed
		}
		ch := j.changed
		j.mu.Unlock()
		<-ch
	}
}

// flusher is the committer goroutine: it writes and syncs batches.
func (j *Journal) flusher() {
	defer close(j.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		stopping := false
		select {
		case <-j.kick:
		case <-timer.C:
		case <-j.stop:
			stopping = true
		}
		j.mu.Lock()
		b := j.cur
		if len(b.recs) == 0 {
			j.mu.Unlock()
			if stopping {
				return
			}
			continue
		}
		if !stopping && !b.hasSync {
			if wait := j.delay - time.Since(b.first); wait > 0 {
				timer.Reset(wait)
				j.mu.Unlock()
				continue
			}
		}
		j.cur = newBatch()
		j.mu.Unlock()

		err := j.commit(b)

		j.mu.Lock()
		j.settle(b, err)
		pending := len(j.cur.recs) > 0
		j.mu.Unlock()
		if stopping {
			if pending {
				// Appends that raced with Close: commit them too.
				select {
				case j.kick <- struct{}{}:
				default:
				}
				j.stopAfterDrain()
			}
			return
		}
		if pending {
			select {
			case j.kick <- struct{}{}:
			default:
			}
		}
	}
}

// stopAfterDrain commits whatever is queued, synchronously, at Close.
func (j *Journal) stopAfterDrain() {
	for {
		j.mu.Lock()
		b := j.cur
		if len(b.recs) == 0 || j.err != nil {
			j.mu.Unlock()
			return
		}
		j.cur = newBatch()
		j.mu.Unlock()
		err := j.commit(b)
		j.mu.Lock()
		j.settle(b, err)
		j.mu.Unlock()
	}
}

// commit writes one batch and syncs it.
func (j *Journal) commit(b *batch) error {
	n, err := j.f.Write(b.buf)
	if err == nil && n != len(b.buf) {
		err = fmt.Errorf("short write: %d of %d bytes", n, len(b.buf))
	}
	if err != nil {
		return fmt.Errorf("%w: write %s: %v", ErrReadOnly, j.path, err)
	}
	start := time.Now()
	if err := j.f.Sync(); err != nil {
		return fmt.Errorf("%w: fdatasync %s: %v", ErrReadOnly, j.path, err)
	}
	took := time.Since(start)
	j.mu.Lock()
	j.stats.Commits++
	j.stats.Events += uint64(len(b.recs))
	j.stats.Bytes += uint64(len(b.buf))
	j.stats.SyncTime += took
	j.mu.Unlock()
	return nil
}

// settle records the outcome of committing b and wakes its waiters and
// the readers. j.mu is held.
func (j *Journal) settle(b *batch, err error) {
	if err != nil {
		j.fail(err, b)
	} else {
		base := j.durable.size
		for _, r := range b.recs {
			j.durable.add(r.seq, "", base+int64(r.off), base+int64(r.end))
		}
		old := j.changed
		j.changed = make(chan struct{})
		close(old)
	}
	close(b.done)
}

// fail makes the journal read-only after a failed commit of b. Everything
// queued behind b fails too: its seqs would follow a hole. j.mu is held.
func (j *Journal) fail(err error, b *batch) {
	err = fmt.Errorf("%w (the journal is read-only until reopened; acknowledged events are intact)", err)
	j.err = err
	b.err = err
	if c := j.cur; len(c.recs) > 0 {
		c.err = err
		close(c.done)
		j.cur = newBatch()
	}
	old := j.changed
	j.changed = make(chan struct{})
	close(old)
}
