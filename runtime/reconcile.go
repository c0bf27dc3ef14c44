package runtime

import (
	"context"
	"time"
)

// startRetention prunes by policy now and then until ctx ends (G12).
func (r *Runtime) startRetention(ctx context.Context) {
	if r.opts.PruneEvery < 0 {
		return
	}
	var tick func()
	tick = func() {
		r.mu.Lock()
		if r.stopping || ctx.Err() != nil {
			r.mu.Unlock()
			return
		}
		r.wg.Add(1)
		r.mu.Unlock()
		go func() {
			defer r.wg.Done()
			if _, err := r.Prune(ctx, false); err != nil && ctx.Err() == nil {
				r.log.Warn("prune", "err", err)
			}
			r.clk.AfterFunc(r.opts.PruneEvery, tick)
		}()
	}
	r.clk.AfterFunc(time.Minute, tick)
}
