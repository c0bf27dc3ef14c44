package lock

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/belayhq/belay/internal/proc"
	"github.com/belayhq/belay/internal/vfs"
)

const (
	// filePerm is the mode of lock files: readable, so that any local
	// user's doctor can inspect them.
	filePerm = 0o644
	// maxAttempts bounds TryAcquire's open/lock/verify cycles.
	maxAttempts = 8
)

// Lock is one process's handle on the lock file at a path. Its methods are
// safe for concurrent use. A Lock holds at most one acquisition at a time.
type Lock struct {
	path string
	opts Options

	mu        sync.Mutex
	f         *os.File // the open, flocked lock file while held
	held      *Owner   // our record on disk; nil when not held
	reclaimed *Status  // the stale record the last acquisition replaced

	// confirmed is when the last heartbeat (or acquisition) that proved
	// the hold started; fence is set once ownership can no longer be
	// proven. Both are read without mu on every Check.
	confirmed atomic.Pointer[proof]
	fence     atomic.Pointer[error]
}

// New returns a Lock for path. It touches nothing on disk.
func New(path string, opts Options) *Lock {
	return &Lock{path: path, opts: opts.withDefaults()}
}

// Path returns the lock file path.
func (l *Lock) Path() string { return l.path }

// Owner returns the record this Lock holds, and whether it holds one.
func (l *Lock) Owner() (Owner, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held == nil {
		return Owner{}, false
	}
	return *l.held, true
}

// Reclaimed returns the status of the stale record that the current (or
// last) acquisition replaced, if there was one; for telling the user
// "reclaimed lock of dead pid 123".
func (l *Lock) Reclaimed() (Status, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.reclaimed == nil {
		return Status{}, false
	}
	return *l.reclaimed, true
}

// Inspect judges the lock file now; see the package-level [Inspect].
func (l *Lock) Inspect() (Status, error) { return inspect(l.path, l.opts) }

// TryAcquire makes one attempt to take the lock. It returns a [*HeldError]
// if a live process holds it (Reason [ReasonHung] if that process stopped
// heartbeating: it is reported, never replaced). A record left by a dead
// holder is replaced at once. ctx is checked between attempts.
func (l *Lock) TryAcquire(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held != nil {
		return ErrAlreadyHeld
	}
	var last *HeldError
	wait := 100 * time.Microsecond
	for i := range maxAttempts {
		if i > 0 {
			// Someone is between taking the kernel lock and writing its
			// record, or between unlinking and unlocking: brief.
			t := time.NewTimer(jitter(wait))
			select {
			case <-ctx.Done():
				t.Stop()
			case <-t.C:
			}
			wait *= 2
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("lock: acquire %s: %w", l.path, err)
		}
		held, err := l.attempt()
		switch {
		case err != nil:
			return err
		case held == nil:
			return nil
		case held.Reason != ReasonContended:
			return held
		}
		last = held
	}
	return last
}

// attempt is one open/lock/verify/judge cycle. It returns (nil, nil) when
// the lock is now held, a *HeldError when someone else holds it (Reason
// ReasonContended asks the caller to try again), or an error.
func (l *Lock) attempt() (*HeldError, error) {
	o := l.newOwner()
	// Create the file with our complete record if it does not exist, so
	// that the path never exists without a record (see "Publishing").
	created := true
	if err := l.publish(o); errors.Is(err, fs.ErrExist) {
		created = false
	} else if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(l.path, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return l.contended(), nil // released and unlinked in between
	}
	if err != nil {
		return nil, fmt.Errorf("lock: open %s: %w", l.path, err)
	}
	ok, err := tryFlock(f)
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lock: flock %s: %w", l.path, err)
	}
	if !ok {
		_ = f.Close()
		st, err := inspect(l.path, l.opts)
		if err != nil {
			return nil, err
		}
		if created || st.replaceable() {
			// Whoever holds the kernel lock has not written its record
			// yet, or is a racer that will find this record ours or
			// stale and step aside or replace it: try again.
			return l.contended(), nil
		}
		return st.heldError(), nil
	}
	// We hold the kernel lock on f's inode; make sure the path still names
	// it (a releaser unlinks the path while holding the lock).
	if same, err := samePath(f, l.path); err != nil || !same {
		_ = f.Close()
		if err != nil {
			return nil, err
		}
		return l.contended(), nil
	}
	if !created {
		st, err := judgeOpen(f, l.path, l.opts)
		if err != nil {
			_ = f.Close()
			return nil, err
		}
		if !st.replaceable() {
			// A live process that does not hold the kernel lock (an older
			// belay, or a holder on a host that does not share kernel
			// locks): never taken over.
			_ = f.Close()
			return st.heldError(), nil
		}
		if err := writeRecord(f, o); err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("lock: write %s: %w", l.path, err)
		}
		if st.Holder != nil || st.Reason != ReasonFree {
			l.reclaimed = &st
		} else {
			l.reclaimed = nil
		}
	} else {
		l.reclaimed = nil
	}
	l.f, l.held = f, &o
	heldHere.Store(o.Nonce, struct{}{})
	// Older belays guarded takeovers with "<path>.reclaim"; the kernel lock
	// replaced it, and the holder of the lock owns the directory's lock
	// files, so a leftover one is removed rather than left behind.
	_ = os.Remove(l.path + ".reclaim")
	l.fence.Store(nil)
	l.confirmed.Store(l.now())
	return nil, nil
}

