package cli

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/belayhq/belay/internal/ids"
	"github.com/belayhq/belay/lock"
	"github.com/belayhq/belay/store/fsstore"
)

// ownDataDirOf makes an offline writer (repair) the one writer of the
// belay data directory that holds path, when path is a session journal
// inside one: it takes the directory's lock for as long as it writes, so it
// never writes beside a live daemon, and no daemon starts meanwhile. A held
// lock is refused with its holder named. For other paths it does nothing.
// The returned func releases the lock.
func ownDataDirOf(ctx context.Context, path string) (func(), error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	sessDir := filepath.Dir(abs)
	sessions := filepath.Dir(sessDir)
	if ids.Check(ids.Session, filepath.Base(sessDir)) != nil || filepath.Base(sessions) != fsstore.SessionsName {
		return func() {}, nil
	}
	data := filepath.Dir(sessions)
	l := lock.New(filepath.Join(data, fsstore.LockName), lock.Options{Purpose: "repair"})
	if err := l.TryAcquire(ctx); err != nil {
		var held *lock.HeldError
		if errors.As(err, &held) && held.Holder != nil {
			return nil, fmt.Errorf("%s belongs to the data directory %s, which pid %d (%s) owns; stop it first (belay daemon stop --data %s), then repair", path, data, held.Holder.PID, held.Holder.Purpose, data)
		}
		return nil, fmt.Errorf("cannot take the lock of the data directory %s: %w", data, err)
	}
	// A daemon that stopped without closing its store (killed) left
	// commits in the store's commit log that its next start would replay
	// over what this writer changes: apply them now.
	if err := fsstore.ApplyLog(data); err != nil {
		_ = l.Release()
		return nil, fmt.Errorf("apply the commit log of %s before writing %s: %w", data, path, err)
	}
	// The store index's entry for the journal this writer changes would
	// no longer match it; without the index the next start loads every
	// session from its journal, which is only slower.
	if err := fsstore.RemoveIndex(data); err != nil {
		_ = l.Release()
		return nil, fmt.Errorf("remove the store index of %s before writing %s: %w", data, path, err)
	}
	// A failed release leaves a record of this (exiting) process, which
	// the next acquirer replaces at once: nothing to undo here.
	return func() { _ = l.Release() }, nil
}
