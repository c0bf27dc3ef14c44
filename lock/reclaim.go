package lock

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/belayhq/belay/internal/vfs"
)

// reclaim removes the lock file judged stale in seen, if and only if it is
// still that very file and still stale. It reports whether it removed it.
// A nil error with removed false means the file changed hands meanwhile;
// the caller retries from publish.
//
// Why this is race-free among processes (see also the package doc): the
// re-read and the remove both happen under the reclaim guard. While we hold
// it, no other mutator may remove or replace the lock file (reclaim,
// heartbeat and release all take the guard first), and publish cannot
// create one because the path is occupied. So the file we remove is the
// file we re-read, and we re-read the file we judged: same inode and same
// nonce. Two racers that both judged record R stale take the guard in turn;
// the first removes R, the second finds the path empty or holding the
// first's fresh record (another inode, another nonce) and removes nothing.
// A holder that heartbeats concurrently either renews first (we re-judge:
// not stale, held) or finds its file gone afterwards (ErrLost).
func (l *Lock) reclaim(ctx context.Context, seen Status) (removed bool, err error) {
	g, err := lockGuard(ctx, l.path)
	if err != nil {
		return false, err
	}
	defer g.unlock()
	cur, err := inspect(l.path, l.opts)
	if err != nil {
		return false, err
	}
	if cur.Free() || !sameRecord(seen, cur) {
		return false, nil
	}
	if !cur.Stale {
		return false, cur.heldError()
	}
	if err := vfs.OS.Remove(l.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("lock: reclaim %s: %w", l.path, err)
	}
	if err := vfs.OS.SyncDir(filepath.Dir(l.path)); err != nil {
		return true, fmt.Errorf("lock: reclaim %s: sync dir: %w", l.path, err)
	}
	return true, nil
}

// sameRecord reports whether two statuses judged the same lock file: the
// same inode carrying the same nonce (or both unreadable).
func sameRecord(a, b Status) bool {
	if a.info == nil || b.info == nil || !os.SameFile(a.info, b.info) {
		return false
	}
	if a.Holder == nil || b.Holder == nil {
		return a.Holder == nil && b.Holder == nil
	}
	return a.Holder.Nonce == b.Holder.Nonce
}
