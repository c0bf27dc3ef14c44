package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// floorLink is one event of the floor's broadcast: its writers wait for
// done, then write frame and go on to next (both set before done closes).
type floorLink struct {
	frame []byte
	next  *floorLink
	done  chan struct{}
}

// fanoutFloor runs the latency phase's fan-out without belay: the same
// subscribers, events and interval over bare unix sockets in dir, a
// goroutine per stream woken by one broadcast (as the daemon's streams
// are by their session's hub) writing each event, frameSize bytes, to its
// socket, and a reader per stream timing each line from its send. No
// server can hand an event to that many streams with less than this
// write and read per stream, so it is the least the machine allows.
//
// It returns the latencies, each subscriber's in order.
func fanoutFloor(ctx context.Context, dir string, cfg FanoutConfig, frameSize int) ([]time.Duration, error) {
	ln, err := net.Listen("unix", filepath.Join(dir, "floor.sock"))
	if err != nil {
		return nil, fmt.Errorf("bench: floor: %w", err)
	}
	ctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	closeConns := func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}
	defer func() {
		stop()
		ln.Close()
		closeConns()
		wg.Wait()
	}()
	keep := func(c net.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		if ctx.Err() != nil {
			return false
		}
		conns = append(conns, c)
		return true
	}

	head := &floorLink{done: make(chan struct{})}
	var writing atomic.Int64
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if !keep(c) {
				c.Close()
				return
			}
			wg.Go(func() {
				l := head
				writing.Add(1)
				for {
					select {
					case <-l.done:
					case <-ctx.Done():
						return
					}
					if _, err := c.Write(l.frame); err != nil {
						return
					}
					l = l.next
				}
			})
		}
	})

	lat := make([][]time.Duration, cfg.Subscribers)
	errs := make(chan error, cfg.Subscribers)
	var readers sync.WaitGroup
	for i := range cfg.Subscribers {
		c, err := net.Dial("unix", ln.Addr().String())
		if err != nil {
			return nil, fmt.Errorf("bench: floor: %w", err)
		}
		if !keep(c) {
			c.Close()
			return nil, ctx.Err()
		}
		readers.Go(func() {
			r := bufio.NewReaderSize(c, 4096)
			for range cfg.Posts {
				line, err := r.ReadSlice('\n')
				now := time.Now()
				if err != nil {
					errs <- fmt.Errorf("bench: floor: subscriber %d: %w", i, err)
					return
				}
				sp := bytes.IndexByte(line, ' ')
				ns, err := strconv.ParseInt(string(line[:max(sp, 0)]), 10, 64)
				if err != nil {
					errs <- fmt.Errorf("bench: floor: subscriber %d: bad line %q", i, line)
					return
				}
				lat[i] = append(lat[i], now.Sub(time.Unix(0, ns)))
			}
		})
	}
	// Every writer must be waiting on the first event before it goes.
	deadline := time.Now().Add(2 * time.Minute)
	for writing.Load() < int64(cfg.Subscribers) {
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("bench: floor: only %d of %d streams connected", writing.Load(), cfg.Subscribers)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t := time.NewTicker(cfg.Interval)
	defer t.Stop()
	l := head
	for range cfg.Posts {
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		l.frame = floorFrame(time.Now(), frameSize)
		l.next = &floorLink{done: make(chan struct{})}
		close(l.done)
		l = l.next
	}
	done := make(chan struct{})
	go func() { readers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		stop()
		closeConns()
		<-done
		return nil, errors.New("bench: floor: the events did not all arrive within 2 minutes")
	}
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	return all, nil
}

// floorFrame is a line of size bytes (at least the time and a newline):
// the send time in Unix nanoseconds, padding, a newline.
func floorFrame(at time.Time, size int) []byte {
	b := strconv.AppendInt(nil, at.UnixNano(), 10)
	b = append(b, ' ')
	for len(b) < size-1 {
		b = append(b, 'x')
	}
	return append(b, '\n')
}