func (l *Lock) contended() *HeldError {
	return &HeldError{Path: l.path, Reason: ReasonContended, Now: l.opts.Clock()}
}

// Acquire takes the lock, waiting while a live owner holds it. It retries
// TryAcquire with exponential backoff and jitter on a timer, so it never
// blocks other goroutines and never sleeps past ctx's deadline. When ctx
// ends first, the error wraps both ctx.Err() and the last [*HeldError].
func (l *Lock) Acquire(ctx context.Context) error {
	wait := l.opts.BackoffMin
	var last *HeldError
	for {
		err := l.TryAcquire(ctx)
		if err == nil {
			return nil
		}
		var held *HeldError
		switch {
		case errors.As(err, &held):
			last = held
		case ctx.Err() != nil && last != nil:
			// ctx ended during the attempt: report the holder seen last.
		default:
			return err
		}
		t := time.NewTimer(jitter(wait))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("lock: gave up waiting for %s: %w: %w", l.path, ctx.Err(), last)
		case <-t.C:
		}
		wait = min(2*wait, l.opts.BackoffMax)
	}
}

// Heartbeat proves the hold and renews heartbeatAt and expiresAt: it checks
// that the lock file still carries our nonce, then rewrites the record in
// place and fdatasyncs it. It needs no new file descriptor, so a process
// out of descriptors still heartbeats. It returns an error wrapping
// [ErrLost] (and forgets the hold) if the record is no longer ours,
// [ErrNotHeld] if this Lock holds nothing. Other errors (I/O) leave the
// hold as it was; retry.
func (l *Lock) Heartbeat(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held == nil {
		return ErrNotHeld
	}
	start := l.now()
	if err := l.checkOurs(); err != nil {
		return err
	}
	o := *l.held
	now := l.opts.Clock()
	o.HeartbeatAt, o.ExpiresAt = now, now.Add(l.opts.TTL)
	if err := writeRecord(l.f, o); err != nil {
		return fmt.Errorf("lock: heartbeat %s: %w", l.path, err)
	}
	l.held = &o
	l.confirmed.Store(start)
	return nil
}

// Check is the self-fencing test a writer makes before every durable
// write: it returns nil if this Lock holds the lock and proved it (by a
// heartbeat that found its nonce in the record) less than TTL minus
// FenceMargin ago on the suspend-aware monotonic clock (Options.Elapsed).
// Past that it proves ownership again, synchronously, by one Heartbeat.
// When it cannot, it returns an error wrapping [ErrFenced], and keeps
// returning it: a fenced Lock never writes again (see "Self-fencing").
//
// The fast path is one atomic load and one time.Now (see proof.recent);
// the suspend-aware clock, a system call, is read only near the line.
func (l *Lock) Check(ctx context.Context) error {
	if p := l.fence.Load(); p != nil {
		return *p
	}
	p := l.confirmed.Load()
	if p == nil {
		return l.setFenced(ErrNotHeld)
	}
	if l.opts.fastProof && p.recent(time.Now(), l.opts.fenceAfter()) {
		return nil
	}
	since := l.opts.Elapsed() - p.elapsed
	if since < l.opts.fenceAfter() {
		return nil
	}
	err := l.Heartbeat(ctx)
	if err == nil {
		return nil
	}
	return l.setFenced(fmt.Errorf("could not prove ownership %s after the last confirmed heartbeat: %w", roundDuration(since), err))
}

// Fenced returns the error Check returns once the Lock is fenced, or nil.
func (l *Lock) Fenced() error {
	if p := l.fence.Load(); p != nil {
		return *p
	}
	return nil
}

// setFenced records why this Lock may no longer write and returns it.
func (l *Lock) setFenced(cause error) error {
	err := fmt.Errorf("%w: %s: %w", ErrFenced, l.path, cause)
	if !l.fence.CompareAndSwap(nil, &err) {
		return *l.fence.Load()
	}
	return err
}

