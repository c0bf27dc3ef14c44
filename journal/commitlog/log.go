// Package commitlog is a store-wide commit log for session journals: one
// file that many journals' commits are made durable in together, with one
// fdatasync per group, instead of one fdatasync per journal per commit.
//
// A journal writes its batch to its own file as usual (without syncing it)
// and then hands the same bytes to [Log.Commit], which appends them, with
// the journal's name and the offset they were written at, to the current
// segment of the log and returns once that segment is synced. The journal
// files are thus always written before the log, and a process that dies
// leaves them complete in the page cache; what a power cut can take from
// them, the log puts back when it is opened again ([Open] replays every
// segment into the journals' files and syncs them before anything reads
// them). A segment is retired once every journal it names has been synced
// (a checkpoint, in the background when the log moves on to the next
// segment or after a replay, and at Close). A deleted journal's records
// are fenced off by a drop record ([Log.Drop]).
//
// A journal that cuts its file back (after a failed commit) records the
// cut with [Log.Cut] before truncating, so that a replay does the same in
// the same order.
//
// Segments are preallocated with zeros, so a commit's fdatasync writes
// the batch's blocks and nothing else (no size change to make durable).
// The format is in format.go and docs/journal-format.md.
package commitlog

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/belayhq/belay/internal/vfs"
)

// DefaultSegmentSize is how large a segment grows before the log moves on
// to the next one.
const DefaultSegmentSize = 32 << 20

// ErrClosed is returned by a Log that was closed.
var ErrClosed = errors.New("commit log: closed")

// Options configure Open.
type Options struct {
	// FS is the filesystem; vfs.OS if nil.
	FS vfs.FS
	// Path returns the file the records of a journal name apply to.
	Path func(name string) string
	// SegmentSize is how large a segment grows before the next one is
	// started (DefaultSegmentSize if 0). Segments are preallocated to it.
	SegmentSize int64
	// Fence, if set, is called before every write: an error means this
	// process may no longer write, and nothing is written.
	Fence func() error
	// ObserveSync, if set, is told how long each fdatasync of the log took.
	ObserveSync func(time.Duration)

	// skipCheckpoint, if set (tests), is asked before each checkpoint:
	// true leaves the segment as a crash before its checkpoint would.
	skipCheckpoint func() bool
}

// Replay reports what Open found in the log and did with it.
type Replay struct {
	Segments int // segments read
	Batches  int
	Records  int
	// Repaired is how many journal files lacked bytes the log held (after
	// a power cut); Missing how many named files no longer exist (deleted
	// sessions), whose records were skipped.
	Repaired, Missing int
	// Torn describes a torn tail found in a segment (an unacknowledged
	// write), if any.
	Torn string
	Took time.Duration
}

// Stats counts the log's work since Open.
type Stats struct {
	Syncs       uint64 // batches written and synced
	Records     uint64
	Bytes       uint64
	SyncTime    time.Duration
	Checkpoints uint64 // segments retired
}

// Log is the commit log. It is safe for concurrent use.
type Log struct {
	fsys vfs.FS
	dir  string
	opts Options

	mu  sync.Mutex
	cur *pending
	// spareBuf and spareNames are the last written batch's, for reuse.
	spareBuf   []byte
	spareNames []string
	err        error // sticky: a checkpoint failed, nothing more is accepted
	fenced     bool  // a checkpoint stopped at the fence: the segments stay for the owner
	closed     bool
	stats      Stats

	kick     chan struct{}
	stop     chan struct{}
	done     chan struct{} // committer finished
	next     chan *segment // prepared segments
	stopPrep chan struct{}
	prepDone chan struct{}
	ckpt     chan *segment
	ckptDone chan struct{}

	seg *segment // the committer's current segment (nil after a failure)

	noMu   sync.Mutex
	nextNo uint64   // the number the next segment made gets
	free   []string // retired segment files kept for reuse (freeName)
}

