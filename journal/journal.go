package journal

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/belayhq/belay/internal/vfs"
)

// File names inside a session directory.
const (
	FileName     = "journal.jsonl"
	SnapshotName = "snapshot.json"
)

// DefaultBufferedDelay bounds how long a Buffered append waits for a commit.
const DefaultBufferedDelay = 20 * time.Millisecond

// Options configure Open. The zero value is usable.
type Options struct {
	// FS is the filesystem; vfs.OS if nil.
	FS vfs.FS
	// BufferedDelay bounds how long Buffered appends wait to be committed.
	BufferedDelay time.Duration
	// Now supplies event timestamps; time.Now if nil.
	Now func() time.Time
	// ObserveSync, if set, is told how long each fdatasync took.
	ObserveSync func(time.Duration)
	// Syncer, if set, makes a commit's written data durable instead of
	// fdatasync on the journal's file: a store shares one among its
	// journals to make one filesystem sync serve many of them.
	Syncer Syncer
	// Log, if set, makes commits durable in a store-wide commit log
	// instead: a batch is written to the journal's file, not synced, and
	// handed to Log under LogName with the offset it was written at. The
	// log replays it into the file after a power cut (see package
	// commitlog); Syncer is then not used.
	Log Log
	// LogName names the journal in Log.
	LogName string
	// Fence, if set, is called before every write to the journal's files
	// (each commit, each snapshot, a torn-tail truncation). An error means
	// this process may no longer write (it cannot prove it owns the data
	// directory): nothing is written, and the journal turns read-only with
	// an error that wraps it. Stores pass their lock's self-fencing check.
	Fence func() error
	// MustExist refuses to create a missing journal file: Open fails with
	// an error matching fs.ErrNotExist. A store opens the journals of
	// sessions it knows with it, so that a deleted journal is reported as
	// missing rather than silently replaced by an empty one.
	MustExist bool
	// OnCommit, if set, is called by the committer after each commit that
	// made appends durable, outside the journal's lock. It must not block:
	// a store uses it to fold buffered state changes once they are
	// durable.
	OnCommit func()
	// OnQuarantine, if set, is called after a read found damage and the
	// quarantine was recorded (QuarantineName): a store drops caches that
	// would otherwise bring the session back as healthy.
	OnQuarantine func()
	// ReadOnly opens without changing anything on disk: a torn tail is left
	// in place (and not read), appends fail with ErrReadOnly, and a missing
	// journal is an error. Doctor and offline readers use it.
	ReadOnly bool
}

// Recovery reports what Open found and did.
type Recovery struct {
	// Snapshot is "trusted", "absent", or why the snapshot was not used.
	Snapshot string
	// TornAt is the offset of a torn tail, or -1 when there was none.
	TornAt int64
	// TornReason says what was wrong with the torn tail.
	TornReason string
	// BrokenCopy is the path of the copy kept before truncating it.
	BrokenCopy string
	// Scanned is how many bytes Open read to verify the journal.
	Scanned int64
}

// Journal is one session's append-only log. It is safe for concurrent use.
type Journal struct {
	fsys     vfs.FS
	dir      string
	path     string
	f        vfs.File
	now      func() time.Time
	delay    time.Duration
	readOnly bool
	recovery Recovery
	observe  func(time.Duration)
	syncer   Syncer
	log      Log
	logName  string
	fence    func() error
	onCommit func()
	onQuar   func() // Options.OnQuarantine
	// snapIndexMax bounds the index entries a snapshot keeps (tests lower it).
	snapIndexMax int

	mu         sync.Mutex
	nextSeq    uint64
	ids        map[string]uint64 // idempotency id -> seq, pending ones included
	cur        *batch            // the batch being filled
	durable    scanState         // what is written and synced
	err        error             // sticky: why appends fail (read-only)
	failed     *CommitError      // the commit failure that set err, if that is why
	cut        bool              // Rollback cut the file back after failed
	quarantine *QuarantineError
	closed     bool
	drained    bool          // Close has committed everything queued
	changed    chan struct{} // closed and replaced when durable grows or on close
	snapState  []byte
	snapSeq    uint64
	stats      Stats

	kick       chan struct{}
	stop       chan struct{}
	done       chan struct{}
	committing bool // the committer (flusher) was started
	writing    bool // a batch is being committed (by the committer or an appender)
}

