package api

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"

	"github.com/belayhq/belay"
)

// A hub follows one session for all of its SSE subscribers: each new
// event is read from the store once and encoded once, then written to
// every subscriber from memory. Without it, a thousand subscribers of one
// session meant a thousand store reads and encodings of every event.
//
// The store stays the truth: the hub keeps only the latest frames (hubKeep,
// hubKeepBytes), from the session's last event when the hub started. A
// subscriber behind them (resuming with Last-Event-ID, or too slow to keep
// up) reads from the store, as every subscriber did before, until it
// reaches what the hub holds. A subscriber therefore sees every event once,
// in seq order, whichever path served it.
type hub struct {
	session string
	refs    int                // subscribers; guarded by hubs.mu
	stop    context.CancelFunc // ends the follower

	mu      sync.Mutex
	frames  []frame // consecutive seqs, oldest first
	bytes   int
	base    uint64        // the seq before frames[0] (or before the next frame)
	err     error         // a read or wait error: streams end with it
	changed chan struct{} // closed when frames or err change
	ended   bool          // err is set: the follower stopped

	keep, keepBytes int // how many frames, and bytes, it holds at most
}

// frame is one event encoded as an SSE message.
type frame struct {
	seq uint64
	b   []byte
}

// How much a hub keeps by default: a subscriber further behind reads the
// store.
const (
	defaultHubKeep      = 1024
	defaultHubKeepBytes = 4 << 20
)

// hubs are the hubs of the sessions being streamed.
type hubs struct {
	mu sync.Mutex
	m  map[string]*hub
}

// joinHub returns the hub of a session, started if none follows it yet,
// and a func that leaves it (the last to leave stops it).
func (s *Server) joinHub(session string) (*hub, func(), error) {
	h := s.hubs.join(session, nil)
	if h == nil {
		// The hub starts at the session's last event: what came before is
		// read from the store by whoever asks for it. (Read unlocked: the
		// other sessions' streams need not wait for it.)
		sess, err := s.st.Session(context.Background(), session)
		if err != nil {
			return nil, nil, err
		}
		h = s.hubs.join(session, func() *hub {
			ctx, stop := context.WithCancel(context.Background())
			h := &hub{session: session, stop: stop, base: sess.LastSeq, changed: make(chan struct{}),
				keep: s.hubKeep, keepBytes: defaultHubKeepBytes}
			s.hubWG.Go(func() { s.follow(ctx, h) })
			return h
		})
	}
	return h, func() { s.hubs.leave(h) }, nil
}

// join counts a subscriber in the session's hub; with none, it starts one
// with start if start is not nil, else returns nil.
func (hs *hubs) join(session string, start func() *hub) *hub {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	h := hs.m[session]
	if h != nil && h.hasEnded() {
		// Its subscribers end with its error; a new one starts afresh
		// (the store may be back).
		h = nil
	}
	if h == nil {
		if start == nil {
			return nil
		}
		h = start()
		if hs.m == nil {
			hs.m = map[string]*hub{}
		}
		hs.m[session] = h
	}
	h.refs++
	return h
}

// leave uncounts a subscriber; the last one stops the hub.
func (hs *hubs) leave(h *hub) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if h.refs--; h.refs == 0 {
		if hs.m[h.session] == h {
			delete(hs.m, h.session)
		}
		h.stop()
	}
}

func (h *hub) hasEnded() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ended
}

// follow reads the session's new events into the hub until ctx ends or a
// read fails.
func (s *Server) follow(ctx context.Context, h *hub) {
	h.mu.Lock()
	after := h.base
	h.mu.Unlock()
	for {
		evs, full, err := s.eventsPage(ctx, h.session, after, maxEventsPage)
		if ctx.Err() != nil {
			return
		}
		fs := make([]frame, 0, len(evs))
		for _, e := range evs {
			b, merr := sseFrame(e)
			if merr != nil {
				err = merr
				break
			}
			fs = append(fs, frame{seq: e.Seq, b: b})
			after = e.Seq
		}
		h.publish(fs, err)
		if err != nil {
			return
		}
		if full {
			continue
		}
		if werr := s.st.WaitEvents(ctx, h.session, after); werr != nil {
			if ctx.Err() == nil {
				h.publish(nil, werr)
			}
			return
		}
	}
}

// sseFrame encodes an event as an SSE message whose id is its seq.
func sseFrame(e belay.Event) ([]byte, error) {
	data, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	return fmt.Appendf(make([]byte, 0, len(data)+len(e.Type)+40), "id: %d\nevent: %s\ndata: %s\n\n", e.Seq, e.Type, data), nil
}

// publish adds frames (and an error that ends the streams) and wakes the
// subscribers.
func (h *hub) publish(fs []frame, err error) {
	if len(fs) == 0 && err == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, f := range fs {
		h.frames = append(h.frames, f)
		h.bytes += len(f.b)
	}
	drop := 0
	for len(h.frames)-drop > h.keep || h.bytes > h.keepBytes && len(h.frames)-drop > 1 {
		h.bytes -= len(h.frames[drop].b)
		h.base = h.frames[drop].seq
		drop++
	}
	if drop > 0 {
		// A new slice: subscribers may still be writing the old one.
		h.frames = append([]frame(nil), h.frames[drop:]...)
	}
	if err != nil {
		h.err, h.ended = err, true
	}
	close(h.changed)
	h.changed = make(chan struct{})
}

// since returns the frames after seq after, the hub's error, and a channel
// closed at the next change. behind says the hub does not hold the events
// right after after (it started later, or dropped them since): read them
// from the store.
func (h *hub) since(after uint64) (fs []frame, err error, changed <-chan struct{}, behind bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if after < h.base {
		return nil, nil, h.changed, true
	}
	// The follower reads every event after base, so the frames are all
	// there is after base.
	i := sort.Search(len(h.frames), func(i int) bool { return h.frames[i].seq > after })
	return h.frames[i:], h.err, h.changed, false
}