// maxFree bounds the retired segment files kept for reuse: reusing one
// costs a rename, where a new one is written full of zeros first.
const maxFree = 2

// freeName is the name of a retired segment file kept for reuse: not a
// segment name, so a replay does not read it.
func freeName(no uint64) string { return "free-" + segName(no) }

type segment struct {
	no    uint64
	path  string
	f     vfs.File
	off   int64 // where the next batch goes
	size  int64 // preallocated size, 0 if not preallocated
	names map[string]struct{}
	err   error // preparing it failed
}

type pending struct {
	buf   []byte // header space, then records
	count int
	names []string
	done  chan struct{}
	err   error
}

func newPending() *pending {
	return &pending{buf: make([]byte, headerSize, 4096), done: make(chan struct{})}
}

// maxSpareBuf keeps the buffer of a huge batch from being kept for reuse.
const maxSpareBuf = 1 << 20

// nextPending returns a new batch, with the buffers of the last one
// written when they can be reused. l.mu is held.
func (l *Log) nextPending() *pending {
	if l.spareBuf == nil {
		return newPending()
	}
	b := &pending{buf: l.spareBuf[:headerSize], names: l.spareNames[:0], done: make(chan struct{})}
	l.spareBuf, l.spareNames = nil, nil
	return b
}

// recycle keeps the buffers of a written batch for a later one; its
// waiters read only its err.
func (l *Log) recycle(buf []byte, names []string) {
	if cap(buf) > maxSpareBuf {
		return
	}
	clear(names)
	l.mu.Lock()
	l.spareBuf, l.spareNames = buf, names
	l.mu.Unlock()
}

// segName is a segment's file name: its number in 20 digits.
func segName(no uint64) string { return fmt.Sprintf("%020d.log", no) }

// parseSegName returns the number of a segment file name.
func parseSegName(name string) (uint64, bool) {
	s, ok := strings.CutSuffix(name, ".log")
	if !ok || len(s) != 20 {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil
}

// Segments lists the segment files in dir, oldest first, with their numbers.
func Segments(fsys vfs.FS, dir string) ([]uint64, error) {
	if fsys == nil {
		fsys = vfs.OS
	}
	ents, err := fsys.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("commit log: list %s: %w", dir, err)
	}
	var nos []uint64
	for _, e := range ents {
		if no, ok := parseSegName(e.Name()); ok && e.Type().IsRegular() {
			nos = append(nos, no)
		}
	}
	sort.Slice(nos, func(i, k int) bool { return nos[i] < nos[k] })
	return nos, nil
}

// Open replays the segments in dir (creating it if needed) into the
// journals' files and starts the log; the replayed segments are retired
// in the background once the files they name are synced. It fails with a
// *DamageError, changing nothing, if a segment is damaged before its end.
func Open(dir string, opts Options) (*Log, Replay, error) {
	if opts.FS == nil {
		opts.FS = vfs.OS
	}
	if opts.SegmentSize <= 0 {
		opts.SegmentSize = DefaultSegmentSize
	}
	if opts.Path == nil {
		return nil, Replay{}, errors.New("commit log: Options.Path is required")
	}
	l := &Log{fsys: opts.FS, dir: dir, opts: opts}
	if _, err := l.fsys.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := l.fsys.MkdirAll(dir, 0o700); err != nil {
			return nil, Replay{}, fmt.Errorf("commit log: create %s: %w", dir, err)
		}
		// The directory's entry is durable before a segment in it is.
		if err := l.fsys.SyncDir(filepath.Dir(dir)); err != nil {
			return nil, Replay{}, fmt.Errorf("commit log: create %s: %w", dir, err)
		}
	}
	rep, old, last, err := l.replay()
	if err != nil {
		return nil, rep, err
	}
	l.nextNo = last + 1
	// The first segment is made by the first commit (see rotate): opening
	// does not wait for a segment's worth of zeros.
	l.cur = newPending()
	l.kick = make(chan struct{}, 1)
	l.stop = make(chan struct{})
	l.done = make(chan struct{})
	l.next = make(chan *segment)
	l.stopPrep = make(chan struct{})
	l.prepDone = make(chan struct{})
	l.ckpt = make(chan *segment, 16+len(old))
	l.ckptDone = make(chan struct{})
	go l.committer()
	go l.preparer()
	// The replayed segments are retired in the background, like any other:
	// the journal files they were replayed into are synced first.
	for _, s := range old {
		l.ckpt <- s
	}
	go l.checkpointer()
	return l, rep, nil
}

