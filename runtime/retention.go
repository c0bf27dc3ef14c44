package runtime

import (
	"context"
	"fmt"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/store"
)

// Prune deletes terminal sessions by the retention policy (G12): never one
// with an active run, an unsettled delivery, or a delivery settled within
// the grace window.
func (r *Runtime) Prune(ctx context.Context, dryRun bool) (belay.PruneReport, error) {
	p := r.opts.Retention
	p.DryRun = dryRun
	rep, err := r.store.Prune(ctx, p)
	if !dryRun {
		for _, s := range rep.Pruned {
			r.forgetSession(s.ID)
		}
	}
	return rep, err
}

// DeleteSession deletes one session now (store.SessionDeleter): one with a
// queued or running run, or (unless force) an unsettled delivery, is
// refused unless its journal is damaged, missing or empty.
func (r *Runtime) DeleteSession(ctx context.Context, id string, force bool) error {
	d, ok := r.store.(store.SessionDeleter)
	if !ok {
		return fmt.Errorf("%w: this store does not delete single sessions", belay.ErrInvalid)
	}
	// Forgotten whatever the outcome: a failed delete may have deleted.
	defer r.forgetSession(id)
	return d.DeleteSession(ctx, id, force)
}
