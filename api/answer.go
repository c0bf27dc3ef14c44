package api

import (
	"bufio"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/internal/ids"
	"github.com/belayhq/belay/runtime"
)

// answer serves GET /v1/runs/{id}/answer: the run's answer text as it is
// now (text/plain), streamed from the journal in bounded memory, ending
// with the Belay-Status trailer. It stops when the client goes away.
func (s *Server) answer(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, ids.Run)
	if !ok {
		return
	}
	run, err := s.st.Run(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Belay-Run-Status", string(run.Status))
	stream(w, r, func(sw *streamWriter) error {
		// Deltas are small; the connection gets them in 64 KiB writes.
		bw := bufio.NewWriterSize(sw, 64<<10)
		if err := runtime.WriteAnswer(r.Context(), s.st, run, bw); err != nil {
			return err
		}
		return bw.Flush()
	})
}

// stream runs write, which writes a body of any length, and ends it with
// the status trailers, and the trailers named in more if write set them.
// An error before any byte of the body is an ordinary error response.
func stream(w http.ResponseWriter, r *http.Request, write func(*streamWriter) error, more ...string) {
	w.Header().Set("Trailer", strings.Join(append([]string{apitype.TrailerStatus, apitype.TrailerError}, more...), ", "))
	sw := &streamWriter{w: w, rc: http.NewResponseController(w)}
	err := write(sw)
	switch {
	case err == nil:
		w.Header().Set(apitype.TrailerStatus, "ok")
	case sw.n == 0 && r.Context().Err() == nil && !errors.Is(err, errClientGone):
		w.Header().Del("Trailer")
		for _, k := range more {
			w.Header().Del(k)
		}
		writeError(w, err)
	default:
		_, code := statusOf(err)
		body, _ := json.Marshal(apitype.ErrorBody{Code: code, Message: errorMessage(err)})
		w.Header().Set(apitype.TrailerStatus, "error")
		w.Header().Set(apitype.TrailerError, string(body))
	}
}

// errClientGone is a write to a client that went away.
var errClientGone = errors.New("api: the client went away")

// streamWriter counts what was written, and turns a failed write into
// errClientGone so the writer stops.
type streamWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
	n  int64
}

func (sw *streamWriter) Write(p []byte) (int, error) {
	// Each write must get through within the write timeout: a client that
	// stops reading is let go.
	_ = sw.rc.SetWriteDeadline(time.Now().Add(DefaultWriteTimeout))
	n, err := sw.w.Write(p)
	sw.n += int64(n)
	if err != nil {
		return n, errClientGone
	}
	return n, nil
}
