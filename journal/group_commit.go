package journal

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/belayhq/belay"
)

// encPool recycles the buffers appenders encode into before taking the lock.
var encPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// maxPooledEnc keeps huge buffers out of the pool.
const maxPooledEnc = 64 << 10

// batch is a group of encoded events committed by one write and one sync.
type batch struct {
	buf     []byte
	recs    []pendingRec
	hasSync bool      // a Sync appender waits on it
	first   time.Time // when its first event was added
	done    chan struct{}
	err     error
	bufs    *batchBuf // where buf and recs came from, if recycled
}

type pendingRec struct {
	seq      uint64
	id       string
	off, end int   // within buf
	ts       int64 // its time, unix nanoseconds
}

// batchBufs recycles the buffers of committed batches: a batch's buffer
// grows to its size by doubling, and a store commits thousands a second.
var batchBufs sync.Pool

// batchBuf is what batchBufs holds.
type batchBuf struct {
	buf  []byte
	recs []pendingRec
}

// maxPooledBatch keeps the buffers of huge batches out of the pool.
const maxPooledBatch = 256 << 10

func newBatch() *batch {
	b := &batch{done: make(chan struct{})}
	if bb, ok := batchBufs.Get().(*batchBuf); ok {
		b.buf, b.recs, b.bufs = bb.buf[:0], bb.recs[:0], bb
	}
	return b
}

// recycle gives a settled batch's buffers back for a later batch: nothing
// reads them once it is settled (its waiters read only err).
func (b *batch) recycle() {
	if cap(b.buf) > maxPooledBatch || cap(b.recs) > maxPooledBatch/64 {
		return
	}
	clear(b.recs) // their ids
	bb := b.bufs
	if bb == nil {
		bb = new(batchBuf)
	}
	bb.buf, bb.recs = b.buf[:0], b.recs[:0]
	batchBufs.Put(bb)
	b.buf, b.recs, b.bufs = nil, nil, nil
}

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
	return j.append(ctx, d, false, evs)
}

// AppendUnique is Append for events that must be new: if any event's ID is
// already in the journal (or repeated in evs) it writes nothing and fails
// with ErrDuplicate. Stores use it for their own state changes, which must
// never be folded without being written.
func (j *Journal) AppendUnique(ctx context.Context, d Durability, evs ...Event) ([]uint64, error) {
	return j.append(ctx, d, true, evs)
}