// Commit appends a journal's write of data at off to the log and returns
// once it is durable. data is copied before Commit returns.
func (l *Log) Commit(name string, off int64, data []byte) error {
	return l.add(name, func(b []byte) []byte { return appendWrite(b, name, off, data) })
}

// Cut records that the journal's file is being cut to size, and returns
// once the record is durable: the caller truncates after it.
func (l *Log) Cut(name string, size int64) error {
	return l.add(name, func(b []byte) []byte { return appendCut(b, name, size) })
}

// Drop records that the journal of name is being deleted, and returns
// once the record is durable: a replay does not apply the records of name
// that precede it, so a journal created later under the same name is
// never written with the deleted one's bytes. First it makes the
// journal's file durable by itself, as the deletion may not happen; if
// that fails the log stops (see Fail). A file that cannot be opened (its
// mode, its owner) refuses the drop and leaves the log working: nothing
// was synced, so nothing of a failed write-back was reported and lost.
func (l *Log) Drop(name string) error {
	if err := l.syncFile(l.opts.Path(name)); err != nil {
		err = fmt.Errorf("before dropping %s: %w", name, err)
		var oe *openError
		if !errors.As(err, &oe) {
			l.Fail(err)
		}
		return fmt.Errorf("commit log: %w", err)
	}
	return l.add(name, func(b []byte) []byte { return appendDrop(b, name) })
}

