package runtime

import "sync"

// maxIdleWorkers bounds the goroutines kept waiting for a next runner.
const maxIdleWorkers = 256

// workers runs each runner on a goroutine kept from an earlier runner when
// one is idle. A runner's calls (the provider, the store, JSON) take its
// stack to tens of KB; a new goroutine starts small and copies its stack
// each time it doubles, which cost about 4 % of the CPU of a no-op run
// (docs/performance.md). A kept goroutine has its stack already grown
// (the collector shrinks the stacks of those that stay idle).
type workers struct {
	mu      sync.Mutex
	idle    []chan func() // each an idle worker's, buffered 1
	stopped bool
	wg      sync.WaitGroup // the workers
}

// run runs f on an idle worker, or a new one.
func (w *workers) run(f func()) {
	w.mu.Lock()
	if n := len(w.idle); n > 0 && !w.stopped {
		ch := w.idle[n-1]
		w.idle = w.idle[:n-1]
		w.mu.Unlock()
		ch <- f // never blocks: the channel is the worker's alone, and empty
		return
	}
	w.wg.Add(1)
	w.mu.Unlock()
	go w.loop(f)
}

func (w *workers) loop(f func()) {
	defer w.wg.Done()
	ch := make(chan func(), 1)
	for {
		f()
		f = nil // nothing of the last runner stays reachable while idle
		w.mu.Lock()
		if w.stopped || len(w.idle) >= maxIdleWorkers {
			w.mu.Unlock()
			return
		}
		w.idle = append(w.idle, ch)
		w.mu.Unlock()
		var ok bool
		if f, ok = <-ch; !ok {
			return
		}
	}
}

// close ends the idle workers; a busy one ends when its runner does,
// instead of waiting for another. run still works after close, each f on
// a goroutine of its own.
func (w *workers) close() {
	w.mu.Lock()
	w.stopped = true
	for _, ch := range w.idle {
		close(ch)
	}
	w.idle = nil
	w.mu.Unlock()
}

// stop closes the workers and waits until all have ended: call it once
// the runners have returned.
func (w *workers) stop() {
	w.close()
	w.wg.Wait()
}