func (j *Journal) append(ctx context.Context, d Durability, unique bool, evs []Event) ([]uint64, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// Validate and encode everything but seq and ts before taking the lock,
	// so that concurrent appenders encode in parallel.
	var endsArr [8]int
	ends := endsArr[:0]
	encp := encPool.Get().(*[]byte)
	enc := (*encp)[:0]
	defer func() {
		if cap(enc) <= maxPooledEnc {
			*encp = enc
			encPool.Put(encp)
		}
	}()
	for i := range evs {
		if err := validate(&evs[i]); err != nil {
			return nil, err
		}
		var err error
		if enc, err = encodeTail(enc, &evs[i]); err != nil {
			if errors.Is(err, ErrTooLarge) {
				err = fmt.Errorf("%w: event %d (%s) would be more than %d bytes", err, i, evs[i].Type, belay.MaxRecordSize)
			}
			return nil, err
		}
		ends = append(ends, len(enc))
	}
	tail := func(i int) []byte {
		if i == 0 {
			return enc[:ends[0]]
		}
		return enc[ends[i-1]:ends[i]]
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
	if unique {
		if err := j.checkUnique(evs); err != nil {
			j.mu.Unlock()
			return nil, err
		}
	}
	b := j.cur
	nrecs := len(b.recs)
	var waitSeq uint64 // the highest seq this call must see durable
	now := j.now()
	for i := range evs {
		e := &evs[i]
		if e.ID != "" {
			if seq, ok := j.ids[e.ID]; ok {
				seqs[i] = seq
				waitSeq = max(waitSeq, seq)
				continue
			}
			j.ids[e.ID] = j.nextSeq
		}
		ts := e.TS
		if ts.IsZero() {
			ts = now
		}
		off := len(b.buf)
		b.buf = appendLine(b.buf, j.nextSeq, ts, tail(i))
		b.recs = append(b.recs, pendingRec{seq: j.nextSeq, id: e.ID, off: off, end: len(b.buf), ts: ts.UnixNano()})
		seqs[i] = j.nextSeq
		waitSeq = max(waitSeq, j.nextSeq)
		j.nextSeq++
	}
	added := len(b.recs) > nrecs
	if added && d == Sync && !j.writing {
		// No commit in flight: this appender commits the batch itself,
		// rather than waking the committer and waiting for it (one
		// goroutine hand-off fewer per commit). The committer still takes
		// what arrives meanwhile, and buffered batches.
		return seqs, j.lead(b)
	}
	if added && !j.committing {
		j.committing = true
		go j.flusher()
	}
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

// lead commits b, the current batch, on the calling appender's goroutine.
// j.mu is held on entry and released.
func (j *Journal) lead(b *batch) error {
	err := j.commitCurrent(b)
	if len(j.cur.recs) > 0 {
		// Appends that arrived meanwhile: the committer takes them.
		if !j.committing {
			j.committing = true
			go j.flusher()
		}
		select {
		case j.kick <- struct{}{}:
		default:
		}
	}
	j.mu.Unlock()
	if err != nil {
		return b.err
	}
	if j.onCommit != nil {
		j.onCommit()
	}
	return nil
}

// commitCurrent writes and syncs b, the current batch, and settles it,
// with no other commit in flight meanwhile (j.writing). j.mu is held on
// entry and on return, released while b is written.
func (j *Journal) commitCurrent(b *batch) error {
	j.writing = true
	j.cur = newBatch()
	off := j.durable.size
	j.mu.Unlock()
	err := j.commit(b, off)
	j.mu.Lock()
	j.settle(b, err)
	b.recycle()
	j.writing = false
	return err
}

// checkUnique fails if an event's ID is known or repeated. j.mu is held.
func (j *Journal) checkUnique(evs []Event) error {
	for i := range evs {
		id := evs[i].ID
		if id == "" {
			continue
		}
		if seq, ok := j.ids[id]; ok {
			return fmt.Errorf("%w: id %q is seq %d", ErrDuplicate, id, seq)
		}
		for k := range evs[:i] {
			if evs[k].ID == id {
				return fmt.Errorf("%w: id %q appears twice", ErrDuplicate, id)
			}
		}
	}
	return nil
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
		case j.drained:
			// Close committed everything queued; seq was not among it.
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
		// Commit back to back while there is work that may not wait: a batch
		// with a Sync appender, a buffered batch past its delay, or anything
		// when stopping. Looping here rather than going back to select keeps
		// the committer running while the appenders it just woke fill the
		// next batch, instead of queueing it behind them.
		for j.commitNext(stopping, timer) {
		}
		if stopping {
			return
		}
	}
}

// commitNext commits the current batch if it is due and reports whether it
// did. A buffered batch that is not due arms timer for when it will be.
func (j *Journal) commitNext(force bool, timer *time.Timer) bool {
	j.mu.Lock()
	b := j.cur
	if len(b.recs) == 0 || j.writing {
		// (an appender is committing: it kicks when done)
		j.mu.Unlock()
		return false
	}
	if !force && !b.hasSync {
		if wait := j.delay - time.Since(b.first); wait > 0 {
			timer.Reset(wait)
			j.mu.Unlock()
			return false
		}
	}
	err := j.commitCurrent(b)
	j.mu.Unlock()
	if err == nil && j.onCommit != nil {
		j.onCommit()
	}
	return true
}

// commit writes one batch at off, the end of the file, and syncs it.
func (j *Journal) commit(b *batch, off int64) error {
	// The last moment before the bytes leave this process: a writer that
	// can no longer prove it owns the data directory writes nothing.
	if err := j.checkFence(); err != nil {
		return err
	}
	n, err := j.f.Write(b.buf)
	if err == nil && n != len(b.buf) {
		err = fmt.Errorf("short write: %d of %d bytes", n, len(b.buf))
	}
	if err != nil {
		return &CommitError{Path: j.path, Op: "write", Err: err}
	}
	start := time.Now()
	if j.log != nil {
		if err := j.log.Commit(j.logName, off, b.buf); err != nil {
			return &CommitError{Path: j.path, Op: "commit", Err: err}
		}
	} else {
		sync := j.f.Sync
		if j.syncer != nil {
			sync = func() error { return j.syncer.Sync(j.f) }
		}
		if err := sync(); err != nil {
			return &CommitError{Path: j.path, Op: "fdatasync", Err: err}
		}
	}
	took := time.Since(start)
	if j.observe != nil && j.log == nil {
		j.observe(took)
	}
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
			j.durable.lastTS = r.ts
		}
		j.wake()
	}
	close(b.done)
}

// wake tells waiters that the journal changed. j.mu is held.
func (j *Journal) wake() {
	old := j.changed
	j.changed = make(chan struct{})
	close(old)
}

// fail makes the journal read-only after a failed commit of b. Everything
// queued behind b fails too: its seqs would follow a hole. j.mu is held.
func (j *Journal) fail(err error, b *batch) {
	var ce *CommitError
	if errors.As(err, &ce) {
		j.failed = ce
	}
	err = fmt.Errorf("%w (the journal is read-only until reopened; acknowledged events are intact)", err)
	j.err = err
	b.err = err
	if c := j.cur; len(c.recs) > 0 {
		c.err = err
		close(c.done)
		j.cur = newBatch()
	}
	j.wake()
}
