package lock

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrStopped is the cause a Heartbeater reports after Stop.
var ErrStopped = errors.New("lock: heartbeater stopped")

// HeartbeatOptions configures a Heartbeater.
type HeartbeatOptions struct {
	// Interval between heartbeats. Default TTL/3, so two consecutive
	// failures still leave time before expiry.
	Interval time.Duration
	// Timeout bounds each heartbeat, including the wait for the reclaim
	// guard. Default Interval.
	Timeout time.Duration
	// OnLost is called once, on the heartbeat goroutine, when a heartbeat
	// finds the lock lost (the error wraps ErrLost), or when heartbeats
	// failed for TTL-FenceMargin so that the holder is fenced (the error
	// wraps ErrFenced). The goroutine then exits. It must not block, and
	// must not call Stop synchronously.
	OnLost func(error)
	// OnError is called, on the heartbeat goroutine, for each heartbeat
	// that failed without losing the lock (I/O error, guard timeout); the
	// next tick retries. Optional.
	OnError func(error)
}

// Heartbeater renews a held Lock in the background. It is a service:
// Start does not block, Stop is idempotent, safe before Start, and waits
// for the goroutine. It never releases the lock; call Lock.Release after
// Stop.
type Heartbeater struct {
	lock *Lock
	opts HeartbeatOptions
	lost chan struct{}
	done chan struct{}

	mu     sync.Mutex
	state  int // 0 new, 1 running, 2 stopped
	cancel context.CancelCauseFunc
	err    error // why the loop ended; written before done is closed
}

const (
	hbNew = iota
	hbRunning
	hbStopped
)

// NewHeartbeater returns a stopped Heartbeater for l.
func NewHeartbeater(l *Lock, opts HeartbeatOptions) *Heartbeater {
	if opts.Interval <= 0 {
		opts.Interval = l.opts.TTL / 3
	}
	if opts.Timeout <= 0 {
		opts.Timeout = opts.Interval
	}
	return &Heartbeater{lock: l, opts: opts, lost: make(chan struct{}), done: make(chan struct{})}
}

// StartHeartbeat is NewHeartbeater followed by Start.
func (l *Lock) StartHeartbeat(ctx context.Context, opts HeartbeatOptions) (*Heartbeater, error) {
	h := NewHeartbeater(l, opts)
	if err := h.Start(ctx); err != nil {
		return nil, err
	}
	return h, nil
}

// Start begins heartbeating until Stop, ctx ends, or the lock is lost. It
// fails with ErrNotHeld if the Lock holds nothing, and if called twice or
// after Stop.
func (h *Heartbeater) Start(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch h.state {
	case hbRunning:
		return errors.New("lock: heartbeater already started")
	case hbStopped:
		return ErrStopped
	}
	if _, ok := h.lock.Owner(); !ok {
		return ErrNotHeld
	}
	ctx, h.cancel = context.WithCancelCause(ctx)
	h.state = hbRunning
	go h.run(ctx)
	return nil
}

// Stop ends heartbeating and waits for the goroutine, or for ctx.
func (h *Heartbeater) Stop(ctx context.Context) error {
	h.mu.Lock()
	if h.state == hbRunning {
		h.cancel(ErrStopped)
	}
	h.state = hbStopped
	started := h.cancel != nil
	h.mu.Unlock()
	if !started {
		return nil
	}
	select {
	case <-h.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Lost is closed when a heartbeat found the lock lost.
func (h *Heartbeater) Lost() <-chan struct{} { return h.lost }

// Done is closed when the heartbeat goroutine has exited.
func (h *Heartbeater) Done() <-chan struct{} { return h.done }

// Err says why heartbeating ended: nil while it runs, ErrStopped after
// Stop, an error wrapping ErrLost after a loss, ErrNotHeld if the lock was
// released underneath it, or the cause of the Start context ending.
func (h *Heartbeater) Err() error {
	select {
	case <-h.done:
	case <-h.lost:
	default:
		return nil
	}
	return h.err
}

func (h *Heartbeater) run(ctx context.Context) {
	defer close(h.done)
	t := time.NewTicker(h.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			h.err = context.Cause(ctx)
			return
		case <-t.C:
		}
		hctx, cancel := context.WithTimeout(ctx, h.opts.Timeout)
		err := h.lock.Heartbeat(hctx)
		cancel()
		switch {
		case err == nil:
		case errors.Is(err, ErrLost):
			h.err = err
			close(h.lost)
			if h.opts.OnLost != nil {
				h.opts.OnLost(err)
			}
			return
		case errors.Is(err, ErrNotHeld):
			h.err = err
			return
		case ctx.Err() != nil:
			h.err = context.Cause(ctx)
			return
		default:
			if h.opts.OnError != nil {
				h.opts.OnError(err)
			}
			// Failing heartbeats cannot go on forever: once ownership has
			// been unproven for TTL-FenceMargin, the holder is fenced and
			// told, like a loss.
			ferr := h.lock.Check(ctx)
			if errors.Is(ferr, ErrNotHeld) {
				// Released while this heartbeat failed: not a loss.
				h.err = ErrNotHeld
				return
			}
			if errors.Is(ferr, ErrFenced) {
				h.err = ferr
				close(h.lost)
				if h.opts.OnLost != nil {
					h.opts.OnLost(ferr)
				}
				return
			}
		}
	}
}
