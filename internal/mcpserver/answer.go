package mcpserver

import (
	"context"
	"encoding/json"
	"unicode/utf8"

	"github.com/belayhq/belay"
	brt "github.com/belayhq/belay/runtime"
	"github.com/belayhq/belay/store"
)

// answerPage reads bytes [off, off+max) of a run's answer (the text of its
// last attempt: a resumed attempt continues the text before it, one sent
// again replaces it) and the answer's length so far. It reads the journal
// a page of events at a time and keeps only the window, so memory does not
// grow with the answer.
func (s *Server) answerPage(ctx context.Context, run belay.Run, off, limit int) (string, int, error) {
	after := run.InputSeq
	if after > 0 {
		after--
	}
	var win []byte
	total := 0
	for {
		page, err := s.c.Events(ctx, run.Session, after, 1000, 0)
		if err != nil {
			return "", 0, err
		}
		for _, e := range page.Events {
			after = e.Seq
			if e.Run != run.ID {
				continue
			}
			switch e.Type {
			case store.EventRunUpdated:
				var u struct {
					Phase belay.RunPhase `json:"phase"`
					Data  struct {
						Attempt int  `json:"attempt"`
						Resume  bool `json:"resume"`
					} `json:"data"`
				}
				if json.Unmarshal(e.Data, &u) == nil {
					if u.Data.Attempt > 1 && !u.Data.Resume {
						win, total = win[:0], 0
					}
					if u.Phase.Status().Terminal() {
						return cut(win), total, nil
					}
				}
			case brt.EventText:
				var d struct {
					Text string `json:"text"`
				}
				if json.Unmarshal(e.Data, &d) != nil {
					continue
				}
				start, end := total, total+len(d.Text)
				total = end
				lo, hi := max(start, off), min(end, off+max(limit, 0))
				if lo < hi {
					win = append(win, d.Text[lo-start:hi-start]...)
				}
			}
		}
		if len(page.Events) == 0 {
			return cut(win), total, nil
		}
	}
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
