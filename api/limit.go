package api

import (
	"container/list"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/belayhq/belay/apitype"
	"github.com/prometheus/client_golang/prometheus"
)

// Connection limits: a daemon never runs out of file descriptors because
// of its clients, and an idle or slow client cannot keep others out.
const (
	// DefaultBodyTimeout bounds the time to read a request body.
	DefaultBodyTimeout = 30 * time.Second
	// DefaultIdleTimeout closes a keep-alive connection idle this long.
	DefaultIdleTimeout = 60 * time.Second
	// DefaultWriteTimeout bounds a response write beyond the wait a request
	// asked for; a stream must make progress within it at each write.
	DefaultWriteTimeout = 30 * time.Second
	// RetryAfter is what a 503 overloaded answer asks clients to wait.
	RetryAfter = time.Second
)

// ConnLimits derives the connection and watcher caps from the process's
// file descriptor limit: connections take at most half of it (the rest is
// for journals, providers and logs), watchers (SSE streams and long polls)
// at most half of the connections, so short requests such as /healthz
// always find room.
func ConnLimits(nofile uint64) (conns, watchers int) {
	conns = int(min(nofile/2, 16384))
	conns = max(conns, 8)
	return conns, max(conns/2, 1)
}

// ConnLimiter caps the connections of one or more listeners. At the cap a
// new connection takes the place of the one idle longest (between requests,
// or connected without a complete request yet); when every connection is
// busy it is answered 503 overloaded with Retry-After and closed.
type ConnLimiter struct {
	max int

	mu    sync.Mutex
	conns map[net.Conn]*connEntry // every open connection
	idle  *list.List              // evictable ones (*connEntry), longest idle first

	rejecting atomic.Int32
	evicted   atomic.Int64
	rejected  atomic.Int64
}

type connEntry struct {
	c    net.Conn
	elem *list.Element // in idle, or nil while a request is being served
}

// NewConnLimiter returns a limiter of max connections.
func NewConnLimiter(max int) *ConnLimiter {
	return &ConnLimiter{max: max, conns: map[net.Conn]*connEntry{}, idle: list.New()}
}

// Stats reports open connections, and connections evicted and rejected
// since the start.
func (cl *ConnLimiter) Stats() (open int, evicted, rejected int64) {
	cl.mu.Lock()
	open = len(cl.conns)
	cl.mu.Unlock()
	return open, cl.evicted.Load(), cl.rejected.Load()
}

// Listener wraps l so that it stays within the limit. The http.Server
// serving it must report to ConnState.
func (cl *ConnLimiter) Listener(l net.Listener) net.Listener {
	return &limitListener{Listener: l, cl: cl}
}

type limitListener struct {
	net.Listener
	cl *ConnLimiter
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.cl.admit(c) {
			return c, nil
		}
		l.cl.reject(c)
	}
}

// admit counts c in, evicting the longest idle connection at the cap.
func (cl *ConnLimiter) admit(c net.Conn) bool {
	cl.mu.Lock()
	var victim net.Conn
	if len(cl.conns) >= cl.max {
		front := cl.idle.Front()
		if front == nil {
			cl.mu.Unlock()
			return false
		}
		victim = front.Value.(*connEntry).c
		cl.forget(victim)
	}
	ent := &connEntry{c: c}
	ent.elem = cl.idle.PushBack(ent)
	cl.conns[c] = ent
	cl.mu.Unlock()
	if victim != nil {
		cl.evicted.Add(1)
		_ = victim.Close()
	}
	return true
}

// forget drops c from the books. cl.mu is held.
func (cl *ConnLimiter) forget(c net.Conn) {
	if ent, ok := cl.conns[c]; ok {
		if ent.elem != nil {
			cl.idle.Remove(ent.elem)
		}
		delete(cl.conns, c)
	}
}

// ConnState is the http.Server's ConnState hook.
func (cl *ConnLimiter) ConnState(c net.Conn, s http.ConnState) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	ent, ok := cl.conns[c]
	if !ok {
		return
	}
	switch s {
	case http.StateActive:
		if ent.elem != nil {
			cl.idle.Remove(ent.elem)
			ent.elem = nil
		}
	case http.StateIdle:
		if ent.elem == nil {
			ent.elem = cl.idle.PushBack(ent)
		}
	case http.StateClosed, http.StateHijacked:
		cl.forget(c)
	}
}

