package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/internal/ids"
)

// maxEventsPage caps the events of one long-poll response, and
// maxPageBytes their data: a page of large events (up to a journal record
// each) stays small, and holds at least one event.
const (
	maxEventsPage = 1000
	maxPageBytes  = 4 << 20
)

// eventsPage reads up to limit events after seq after, stopping early once
// their data passes maxPageBytes; full says it stopped before the end.
func (s *Server) eventsPage(ctx context.Context, session string, after uint64, limit int) (out []belay.Event, full bool, err error) {
	size := 0
	err = s.st.ScanEvents(ctx, session, after, func(e belay.Event) error {
		e.Data = append(json.RawMessage(nil), e.Data...) // valid only during the call
		out = append(out, e)
		size += len(e.Data)
		if len(out) >= limit || size >= maxPageBytes {
			return errPageFull
		}
		return nil
	})
	if errors.Is(err, errPageFull) {
		return out, true, nil
	}
	return out, false, err
}

var errPageFull = errors.New("api: page full")

// events serves GET /v1/sessions/{id}/events: a long-poll JSON page of the
// events after ?after=N, or, with Accept: text/event-stream, an SSE stream
// whose ids are seqs, resumable with Last-Event-ID (G2).
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, ids.Session)
	if !ok {
		return
	}
	q := r.URL.Query()
	var after uint64
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeErrorCode(w, http.StatusBadRequest, apitype.CodeInvalid, "after must be a seq (a non-negative integer)", nil)
			return
		}
		after = n
	}
	if _, err := s.st.Session(r.Context(), id); err != nil {
		writeError(w, err)
		return
	}
	if strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		if v := r.Header.Get("Last-Event-ID"); v != "" {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			if err != nil {
				writeErrorCode(w, http.StatusBadRequest, apitype.CodeInvalid, "Last-Event-ID must be a seq", nil)
				return
			}
			after = n
		}
		release, ok := s.acquireWatcher(w)
		if !ok {
			return
		}
		defer release()
		s.sse(w, r, id, after)
		return
	}
	limit := maxEventsPage
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			writeErrorCode(w, http.StatusBadRequest, apitype.CodeInvalid, "limit must be a positive integer", nil)
			return
		}
		limit = min(n, maxEventsPage)
	}
	wait, ok := waitFor(w, r, "wait")
	if !ok {
		return
	}
	evs, _, err := s.eventsPage(r.Context(), id, after, limit)
	if err == nil && len(evs) == 0 && wait > 0 {
		release, ok := s.acquireWatcher(w)
		if !ok {
			return
		}
		defer release()
		ctx, cancel := context.WithTimeout(r.Context(), wait)
		werr := s.st.WaitEvents(ctx, id, after)
		cancel()
		if werr == nil {
			evs, _, err = s.eventsPage(r.Context(), id, after, limit)
		} else if r.Context().Err() == nil && !errors.Is(werr, context.DeadlineExceeded) {
			err = werr
		}
	}
	if err != nil && len(evs) == 0 {
		writeError(w, err)
		return
	}
	sess, serr := s.st.Session(r.Context(), id)
	if serr != nil {
		writeError(w, serr)
		return
	}
	if evs == nil {
		evs = []belay.Event{}
	}
	writeJSON(w, http.StatusOK, apitype.EventList{Events: evs, LastSeq: sess.LastSeq, State: sess.State})
}

// sse streams events as Server-Sent Events until the client goes away or
// the daemon stops, with keepalive comments between events.
func (s *Server) sse(w http.ResponseWriter, r *http.Request, session string, after uint64) {
	// Joined before the headers go out: a session that cannot be followed
	// gets a plain error response, and a client that has the headers is
	// following the hub.
	h, leave, err := s.joinHub(session)
	if err != nil {
		writeError(w, err)
		return
	}
	defer leave()
	rc := http.NewResponseController(w)
	// Each write must get through within the write timeout; between them
	// the stream may last as long as the client stays.
	extend := func() { _ = rc.SetWriteDeadline(time.Now().Add(DefaultWriteTimeout)) }
	extend()
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-cache")
	hd.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "retry: 1000\n\n")
	if err := rc.Flush(); err != nil {
		return
	}
	ctx := r.Context()
	keepalive := time.NewTimer(s.opts.Keepalive)
	defer keepalive.Stop()
	for {
		fs, herr, changed, behind := h.since(after)
		if behind {
			// Not in the hub (yet, or any more): from the store.
			evs, full, err := s.eventsPage(ctx, session, after, maxEventsPage)
			extend()
			for _, e := range evs {
				b, merr := sseFrame(e)
				if merr != nil {
					return
				}
				if _, werr := w.Write(b); werr != nil {
					return
				}
				after = e.Seq
			}
			if len(evs) > 0 && rc.Flush() != nil {
				return
			}
			if err != nil {
				sseError(w, rc, err) // a damaged or failed session: say so once, then end
				return
			}
			if full || len(evs) > 0 {
				continue
			}
			// Nothing after it in the store, though the hub started past
			// it: the session was removed, which the hub reports.
		} else if len(fs) > 0 {
			extend()
			for _, f := range fs {
				if _, werr := w.Write(f.b); werr != nil {
					return
				}
			}
			after = fs[len(fs)-1].seq
			if rc.Flush() != nil {
				return
			}
		}
		if herr != nil {
			if !errors.Is(herr, belay.ErrStoreClosed) {
				sseError(w, rc, herr)
			}
			return // stopping: the client reconnects with Last-Event-ID
		}
		if len(fs) > 0 {
			continue // more may have come while these were written
		}
		keepalive.Reset(s.opts.Keepalive)
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-keepalive.C:
			extend()
			if _, err := fmt.Fprintf(w, ": keepalive %s\n\n", time.Now().UTC().Format(time.RFC3339)); err != nil {
				return
			}
			if rc.Flush() != nil {
				return
			}
		}
	}
}

// sseError ends a stream with an error event.
func sseError(w http.ResponseWriter, rc *http.ResponseController, err error) {
	_, code := statusOf(err)
	body, _ := json.Marshal(apitype.ErrorBody{Code: code, Message: errorMessage(err)})
	// The stream ends here either way: a client that cannot take the
	// error event sees the stream end.
	_, _ = fmt.Fprintf(w, "event: error\ndata: %s\n\n", body)
	_ = rc.Flush()
}