// Open opens (creating if needed) the journal in dir and recovers it.
//
// On damage before the tail it returns a read-only Journal that serves the
// events before the damage, together with a *QuarantineError. Callers that
// get a QuarantineError must still Close the Journal.
func Open(dir string, opts Options) (*Journal, error) {
	if opts.FS == nil {
		opts.FS = vfs.OS
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.BufferedDelay <= 0 {
		opts.BufferedDelay = DefaultBufferedDelay
	}
	j := &Journal{
		fsys:     opts.FS,
		dir:      dir,
		path:     filepath.Join(dir, FileName),
		now:      opts.Now,
		delay:    opts.BufferedDelay,
		readOnly: opts.ReadOnly,
		observe:  opts.ObserveSync,
		syncer:   opts.Syncer,
		log:      opts.Log,
		logName:  opts.LogName,
		fence:    opts.Fence,
		onCommit: opts.OnCommit,
		onQuar:   opts.OnQuarantine,
		changed:  make(chan struct{}),
		recovery: Recovery{TornAt: -1},

		snapIndexMax: maxSnapshotIndex,
	}
	flag := os.O_RDWR | os.O_CREATE
	if opts.ReadOnly {
		flag = os.O_RDONLY
	}
	created := false
	if opts.MustExist {
		flag &^= os.O_CREATE // (a store opening every session skips a stat each)
	} else if _, statErr := j.fsys.Stat(j.path); errors.Is(statErr, fs.ErrNotExist) && !opts.ReadOnly {
		created = true
	}
	f, err := j.fsys.OpenFile(j.path, flag, 0o600)
	if opts.MustExist && errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("journal: %s is missing: %w", j.path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("journal: open %s: %w", j.path, err)
	}
	if created {
		// Make the new file's directory entry durable before any append to
		// it is acknowledged.
		if err := j.fsys.SyncDir(dir); err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("journal: sync %s: %w", dir, err)
		}
	}
	j.f = f
	if err := j.recover(); err != nil {
		var q *QuarantineError
		if !errors.As(err, &q) {
			_ = f.Close()
			return nil, err
		}
		j.quarantine = q
		j.err = q
	}
	j.nextSeq = j.durable.lastSeq + 1
	j.ids = j.durable.ids
	j.durable.ids = nil // owned by j.ids from now on
	if j.readOnly && j.err == nil {
		j.err = fmt.Errorf("%w: %s was opened read-only", ErrReadOnly, j.path)
	}
	if j.err == nil {
		if _, err := f.Seek(j.durable.size, io.SeekStart); err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("journal: seek %s: %w", j.path, err)
		}
		j.cur = newBatch()
		// The committer starts with the first append (appendEvents): a
		// journal opened to be read, as a store does with every session at
		// start, costs no goroutine.
		j.kick = make(chan struct{}, 1)
		j.stop = make(chan struct{})
		j.done = make(chan struct{})
	}
	if j.quarantine != nil {
		return j, j.quarantine
	}
	return j, nil
}

// recover establishes j.durable from the snapshot and the journal, and
// truncates a torn tail.
func (j *Journal) recover() error {
	fi, err := j.f.Stat()
	if err != nil {
		return fmt.Errorf("journal: stat %s: %w", j.path, err)
	}
	end := fi.Size()
	st, snap, why := j.loadSnapshot(end)
	j.recovery.Snapshot = why
	if snap != nil {
		j.snapState, j.snapSeq = snap.State, snap.LastSeq
	}
	from := st.size
	d, err := scan(j.f, &st, end)
	if err != nil {
		return fmt.Errorf("journal: read %s: %w", j.path, err)
	}
	j.recovery.Scanned = end - from
	j.durable = st
	if d == nil {
		q, err := j.loadQuarantine(end)
		if err != nil {
			return err
		}
		if q != nil {
			// Damage an earlier read found in a range this open did not
			// scan (it trusted the snapshot): still quarantined. Reads
			// that reach the damage fail there, as before.
			return q
		}
		return nil
	}
	if !d.torn {
		return &QuarantineError{Path: j.path, Offset: d.off, LastSeq: st.lastSeq, Reason: d.reason}
	}
	j.recovery.TornAt, j.recovery.TornReason = d.off, d.reason
	if j.readOnly {
		return nil
	}
	return j.truncateTornTail(d.off, end)
}

// truncateTornTail keeps a copy of the whole journal, then cuts it at off.
func (j *Journal) truncateTornTail(off, end int64) error {
	if err := j.checkFence(); err != nil {
		return err
	}
	broken := brokenName(j.path, j.now())
	if err := j.copyTo(broken, end); err != nil {
		return fmt.Errorf("journal: keep copy of torn tail of %s: %w", j.path, err)
	}
	j.recovery.BrokenCopy = broken
	if err := j.f.Truncate(off); err != nil {
		return fmt.Errorf("journal: truncate torn tail of %s at %d: %w", j.path, off, err)
	}
	if err := j.f.Sync(); err != nil {
		return fmt.Errorf("journal: sync %s after truncation: %w", j.path, err)
	}
	return nil
}

func (j *Journal) copyTo(dst string, n int64) error {
	out, err := j.fsys.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, io.NewSectionReader(j.f, 0, n))
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = j.fsys.SyncDir(j.dir)
	}
	if err != nil {
		_ = j.fsys.Remove(dst)
	}
	return err
}

// checkFence asks the owner whether this process may still write.
func (j *Journal) checkFence() error {
	if j.fence == nil {
		return nil
	}
	if err := j.fence(); err != nil {
		return fmt.Errorf("%w: not writing %s: %w", ErrReadOnly, j.path, err)
	}
	return nil
}

// Recovery reports what Open found and did.
func (j *Journal) Recovery() Recovery { return j.recovery }

// Stats counts a journal's commits since Open.
type Stats struct {
	// Commits is how many write+fdatasync rounds ran.
	Commits uint64
	// Events and Bytes are what those commits wrote.
	Events, Bytes uint64
	// SyncTime is the total time spent in fdatasync.
	SyncTime time.Duration
}

