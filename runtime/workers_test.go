package runtime

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func (w *workers) idleCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.idle)
}

func TestWorkersReuseAnIdleGoroutine(t *testing.T) {
	var w workers
	defer w.stop()
	done := make(chan struct{})
	w.run(func() { close(done) })
	<-done
	require.Eventually(t, func() bool { return w.idleCount() == 1 }, 10*time.Second, time.Millisecond)

	// The idle worker takes the next function: none is left idle while it runs.
	release := make(chan struct{})
	ran := make(chan struct{})
	w.run(func() { close(ran); <-release })
	<-ran
	require.Equal(t, 0, w.idleCount())
	close(release)
	require.Eventually(t, func() bool { return w.idleCount() == 1 }, 10*time.Second, time.Millisecond)
}

func TestWorkersKeepAtMostTheirBound(t *testing.T) {
	var w workers
	defer w.stop()
	release := make(chan struct{})
	var started, finished sync.WaitGroup
	n := maxIdleWorkers + 10
	started.Add(n)
	finished.Add(n)
	for range n {
		w.run(func() {
			started.Done()
			<-release
			finished.Done()
		})
	}
	started.Wait() // all n at once: n goroutines
	require.Equal(t, 0, w.idleCount())
	close(release)
	finished.Wait()
	require.Eventually(t, func() bool { return w.idleCount() == maxIdleWorkers }, 10*time.Second, time.Millisecond)
}

func TestWorkersStop(t *testing.T) {
	var w workers
	var wg sync.WaitGroup
	wg.Add(3)
	for range 3 {
		w.run(wg.Done)
	}
	wg.Wait()
	require.Eventually(t, func() bool { return w.idleCount() >= 1 }, 10*time.Second, time.Millisecond)
	w.stop() // returns once the idle workers are gone (goleak checks the rest)
	require.Equal(t, 0, w.idleCount())

	// After stop a function still runs, on a goroutine of its own that
	// is not kept.
	done := make(chan struct{})
	w.run(func() { close(done) })
	<-done
	w.wg.Wait()
	require.Equal(t, 0, w.idleCount())
}

// A worker busy when the pool is closed ends with its function instead
// of waiting for another (Stop whose ctx ran out before the runners).
func TestWorkersCloseEndsBusyOnes(t *testing.T) {
	var w workers
	release := make(chan struct{})
	ran := make(chan struct{})
	w.run(func() { close(ran); <-release })
	<-ran
	w.close()
	close(release)
	w.wg.Wait() // would hang if the worker parked as idle
	require.Equal(t, 0, w.idleCount())
}

// deep uses about n KB of stack.
//
//go:noinline
func deep(n int) byte {
	var pad [1024]byte
	pad[n%len(pad)] = byte(n)
	if n == 0 {
		return pad[0]
	}
	return deep(n-1) + pad[n%len(pad)]
}

// BenchmarkRunnerGoroutine compares a new goroutine per run with a kept
// one, for a run that takes its stack to about 48 KB (a runner's depth).
func BenchmarkRunnerGoroutine(b *testing.B) {
	b.Run("new", func(b *testing.B) {
		var wg sync.WaitGroup
		for b.Loop() {
			wg.Add(1)
			go func() { defer wg.Done(); deep(48) }()
			wg.Wait()
		}
	})
	b.Run("kept", func(b *testing.B) {
		var w workers
		defer w.stop()
		var wg sync.WaitGroup
		for b.Loop() {
			wg.Add(1)
			w.run(func() { defer wg.Done(); deep(48) })
			wg.Wait()
		}
	})
}