// maxRejecting bounds the connections being answered 503 at once; beyond
// it a connection is closed without an answer.
const maxRejecting = 64

// reject answers 503 overloaded on a connection that was never served and
// closes it. The request is read (briefly) first, so that closing does not
// reset the connection before the client reads the answer.
func (cl *ConnLimiter) reject(c net.Conn) {
	cl.rejected.Add(1)
	if cl.rejecting.Add(1) > maxRejecting {
		cl.rejecting.Add(-1)
		_ = c.Close()
		return
	}
	go func() {
		defer cl.rejecting.Add(-1)
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(time.Second))
		_, _ = c.Read(make([]byte, 4096))
		body, _ := json.Marshal(apitype.Error{Error: apitype.ErrorBody{Code: apitype.CodeOverloaded, Message: fmt.Sprintf(
			"the daemon is at its limit of %d connections; retry in %s", cl.max, RetryAfter)}})
		fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: %d\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
			int(RetryAfter/time.Second), len(body), body)
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
			_, _ = io.Copy(io.Discard, io.LimitReader(c, 64<<10))
		}
	}()
}

// watchers is a semaphore of SSE streams and long polls.
type watchers chan struct{}

// acquire takes a watcher slot, or answers 503 overloaded.
func (s *Server) acquireWatcher(w http.ResponseWriter) (release func(), ok bool) {
	select {
	case s.watchers <- struct{}{}:
		return func() { <-s.watchers }, true
	default:
		writeOverloaded(w, fmt.Sprintf("the daemon is at its limit of %d watchers (streams and long polls); retry in %s", cap(s.watchers), RetryAfter))
		return nil, false
	}
}

func writeOverloaded(w http.ResponseWriter, msg string) {
	w.Header().Set("Retry-After", strconv.Itoa(int(RetryAfter/time.Second)))
	writeErrorCode(w, http.StatusServiceUnavailable, apitype.CodeOverloaded, msg, nil)
}

// deadlines bounds a request's body read and its response writes: the body
// must arrive within BodyTimeout, and the response within the longest wait
// a request may ask for plus DefaultWriteTimeout. Streams (SSE, answers,
// transcripts) set their own per-write deadlines. (net/http clears the
// read deadline once the body is read, so a long poll is not cut by it.)
func (s *Server) deadlines(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		_ = rc.SetWriteDeadline(time.Now().Add(MaxWait + DefaultWriteTimeout))
		if r.Body != nil && r.Body != http.NoBody {
			_ = rc.SetReadDeadline(time.Now().Add(s.opts.BodyTimeout))
		}
		next.ServeHTTP(w, r)
	})
}

// Connections adds the limiter's gauges and counters to the metrics:
// belay_connections, belay_connections_max, and
// belay_connections_evicted_total / belay_connections_rejected_total.
func (m *Metrics) Connections(cl *ConnLimiter) { m.reg.MustRegister(connCollector{cl}) }

type connCollector struct{ cl *ConnLimiter }

var (
	descConns    = prometheus.NewDesc("belay_connections", "Open client connections.", nil, nil)
	descConnsMax = prometheus.NewDesc("belay_connections_max", "The cap on client connections.", nil, nil)
	descEvicted  = prometheus.NewDesc("belay_connections_evicted_total", "Idle connections closed to make room at the cap.", nil, nil)
	descRejected = prometheus.NewDesc("belay_connections_rejected_total", "Connections answered 503 overloaded at the cap.", nil, nil)
)

func (c connCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descConns
	ch <- descConnsMax
	ch <- descEvicted
	ch <- descRejected
}

func (c connCollector) Collect(ch chan<- prometheus.Metric) {
	open, evicted, rejected := c.cl.Stats()
	ch <- prometheus.MustNewConstMetric(descConns, prometheus.GaugeValue, float64(open))
	ch <- prometheus.MustNewConstMetric(descConnsMax, prometheus.GaugeValue, float64(c.cl.max))
	ch <- prometheus.MustNewConstMetric(descEvicted, prometheus.CounterValue, float64(evicted))
	ch <- prometheus.MustNewConstMetric(descRejected, prometheus.CounterValue, float64(rejected))
}
