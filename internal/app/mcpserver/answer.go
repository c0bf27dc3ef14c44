package mcpserver

import (
	"context"
	"unicode/utf8"

	"github.com/belayhq/belay"
)

// answerPage reads bytes [off, off+limit) of a run's answer as it is now
// (the daemon's GET /v1/runs/{id}/answer: the text of the last attempt)
// and the answer's length. The answer is streamed through a window, so
// memory does not grow with it; a stream that does not end whole fails
// (G14), never passing part of an answer off as all of it.
func (s *Server) answerPage(ctx context.Context, run belay.Run, off, limit int) (string, int, error) {
	w := &window{off: off, end: off + max(limit, 0)}
	if err := s.c.Answer(ctx, run.ID, w); err != nil {
		return "", 0, err
	}
	return cut(w.buf), w.total, nil
}

// window keeps the bytes [off, end) of what is written and counts it all.
type window struct {
	off, end, total int
	buf             []byte
}

func (w *window) Write(p []byte) (int, error) {
	start := w.total
	w.total += len(p)
	if lo, hi := max(start, w.off), min(w.total, w.end); lo < hi {
		w.buf = append(w.buf, p[lo-start:hi-start]...)
	}
	return len(p), nil
}

// cut drops a rune split at either end of the window.
func cut(b []byte) string {
	for len(b) > 0 && !utf8.RuneStart(b[0]) {
		b = b[1:]
	}
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.Valid(b[i:]) {
				b = b[:i]
			}
			break
		}
	}
	return string(b)
}