func (l *Log) add(name string, enc func([]byte) []byte) error {
	if name == "" || len(name) > maxName {
		return fmt.Errorf("commit log: bad journal name %q", name)
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	if l.err != nil {
		err := l.err
		l.mu.Unlock()
		return err
	}
	b := l.cur
	b.buf = enc(b.buf)
	b.count++
	b.names = append(b.names, name)
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
	<-b.done
	return b.err
}

// committer writes and syncs batches one after another.
func (l *Log) committer() {
	defer close(l.done)
	for {
		stopping := false
		select {
		case <-l.kick:
		case <-l.stop:
			stopping = true
		}
		for l.commitNext() {
		}
		if stopping {
			return
		}
	}
}

func (l *Log) commitNext() bool {
	l.mu.Lock()
	b := l.cur
	if b.count == 0 {
		l.mu.Unlock()
		return false
	}
	l.cur = l.nextPending()
	l.mu.Unlock()
	b.err = l.write(b)
	buf, names := b.buf, b.names
	close(b.done)
	l.recycle(buf, names)
	return true
}

// write puts one batch in the current segment and syncs it.
func (l *Log) write(b *pending) error {
	if err := l.mayWrite("writing"); err != nil {
		return err
	}
	if l.seg == nil || (l.seg.off > 0 && l.seg.off+int64(padded(len(b.buf))) > l.opts.SegmentSize) {
		if err := l.rotate(); err != nil && l.seg == nil {
			return err
		}
	}
	s := l.seg
	buf := sealBatch(b.buf, s.no, b.count)
	n, err := s.f.Write(buf)
	if err == nil && n != len(buf) {
		err = fmt.Errorf("short write: %d of %d bytes", n, len(buf))
	}
	if err != nil {
		l.abandon()
		return fmt.Errorf("commit log: write %s: %w", s.path, err)
	}
	start := time.Now()
	if err := s.f.Sync(); err != nil {
		// Never sync the same descriptor again and take its word: the
		// segment is retired as it is (its acknowledged batches are
		// checkpointed) and the next batch goes to a new one.
		l.abandon()
		return fmt.Errorf("commit log: fdatasync %s: %w", s.path, err)
	}
	took := time.Since(start)
	if l.opts.ObserveSync != nil {
		l.opts.ObserveSync(took)
	}
	s.off += int64(len(buf))
	for _, name := range b.names {
		s.names[name] = struct{}{}
	}
	l.mu.Lock()
	l.stats.Syncs++
	l.stats.Records += uint64(b.count)
	l.stats.Bytes += uint64(len(buf))
	l.stats.SyncTime += took
	l.mu.Unlock()
	return nil
}

// rotate retires the current segment to the checkpointer and makes the
// next one current. A segment gets its number only now, from the
// committer, so that numbers follow the order of the writes (a replay
// goes by number): the next segment is a retired file kept for reuse, or
// the spare the preparer filled with zeros, renamed; without either it
// keeps the current segment (which grows past its size meanwhile), or,
// when there is none, creates one here without preallocating it.
func (l *Log) rotate() error {
	no := l.alloc()
	path := filepath.Join(l.dir, segName(no))
	s := l.reuse(no, path)
	if s == nil {
		var spare *segment
		select {
		case spare = <-l.next:
		default:
		}
		if spare != nil && spare.err == nil {
			s = l.adopt(spare, no, path)
		}
	}
	if s == nil {
		if l.seg != nil {
			return nil
		}
		var err error
		if s, err = l.create(path, false); err != nil {
			return err
		}
		s.no = no
	}
	if old := l.seg; old != nil {
		l.ckpt <- old
	}
	l.seg = s
	return nil
}

// adopt makes a spare segment no, at path; nil if it cannot be renamed.
func (l *Log) adopt(spare *segment, no uint64, path string) *segment {
	err := l.mayWrite("renaming " + spare.path)
	if err == nil {
		err = l.fsys.Rename(spare.path, path)
	}
	if err == nil {
		err = l.fsys.SyncDir(l.dir) // the name is durable before a batch in it
	}
	if err != nil {
		_ = spare.f.Close()
		_ = l.fsys.Remove(spare.path)
		return nil
	}
	spare.no, spare.path = no, path
	return spare
}

// mayWrite fails if this process may no longer write.
func (l *Log) mayWrite(what string) error {
	if l.opts.Fence == nil {
		return nil
	}
	if err := l.opts.Fence(); err != nil {
		return fmt.Errorf("commit log: not %s: %w", what, err)
	}
	return nil
}

// abandon retires the current segment after a failed write or sync.
func (l *Log) abandon() {
	if l.seg != nil {
		l.ckpt <- l.seg
		l.seg = nil
	}
}

// preparer keeps one spare segment file ready, full of zeros, under a
// name that is no segment's (rotate numbers it when it becomes current).
func (l *Log) preparer() {
	defer close(l.prepDone)
	for n := uint64(1); ; n++ {
		path := filepath.Join(l.dir, fmt.Sprintf("spare-%d.log", n))
		if _, err := l.fsys.Stat(path); err == nil {
			continue // kept from before: in the free pool
		}
		s, err := l.create(path, true)
		if err != nil {
			s = &segment{err: err}
		}
		select {
		case l.next <- s:
		case <-l.stopPrep:
			if s.f != nil {
				_ = s.f.Close()
				_ = l.fsys.Remove(s.path)
			}
			return
		}
	}
}

// alloc returns a segment number never used before by this log.
func (l *Log) alloc() uint64 {
	l.noMu.Lock()
	defer l.noMu.Unlock()
	no := l.nextNo
	l.nextNo++
	return no
}

// create makes a segment file at path, filled with zeros to the segment
// size (if fill and there is room) and synced, its directory entry
// durable. The caller sets its number.
func (l *Log) create(path string, fill bool) (*segment, error) {
	if err := l.mayWrite("creating " + path); err != nil {
		return nil, err
	}
	f, err := l.fsys.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("commit log: create %s: %w", path, err)
	}
	s := &segment{path: path, f: f, names: map[string]struct{}{}}
	if !fill {
		// grows as it is written
	} else if err := zeroFill(f, l.opts.SegmentSize); err == nil {
		s.size = l.opts.SegmentSize
	} else if !vfs.IsNoSpace(err) {
		_ = f.Close()
		_ = l.fsys.Remove(path)
		return nil, fmt.Errorf("commit log: preallocate %s: %w", path, err)
	} else if err := f.Truncate(0); err != nil {
		// No room to preallocate: the segment grows as it is written.
		_ = f.Close()
		_ = l.fsys.Remove(path)
		return nil, fmt.Errorf("commit log: preallocate %s: %w", path, err)
	}
	err = f.Sync()
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err == nil {
		err = l.fsys.SyncDir(l.dir)
	}
	if err != nil {
		_ = f.Close()
		_ = l.fsys.Remove(path)
		return nil, fmt.Errorf("commit log: create %s: %w", path, err)
	}
	return s, nil
}

