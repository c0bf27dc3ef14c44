package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/store"
)

// pruneFacts is what the retention verdict of one session needs.
type pruneFacts struct {
	id          string
	last        time.Time
	active      bool
	failed      bool
	unsettled   bool
	lastSettled *time.Time
}

const pruneFactsQuery = `SELECT s.id, greatest(s.updated_at, s.last_event_at),
	` + sessionActive + `,
	EXISTS (SELECT 1 FROM belay_runs r WHERE r.session = s.id AND r.status IN ('failed', 'stranded')),
	EXISTS (SELECT 1 FROM belay_deliveries d WHERE d.session = s.id AND ` + holdsRetention + `),
	(SELECT max(d.settled_at) FROM belay_deliveries d WHERE d.session = s.id)
	FROM belay_sessions s`

// holdsRetention is belay.Delivery.HoldsRetention over belay_deliveries d:
// unsettled, and not an outcome notice no consumer ever took.
const holdsRetention = `d.status IN ('pending', 'leased') AND NOT (d.status = 'pending' AND d.attempts = 0
	AND d.addressee IS NULL AND d.type IN ('` + belay.DeliveryRunCompleted + `', '` + belay.DeliveryRunFailed + `', '` + belay.DeliveryRunStranded + `'))`

func scanFacts(row pgx.Row) (pruneFacts, error) {
	var f pruneFacts
	err := row.Scan(&f.id, &f.last, &f.active, &f.failed, &f.unsettled, &f.lastSettled)
	f.last = f.last.UTC()
	return f, err
}

// verdict applies the retention rules of store.PrunePolicy (the same as
// fsstore's).
func (f pruneFacts) verdict(p store.PrunePolicy, now time.Time) (bool, string) {
	switch {
	case f.active:
		return false, "active run"
	case f.unsettled:
		return false, "unsettled delivery"
	case f.lastSettled != nil && now.Sub(*f.lastSettled) < p.Grace:
		return false, "delivery settled within grace"
	}
	keep, outcome := p.KeepComplete, "complete"
	if f.failed {
		keep, outcome = p.KeepFailed, "failed"
	}
	if now.Sub(f.last) < keep {
		return false, "young"
	}
	return true, fmt.Sprintf("%s, idle longer than %s", outcome, keep)
}

// Prune deletes terminal sessions by age policy (G12). Each deletion
// re-checks the verdict under the session's lock.
func (s *Store) Prune(ctx context.Context, p store.PrunePolicy) (belay.PruneReport, error) {
	p = p.WithDefaults()
	rep := belay.PruneReport{DryRun: p.DryRun, Pruned: []belay.PrunedSession{}}
	if s.isClosed() {
		return rep, belay.ErrStoreClosed
	}
	var now time.Time
	if err := s.pool.QueryRow(ctx, `SELECT coalesce($1::timestamptz, now())`, s.nowArg()).Scan(&now); err != nil {
		return rep, s.wrap(err)
	}
	now = now.UTC()
	rows, err := s.pool.Query(ctx, pruneFactsQuery+` ORDER BY s.created_at DESC, s.id DESC`)
	if err != nil {
		return rep, s.wrap(err)
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (pruneFacts, error) { return scanFacts(r) })
	if err != nil {
		return rep, s.wrap(err)
	}
	for _, f := range all {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		ok, rule := f.verdict(p, now)
		if !ok {
			rep.Kept++
			continue
		}
		item := belay.PrunedSession{ID: f.id, LastActive: f.last, Age: now.Sub(f.last), Rule: rule}
		if err := s.pool.QueryRow(ctx, `SELECT coalesce(sum(octet_length(data::text)), 0) FROM belay_events WHERE session = $1`, f.id).Scan(&item.Bytes); err != nil {
			return rep, s.wrap(err)
		}
		if !p.DryRun {
			pruned := false
			err := s.withSession(ctx, f.id, belay.Sync, func(t *tx) error {
				again, err := scanFacts(t.QueryRow(ctx, pruneFactsQuery+` WHERE s.id = $1`, f.id))
				if err != nil {
					return err
				}
				if ok, _ := again.verdict(p, now); !ok {
					return nil
				}
				err = deleteSession(t, f.id)
				pruned = err == nil
				return err
			})
			if errors.Is(err, belay.ErrNotFound) {
				continue // another node pruned it meanwhile
			}
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
		if err := s.trimChanges(ctx); err != nil {
			return rep, err
		}
		// Owners gone for good: none of their leases is on a live run.
		if _, err := s.pool.Exec(ctx, `DELETE FROM belay_owners o WHERE o.expires_at < $1::timestamptz - $2::interval
			AND NOT EXISTS (SELECT 1 FROM belay_runs r WHERE r.lease_owner = o.id AND r.status IN ('queued', 'running'))`,
			now, store.OwnerRecordKeep); err != nil {
			return rep, s.wrap(err)
		}
	}
	return rep, nil
}
