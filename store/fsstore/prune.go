package fsstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/ids"
	"github.com/belayhq/belay/journal"
	"github.com/belayhq/belay/store"
)

// pruneVerdict says whether a session may be pruned at now, and by which rule.
func (ss *session) pruneVerdict(p store.PrunePolicy, now time.Time) (ok bool, rule string, last time.Time) {
	last = ss.st.Session.UpdatedAt
	if t := ss.lastEvent.Load(); t > last.UnixNano() {
		last = unixNano(t)
	}
	if ss.fault() != nil {
		return false, "quarantined", last
	}
	keep, outcome := p.KeepComplete, "complete"
	if ss.st.active() {
		return false, "active run", last
	}
	if ss.st.failed() {
		keep, outcome = p.KeepFailed, "failed"
	}
	for _, d := range ss.st.Deliveries {
		if d.HoldsRetention() {
			return false, "unsettled delivery", last
		}
		if d.Status.Settled() && now.Sub(d.SettledAt) < p.Grace {
			return false, "delivery settled within grace", last
		}
	}
	if age := now.Sub(last); age < keep {
		return false, "young", last
	}
	return true, fmt.Sprintf("%s, idle longer than %s", outcome, keep), last
}

// Prune deletes terminal sessions by age policy.
func (s *Store) Prune(ctx context.Context, p store.PrunePolicy) (belay.PruneReport, error) {
	p = p.WithDefaults()
	rep := belay.PruneReport{DryRun: p.DryRun, Pruned: []belay.PrunedSession{}}
	if !p.DryRun {
		if err := s.writable(); err != nil {
			return rep, err
		}
	}
	sessions, err := s.allSessions()
	if err != nil {
		return rep, err
	}
	now := s.clock.Now()
	for _, ss := range sessions {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		ss.mu.Lock()
		ok, rule, last := ss.pruneVerdict(p, now)
		var size int64
		if fi, err := s.fsys.Stat(filepath.Join(ss.dir, journal.FileName)); err == nil {
			size = fi.Size()
		}
		ss.mu.Unlock()
		if !ok {
			rep.Kept++
			continue
		}
		item := belay.PrunedSession{ID: ss.id, LastActive: last, Age: now.Sub(last), Rule: rule, Bytes: size}
		if !p.DryRun {
			pruned, err := s.pruneSession(ss, p, now)
			if err != nil {
				return rep, err
			}
			if !pruned {
				rep.Kept++
				continue
			}
		}
		rep.Pruned = append(rep.Pruned, item)
	}
	if !p.DryRun {
		s.pruneOwners(now)
	}
	return rep, nil
}

// pruneOwners drops the records of owners that stopped heartbeating more
// than store.OwnerRecordKeep before now and lease no queued or running run.
func (s *Store) pruneOwners(now time.Time) {
	s.claims.mu.Lock()
	gone := map[string]bool{}
	for id, o := range s.claims.owners {
		if o.ExpiresAt.Before(now.Add(-store.OwnerRecordKeep)) {
			gone[id] = true
		}
	}
	active := s.claims.sched.activeIDs()
	s.claims.mu.Unlock()
	if len(gone) == 0 {
		return
	}
	for _, id := range active {
		ss, r, err := s.runSession(id)
		if err != nil {
			continue // ended and gone since the look
		}
		if r.Lease != nil && !r.Status.Terminal() {
			delete(gone, r.Lease.Owner)
		}
		ss.mu.Unlock()
	}
	s.claims.mu.Lock()
	defer s.claims.mu.Unlock()
	for id := range gone {
		// A heartbeat since the look brings it back to life: keep it.
		if o := s.claims.owners[id]; o != nil && o.ExpiresAt.Before(now.Add(-store.OwnerRecordKeep)) {
			delete(s.claims.owners, id)
		}
	}
}

// pruneSession removes a session if, checked again under its lock, it is
// still prunable: it is renamed aside, unloaded, then deleted.
func (s *Store) pruneSession(ss *session, p store.PrunePolicy, now time.Time) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ok, _, _ := ss.pruneVerdict(p, now); !ok || s.sessions[ss.id] != ss {
		return false, nil
	}
	return true, s.removeSessionLocked(ss)
}

// DeleteSession deletes one session now, whatever its age: one that has a
// queued or running run is refused (cancel it first), and one with an
// unsettled delivery unless force, except when its journal is damaged,
// missing or empty: nothing can run in it then, and deleting it is the way
// out.
func (s *Store) DeleteSession(ctx context.Context, id string, force bool) error {
	if err := s.writable(); err != nil {
		return err
	}
	ss, err := s.session(id)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if s.sessions[ss.id] != ss {
		return fmt.Errorf("%w: session %s", belay.ErrNotFound, id)
	}
	if ss.problem.Load() == nil {
		if ss.st.active() {
			return fmt.Errorf("%w: session %s has a queued or running run; cancel it first", belay.ErrActive, id)
		}
		for _, d := range ss.st.Deliveries {
			if d.HoldsRetention() && !force {
				return fmt.Errorf("%w: session %s has unsettled delivery %s; settle it, or delete anyway with --force", belay.ErrActive, id, d.ID)
			}
		}
	}
	return s.removeSessionLocked(ss)
}

// removeSessionLocked renames a session aside, unloads it and deletes it.
// s.mu and ss.mu are held.
func (s *Store) removeSessionLocked(ss *session) error {
	s.forget(ss)
	root := filepath.Join(s.dir, SessionsName)
	trash := filepath.Join(root, ".trash-"+ss.id+"-"+ids.New("")[:10])
	if err := s.fence(); err != nil {
		return err
	}
	if s.log != nil {
		// The commit log must never replay this journal's records into a
		// later session with the same id.
		if err := s.log.Drop(ss.id); err != nil {
			if errors.Is(err, fs.ErrPermission) {
				return fmt.Errorf("fsstore: session %s was not deleted: its journal cannot be opened (%w); give it back to the daemon's user (chown, chmod 600) and delete it again", ss.id, err)
			}
			return fmt.Errorf("fsstore: remove %s: %w", ss.id, err)
		}
	}
	// The open journal keeps working through a rename, so a failed rename
	// leaves the session as it was.
	if err := s.fsys.Rename(ss.dir, trash); err != nil {
		return fmt.Errorf("fsstore: remove %s: %w", ss.id, err)
	}
	ss.pruned.Store(true)
	delete(s.sessions, ss.id)
	s.idxMu.Lock()
	for _, r := range ss.st.Runs {
		delete(s.runs, r.ID)
	}
	for i := range ss.st.done.len() {
		delete(s.runs, ss.st.done.id(i))
	}
	for _, d := range ss.st.Deliveries {
		delete(s.deliveries, d.ID)
	}
	if ss.st.SessionKey != "" {
		delete(s.sessionKeys, ss.st.SessionKey)
	}
	s.idxMu.Unlock()
	ss.jmu.Lock()
	if ss.j != nil {
		_ = ss.j.Close()
		ss.j = nil
	}
	ss.jmu.Unlock()
	s.openMu.Lock()
	delete(s.open, ss)
	s.openMu.Unlock()
	if err := s.fsys.SyncDir(root); err != nil {
		return fmt.Errorf("fsstore: remove %s: %w", ss.id, err)
	}
	// Once renamed the session is gone; a failed delete is finished by the
	// next Open.
	_ = s.fsys.RemoveAll(trash)
	return nil
}