// Stats returns the journal's commit counters.
func (j *Journal) Stats() Stats {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.stats
}

// Path returns the journal file's path.
func (j *Journal) Path() string { return j.path }

// LastSeq returns the seq of the last synced event (0 when empty).
func (j *Journal) LastSeq() uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.durable.lastSeq
}

// LastTS returns the time of the last synced event (zero if none): what
// reading that event would give, without reading it.
func (j *Journal) LastTS() time.Time {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.durable.lastSeq == 0 || j.durable.lastTS == 0 {
		return time.Time{}
	}
	return time.Unix(0, j.durable.lastTS).UTC()
}

// Durable reports whether the event of seq is synced and, when it is not,
// whether it never will be by this Journal: a commit failed (the journal
// is read-only), or Close finished without it. A seq still queued is
// neither.
func (j *Journal) Durable(seq uint64) (synced, never bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if seq <= j.durable.lastSeq {
		return true, false
	}
	return false, j.err != nil || j.drained
}

// Size returns the byte size of the synced journal.
func (j *Journal) Size() int64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.durable.size
}

// Err returns why the journal is read-only, or nil if it accepts appends.
func (j *Journal) Err() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return ErrClosed
	}
	return j.err
}

// Failed returns the commit failure that made the journal read-only, or
// nil if none did (it may still be read-only for another reason: opened so,
// quarantined, fenced). A store heals such a journal by [Journal.Abandon]
// and opening it again, once the cause (a full disk) is gone.
func (j *Journal) Failed() *CommitError {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.failed
}

// Abandon closes a journal whose commit failed, first cutting its file back
// to the last acknowledged byte, so that the next Open finds exactly the
// events whose appends were acknowledged: an append reported as failed
// never comes back after a reopen by this process. Shrinking a file needs
// no free space. If the cut fails, the next Open judges the tail as usual
// (a torn record is cut after a backup). On a journal that did not fail,
// Abandon is Close.
func (j *Journal) Abandon() error {
	return j.Close() // which cuts a failed journal back first
}

// Rollback cuts the file of a journal whose commit failed back to the last
// acknowledged byte (see Abandon), leaving the Journal open: readers of
// what was acknowledged go on reading, while a new Journal opened on the
// same directory takes the appends. It does nothing on a journal that did
// not fail.
func (j *Journal) Rollback() error {
	j.mu.Lock()
	failed, size, cut := j.failed, j.durable.size, j.cut
	j.mu.Unlock()
	if failed == nil || cut {
		return nil
	}
	err := j.rollback(size)
	if err == nil {
		j.mu.Lock()
		j.cut = true
		j.mu.Unlock()
	}
	return err
}

// rollback cuts the file back to size, the acknowledged bytes.
func (j *Journal) rollback(size int64) error {
	if j.log != nil {
		// The log may hold the failed batch: record the cut first, so that
		// a replay takes the batch back too. The file is cut even if that
		// fails (the log is then broken and nothing more commits). It is
		// not synced here: the log's checkpoint syncs it, and a sync on
		// this descriptor could take the kernel's report of a failed
		// write-back of bytes the log acknowledged away from that
		// checkpoint.
		cutErr := j.log.Cut(j.logName, size)
		if err := errors.Join(cutErr, j.f.Truncate(size)); err != nil {
			return fmt.Errorf("journal: cut %s back to %d acknowledged bytes: %w", j.path, size, err)
		}
		return nil
	}
	err := j.f.Truncate(size)
	if err == nil {
		err = j.f.Sync()
	}
	if err != nil {
		return fmt.Errorf("journal: cut %s back to %d acknowledged bytes: %w", j.path, size, err)
	}
	return nil
}

// Close commits pending appends, stops the committer, cuts back the bytes
// of a failed commit (as Rollback) and closes the file. It is safe to call
// more than once.
func (j *Journal) Close() error {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return nil
	}
	j.closed = true
	for j.writing {
		// An appender is committing a batch itself: let it finish (the
		// committer drains what is left after it).
		ch := j.changed
		j.mu.Unlock()
		<-ch
		j.mu.Lock()
	}
	stop, running := j.stop, j.committing
	j.mu.Unlock()
	if stop != nil {
		close(stop)
		if running {
			<-j.done
		}
	}
	j.mu.Lock()
	j.drained = true
	close(j.changed)
	j.mu.Unlock()
	var cutErr error
	if !j.readOnly {
		// A commit failed (perhaps the last, of what was queued): cut its
		// bytes off, so that the next Open finds only what was
		// acknowledged.
		cutErr = j.Rollback()
	}
	if err := j.f.Close(); err != nil {
		return errors.Join(cutErr, fmt.Errorf("journal: close %s: %w", j.path, err))
	}
	return cutErr
}

// Exists reports whether dir holds a journal.
func Exists(fsys vfs.FS, dir string) bool {
	if fsys == nil {
		fsys = vfs.OS
	}
	_, err := fsys.Stat(filepath.Join(dir, FileName))
	return !errors.Is(err, fs.ErrNotExist)
}
