package runtime

import (
	"context"

	"github.com/belayhq/belay/store"
)

// Prune deletes terminal sessions by the retention policy (G12): never one
// with an active run, an unsettled delivery, or a delivery settled within
// the grace window.
func (r *Runtime) Prune(ctx context.Context, dryRun bool) (store.PruneReport, error) {
	p := r.opts.Retention
	p.DryRun = dryRun
	return r.store.Prune(ctx, p)
}
