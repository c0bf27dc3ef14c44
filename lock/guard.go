package lock

import (
	"context"
	"fmt"
	"os"
	"time"
)

// guardSuffix names the reclaim guard beside a lock file.
const guardSuffix = ".reclaim"

// guard is a held reclaim guard (see "Reclaiming" in the package doc).
type guard struct{ f *os.File }

// lockGuard takes the reclaim guard of the lock at path, polling a
// non-blocking flock until ctx is done.
func lockGuard(ctx context.Context, path string) (*guard, error) {
	name := path + guardSuffix
	// Read-only is enough for flock, and lets any user who can read the
	// guard take it.
	f, err := os.OpenFile(name, os.O_RDONLY|os.O_CREATE, filePerm)
	if err != nil {
		return nil, fmt.Errorf("lock: open reclaim guard: %w", err)
	}
	wait := time.Millisecond
	for {
		ok, err := tryFlock(f)
		if err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("lock: reclaim guard %s: %w", name, err)
		}
		if ok {
			return &guard{f: f}, nil
		}
		t := time.NewTimer(jitter(wait))
		select {
		case <-ctx.Done():
			t.Stop()
			_ = f.Close()
			return nil, fmt.Errorf("lock: waiting for reclaim guard %s: %w", name, context.Cause(ctx))
		case <-t.C:
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}

// unlock releases the guard. Closing the descriptor drops the flock.
func (g *guard) unlock() { _ = g.f.Close() }