// reuse makes segment no of a retired file, if one is kept: its stale
// batches do not validate under the new number. nil if there is none or
// it cannot be used (then a new file is made).
func (l *Log) reuse(no uint64, path string) *segment {
	l.noMu.Lock()
	if len(l.free) == 0 {
		l.noMu.Unlock()
		return nil
	}
	old := l.free[len(l.free)-1]
	l.free = l.free[:len(l.free)-1]
	l.noMu.Unlock()
	if l.mayWrite("renaming "+old) != nil {
		return nil
	}
	if err := l.fsys.Rename(old, path); err != nil {
		_ = l.fsys.Remove(old)
		return nil
	}
	f, err := l.fsys.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		_ = l.fsys.Remove(path)
		return nil
	}
	fi, err := f.Stat()
	if err == nil {
		err = l.fsys.SyncDir(l.dir) // the new name is durable before a batch in it
	}
	if err != nil {
		_ = f.Close()
		_ = l.fsys.Remove(path)
		return nil
	}
	return &segment{no: no, path: path, f: f, size: fi.Size(), names: map[string]struct{}{}}
}

// retire removes a segment file, or keeps it for reuse. The caller syncs
// the directory.
func (l *Log) retire(no uint64, path string) error {
	l.noMu.Lock()
	keep := len(l.free) < maxFree
	l.noMu.Unlock()
	if keep {
		dst := filepath.Join(l.dir, freeName(no))
		if err := l.fsys.Rename(path, dst); err == nil {
			l.noMu.Lock()
			l.free = append(l.free, dst)
			l.noMu.Unlock()
			return nil
		}
	}
	return l.fsys.Remove(path)
}

var zeros = make([]byte, 1<<20)

func zeroFill(f vfs.File, size int64) error {
	for off := int64(0); off < size; {
		n := min(int64(len(zeros)), size-off)
		w, err := f.Write(zeros[:n])
		if err != nil {
			return err
		}
		off += int64(w)
	}
	return nil
}

// checkpointer retires segments: it syncs every journal a segment names,
// then removes the segment. A failure stops the log for good: the
// segment stays, and is replayed when the log is next opened.
func (l *Log) checkpointer() {
	defer close(l.ckptDone)
	for s := range l.ckpt {
		if l.Err() != nil {
			// Failed (Fail): keep every segment for the next open.
			if s.f != nil {
				_ = s.f.Close()
			}
			continue
		}
		if l.opts.skipCheckpoint != nil && l.opts.skipCheckpoint() {
			if s.f != nil {
				_ = s.f.Close()
			}
			continue
		}
		if err := l.checkpoint(s); err != nil {
			l.mu.Lock()
			if l.err == nil {
				l.err = fmt.Errorf("%w (the store accepts nothing more until it is reopened, which replays the log)", err)
			}
			l.mu.Unlock()
			// Later segments are kept too: they are replayed after it.
			for s := range l.ckpt {
				if s.f != nil {
					_ = s.f.Close()
				}
			}
			return
		}
		l.mu.Lock()
		l.stats.Checkpoints++
		l.mu.Unlock()
	}
}