// Release removes the lock file if it is still ours, then drops the kernel
// lock. The path is unlinked while the kernel lock is held, and acquirers
// verify after locking that the path still names the inode they locked, so
// a release never lets two holders in. It returns an error wrapping
// [ErrLost] if the record was no longer ours (and leaves that file alone),
// [ErrNotHeld] if this Lock holds nothing.
func (l *Lock) Release() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held == nil {
		return ErrNotHeld
	}
	if err := l.checkOurs(); err != nil {
		return err
	}
	if err := vfs.OS.Remove(l.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("lock: release %s: %w", l.path, err)
	}
	derr := vfs.OS.SyncDir(filepath.Dir(l.path))
	l.dropLocked()
	l.setFenced(ErrNotHeld)
	if derr != nil {
		return fmt.Errorf("lock: release %s: sync dir: %w", l.path, derr)
	}
	return nil
}

// dropLocked forgets the hold and closes the file, which drops the kernel
// lock. l.mu is held.
func (l *Lock) dropLocked() {
	if l.f != nil {
		_ = l.f.Close()
	}
	if l.held != nil {
		heldHere.Delete(l.held.Nonce)
	}
	l.f, l.held = nil, nil
}

// checkOurs verifies, through the open file, that the path still names the
// file we lock and that its record carries our nonce. On loss it forgets
// the hold (without touching the file) and fences the Lock. l.mu is held.
func (l *Lock) checkOurs() error {
	lost := func(format string, args ...any) error {
		err := fmt.Errorf("%w: %s %s", ErrLost, l.path, fmt.Sprintf(format, args...))
		l.dropLocked()
		l.setFenced(err)
		return err
	}
	same, err := samePath(l.f, l.path)
	if err != nil {
		return fmt.Errorf("lock: check %s: %w", l.path, err)
	}
	if !same {
		if st, err := inspect(l.path, l.opts); err == nil && st.Holder != nil {
			return lost("was replaced: it is now held by pid %d on host %s", st.Holder.PID, st.Holder.Host)
		}
		return lost("was removed or replaced by another process")
	}
	o, err := readRecord(l.f)
	if err != nil {
		if errors.Is(err, ErrMalformed) {
			return lost("was overwritten with an unreadable record: %v", err)
		}
		return fmt.Errorf("lock: check %s: %w", l.path, err)
	}
	if o.Nonce != l.held.Nonce {
		return lost("is now held by pid %d on host %s", o.PID, o.Host)
	}
	return nil
}

// newOwner returns a fresh record for this process.
func (l *Lock) newOwner() Owner {
	now := l.opts.Clock()
	return Owner{
		Host:        hostname(),
		PID:         os.Getpid(),
		StartTime:   selfStartTime(),
		Nonce:       newNonce(),
		Incarnation: l.opts.Incarnation,
		Purpose:     l.opts.Purpose,
		AcquiredAt:  now,
		HeartbeatAt: now,
		ExpiresAt:   now.Add(l.opts.TTL),
	}
}

// proof is the moment a hold was last proven, on two clocks: the
// suspend-aware Options.Elapsed (exact, but a system call to read) and
// time.Now (a vDSO read carrying both the wall clock and Go's monotonic
// clock).
type proof struct {
	elapsed time.Duration
	at      time.Time
}

func (l *Lock) now() *proof { return &proof{elapsed: l.opts.Elapsed(), at: time.Now()} }

// recent reports, from time.Now alone, that less than line passed since
// the proof. Go's monotonic clock does not count a suspend on Linux, but
// the wall clock does, so a suspend makes wall time run ahead of monotonic
// time: both must be below the line, and the wall clock must not have gone
// back against the monotonic one (a step back could hide a suspend). Any
// doubt answers false, and the caller reads the exact clock.
func (p *proof) recent(now time.Time, line time.Duration) bool {
	return recentBy(now.Sub(p.at), now.Round(0).Sub(p.at.Round(0)), line)
}

// recentBy is proof.recent on the two elapsed readings.
func recentBy(mono, wall, line time.Duration) bool {
	const skew = time.Second // wall-clock adjustments smaller than this are noise
	return mono >= 0 && mono < line && wall < line && wall > mono-skew
}

// heldHere holds the nonces of the locks this process holds, to tell a
// record of ours that another Lock in this process holds from one an
// earlier attempt of ours left behind.
var heldHere sync.Map

// samePath reports whether path names the inode f is open on.
func samePath(f *os.File, path string) (bool, error) {
	fi, err := f.Stat()
	if err != nil {
		return false, fmt.Errorf("lock: stat %s: %w", path, err)
	}
	pi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("lock: stat %s: %w", path, err)
	}
	return os.SameFile(fi, pi), nil
}

// selfStartTime is this process's start-time token, empty where the
// platform cannot tell (then only PID existence and expiry judge us).
var selfStartTime = sync.OnceValue(func() string {
	tok, err := proc.StartTime(os.Getpid())
	if err != nil {
		return ""
	}
	return tok
})
