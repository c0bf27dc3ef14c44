package lock

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/belayhq/belay/internal/atomicfile"
	"github.com/belayhq/belay/internal/proc"
	"github.com/belayhq/belay/internal/vfs"
)

const (
	// filePerm is the mode of lock files: readable, so that any local
	// user's doctor can inspect them.
	filePerm = 0o644
	// maxAttempts bounds TryAcquire's publish/reclaim cycles.
	maxAttempts = 8
	// releaseTimeout bounds how long Release waits for the reclaim guard,
	// which is only ever held for a read and an unlink or rename.
	releaseTimeout = 30 * time.Second
)

// Lock is one process's handle on the lock file at a path. Its methods are
// safe for concurrent use. A Lock holds at most one acquisition at a time.
type Lock struct {
	path string
	opts Options

	mu        sync.Mutex
	held      *Owner  // our record on disk; nil when not held
	reclaimed *Status // the stale lock the last acquisition removed
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

// Reclaimed returns the status of the stale lock that the current (or
// last) acquisition removed before winning, if it had to reclaim one; for
// telling the user "reclaimed lock of dead pid 123".
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

// TryAcquire makes one attempt to take the lock. If the lock file holds a
// stale record it is reclaimed (under the reclaim guard) and the attempt
// continues. It returns a [*HeldError] if a live owner holds the lock. ctx
// bounds the wait for the reclaim guard.
func (l *Lock) TryAcquire(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held != nil {
		return ErrAlreadyHeld
	}
	var reclaimed *Status
	var last Status
	for range maxAttempts {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("lock: acquire %s: %w", l.path, err)
		}
		o := l.newOwner()
		err := l.publish(o)
		if err == nil {
			l.held, l.reclaimed = &o, reclaimed
			return nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return err
		}
		st, err := inspect(l.path, l.opts)
		if err != nil {
			return err
		}
		last = st
		switch {
		case st.Free():
			continue // released or reclaimed since our link: try again
		case !st.Stale:
			return st.heldError()
		}
		removed, err := l.reclaim(ctx, st)
		if err != nil {
			return err
		}
		if removed {
			reclaimed = &st
		}
	}
	return &HeldError{Path: l.path, Holder: last.Holder, Reason: ReasonContended, Now: l.opts.Clock()}
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

// Heartbeat renews heartbeatAt and expiresAt of the held record by an
// atomic replace, after checking under the reclaim guard that the file on
// disk is still ours. It returns an error wrapping [ErrLost] (and forgets
// the hold) if the file was removed or replaced, [ErrNotHeld] if this Lock
// holds nothing. Other errors (I/O, ctx ending while waiting for the guard)
// leave the hold as it was; retry.
func (l *Lock) Heartbeat(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held == nil {
		return ErrNotHeld
	}
	g, err := lockGuard(ctx, l.path)
	if err != nil {
		return err
	}
	defer g.unlock()
	if err := l.checkOurs(); err != nil {
		return err
	}
	o := *l.held
	now := l.opts.Clock()
	o.HeartbeatAt, o.ExpiresAt = now, now.Add(l.opts.TTL)
	data, err := o.Encode()
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(vfs.OS, l.path, data, filePerm); err != nil {
		return fmt.Errorf("lock: heartbeat %s: %w", l.path, err)
	}
	l.held = &o
	return nil
}

// Release removes the lock file if it is still ours. It returns an error
// wrapping [ErrLost] if it no longer was (and leaves the other owner's file
// alone), [ErrNotHeld] if this Lock holds nothing.
func (l *Lock) Release() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held == nil {
		return ErrNotHeld
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	return l.releaseLocked(ctx)
}

func (l *Lock) releaseLocked(ctx context.Context) error {
	g, err := lockGuard(ctx, l.path)
	if err != nil {
		return err
	}
	defer g.unlock()
	if err := l.checkOurs(); err != nil {
		return err
	}
	if err := vfs.OS.Remove(l.path); err != nil {
		return fmt.Errorf("lock: release %s: %w", l.path, err)
	}
	l.held = nil
	if err := vfs.OS.SyncDir(filepath.Dir(l.path)); err != nil {
		return fmt.Errorf("lock: release %s: sync dir: %w", l.path, err)
	}
	return nil
}

// checkOurs verifies that the lock file still carries our nonce. The caller
// holds l.mu and the reclaim guard. On loss it forgets the hold.
func (l *Lock) checkOurs() error {
	data, _, err := readFile(l.path)
	if errors.Is(err, fs.ErrNotExist) {
		l.held = nil
		return fmt.Errorf("%w: %s was removed (judged stale by another process?)", ErrLost, l.path)
	}
	if err != nil {
		return fmt.Errorf("lock: read %s: %w", l.path, err)
	}
	o, err := DecodeOwner(data)
	if err != nil {
		l.held = nil
		return fmt.Errorf("%w: %s was replaced by an unreadable file: %v", ErrLost, l.path, err)
	}
	if o.Nonce != l.held.Nonce {
		l.held = nil
		return fmt.Errorf("%w: %s is now held by pid %d on host %s", ErrLost, l.path, o.PID, o.Host)
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

// selfStartTime is this process's start-time token, empty where the
// platform cannot tell (then only PID existence and expiry judge us).
var selfStartTime = sync.OnceValue(func() string {
	tok, err := proc.StartTime(os.Getpid())
	if err != nil {
		return ""
	}
	return tok
})