// checkpointWorkers bounds the journal syncs a checkpoint runs at once.
// A checkpoint runs them one at a time while it keeps up, so that its
// writes leave the disk to the log's syncs (8 at once made every commit
// of a 200 ms checkpoint wait: 3-7 ms log syncs instead of 0.1-0.5), and
// all 8 at once when the next segment is already waiting for it, or the
// log is closing.
const checkpointWorkers = 8

func (l *Log) checkpoint(s *segment) error {
	if s.f == nil {
		// a replayed segment: not open
	} else if err := s.f.Close(); err != nil {
		return fmt.Errorf("commit log: close %s: %w", s.path, err)
	}
	names := make(chan string)
	errs := make(chan error, checkpointWorkers)
	var wg sync.WaitGroup
	started := 0
	start := func() {
		started++
		wg.Add(1)
		go func() {
			defer wg.Done()
			var first error
			for name := range names {
				if err := l.syncFile(l.opts.Path(name)); err != nil && first == nil {
					first = err
				}
			}
			errs <- first
		}()
	}
	start()
	closing := l.isClosed()
	for name := range s.names {
		for started < checkpointWorkers && (closing || len(l.ckpt) > 0) {
			// Closing, or falling behind: the next segment is full already
			// (Close queues the last one, too).
			start()
		}
		names <- name
	}
	close(names)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return fmt.Errorf("commit log: checkpoint %s: %w", s.path, err)
		}
	}
	if l.opts.Fence != nil {
		if err := l.opts.Fence(); err != nil {
			l.mu.Lock()
			l.fenced = true
			l.mu.Unlock()
			return fmt.Errorf("commit log: not removing %s: %w", s.path, err)
		}
	}
	if err := l.retire(s.no, s.path); err != nil {
		return fmt.Errorf("commit log: remove %s: %w", s.path, err)
	}
	if err := l.fsys.SyncDir(l.dir); err != nil {
		return fmt.Errorf("commit log: sync %s: %w", l.dir, err)
	}
	return nil
}

// syncFile makes a journal file durable; a file that no longer exists (a
// deleted session) needs nothing.
func (l *Log) syncFile(path string) error {
	f, err := l.fsys.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return &openError{fmt.Errorf("open %s: %w", path, err)}
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("fdatasync %s: %w", path, err)
	}
	return nil
}

// openError is a journal file syncFile could not open: no sync was tried.
type openError struct{ err error }

func (e *openError) Error() string { return e.err.Error() }
func (e *openError) Unwrap() error { return e.err }

// Fail stops the log for good, as a failed checkpoint does: the caller's
// fdatasync of a journal file failed, and the kernel reports a failed
// write-back once, so a checkpoint's later sync of the same file could
// report it clean. Every later commit fails with err; the segments are
// kept, and the next open replays them.
func (l *Log) Fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil {
		l.err = fmt.Errorf("commit log: %w (the store accepts nothing more until it is reopened, which replays the log)", err)
	}
}

// Stats returns the log's counters.
func (l *Log) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stats
}

// Err returns why the log accepts nothing more, or nil.
func (l *Log) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// isClosed reports whether Close was called.
func (l *Log) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// Close commits what is queued, checkpoints every segment and removes
// them: a log closed cleanly leaves no segment behind. The journals that
// commit through it must be closed first. A log whose Fence fails leaves
// its segments and reports no error for them.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	close(l.stop)
	<-l.done
	close(l.stopPrep)
	<-l.prepDone
	if l.seg != nil {
		l.ckpt <- l.seg
		l.seg = nil
	}
	close(l.ckpt)
	<-l.ckptDone
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fenced {
		// This process may no longer write: what it could not retire is
		// left to the directory's owner, whose open replays it.
		return nil
	}
	return l.err
}
