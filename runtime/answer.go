package runtime

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/store"
)

// errAnswerEnd ends a scan at the run's terminal event.
var errAnswerEnd = errors.New("runtime: end of the run")

// WriteAnswer writes run's answer text to w as it is in the store: the text
// of its last attempt (a resumed attempt continues the text before it; one
// sent again from scratch replaces it). It streams the session's journal
// from the run's input, so memory does not grow with the answer, and stops
// at the run's end, when ctx is done (the reader went away) or when w
// fails. A run that is still going gets the answer so far.
//
// A damaged journal fails the call after the text before the damage was
// written: the caller must report the answer as incomplete (G14).
func WriteAnswer(ctx context.Context, st store.Store, run belay.Run, w io.Writer) error {
	after := run.InputSeq
	if after > 0 {
		after--
	}
	if run.Attempt > 1 {
		// A later attempt may have started again from scratch: find the last
		// such start first, so that nothing written has to be taken back.
		err := st.ScanEvents(ctx, run.Session, after, func(e belay.Event) error {
			if e.Run != run.ID || e.Type != store.EventRunUpdated {
				return nil
			}
			u, err := decodeRunUpdated(e)
			if err != nil {
				return err
			}
			if u.restarts() {
				after = e.Seq
			}
			if u.Phase.Status().Terminal() {
				return errAnswerEnd
			}
			return nil
		})
		if err != nil && !errors.Is(err, errAnswerEnd) {
			return err
		}
	}
	var buf []byte
	err := st.ScanEvents(ctx, run.Session, after, func(e belay.Event) error {
		if e.Run != run.ID {
			return nil
		}
		switch e.Type {
		case EventText:
			var err error
			if buf, err = appendText(buf[:0], e.Data); err != nil {
				return fmt.Errorf("%w: run %s: seq %d: %v", belay.ErrInvalid, run.ID, e.Seq, err)
			}
			if _, err := w.Write(buf); err != nil {
				return err
			}
		case store.EventRunUpdated:
			u, err := decodeRunUpdated(e)
			if err != nil {
				return err
			}
			// A restart after the first pass: the answer so far ends here.
			if u.restarts() || u.Phase.Status().Terminal() {
				return errAnswerEnd
			}
		}
		if cap(buf) > 1<<20 {
			buf = nil
		}
		return nil
	})
	if errors.Is(err, errAnswerEnd) {
		return nil
	}
	return err
}

// runUpdate is what WriteAnswer reads of a run.updated event.
type runUpdate struct {
	Phase belay.RunPhase `json:"phase"`
	Data  struct {
		Attempt int  `json:"attempt"`
		Resume  bool `json:"resume"`
	} `json:"data"`
}

// restarts reports whether the update starts an attempt from scratch.
func (u runUpdate) restarts() bool { return u.Data.Attempt > 1 && !u.Data.Resume }

func decodeRunUpdated(e belay.Event) (runUpdate, error) {
	var u runUpdate
	if err := json.Unmarshal(e.Data, &u); err != nil {
		return u, fmt.Errorf("runtime: run.updated at seq %d: %w", e.Seq, err)
	}
	return u, nil
}

// appendText appends the text of a run.text event's data to dst. The data
// is what json.Marshal made of textData, so a direct unquote of the one
// string is the fast path; anything else (or anything it is unsure of)
// goes through encoding/json, which decides.
func appendText(dst, data []byte) ([]byte, error) {
	const pre, suf = `{"text":"`, `"}`
	if bytes.HasPrefix(data, []byte(pre)) && bytes.HasSuffix(data, []byte(suf)) && len(data) >= len(pre)+len(suf) {
		if out, ok := unquote(dst, data[len(pre):len(data)-len(suf)]); ok {
			return out, nil
		}
	}
	var t textData
	if err := json.Unmarshal(data, &t); err != nil {
		return dst, err
	}
	return append(dst, t.Text...), nil
}

// unquote appends the JSON string body s (without its quotes) to dst. It
// handles the escapes encoding/json writes, and gives up (ok false) on a
// quote, a control byte, a surrogate escape or invalid UTF-8.
func unquote(dst, s []byte) ([]byte, bool) {
	start := len(dst)
	for len(s) > 0 {
		i := plainPrefix(s)
		dst = append(dst, s[:i]...)
		s = s[i:]
		if len(s) == 0 {
			break
		}
		if s[0] != '\\' || len(s) < 2 {
			return dst, false
		}
		switch c := s[1]; c {
		case '"', '\\', '/':
			dst = append(dst, c)
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			if len(s) < 6 {
				return dst, false
			}
			var r rune
			for _, h := range s[2:6] {
				switch {
				case h >= '0' && h <= '9':
					r = r<<4 | rune(h-'0')
				case h >= 'a' && h <= 'f':
					r = r<<4 | rune(h-'a'+10)
				case h >= 'A' && h <= 'F':
					r = r<<4 | rune(h-'A'+10)
				default:
					return dst, false
				}
			}
			if r >= 0xd800 && r < 0xe000 {
				return dst, false
			}
			dst = utf8.AppendRune(dst, r)
			s = s[4:]
		default:
			return dst, false
		}
		s = s[2:]
	}
	return dst, utf8.Valid(dst[start:])
}

// plainPrefix returns the length of the prefix of s that holds no quote,
// backslash or control byte, eight bytes at a time.
func plainPrefix(s []byte) int {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	i := 0
	for ; i+8 <= len(s); i += 8 {
		x := binary.LittleEndian.Uint64(s[i:])
		q, b := x^(ones*'"'), x^(ones*'\\')
		if ((x-ones*0x20)&^x|(q-ones)&^q|(b-ones)&^b)&highs != 0 {
			break
		}
	}
	for i < len(s) && s[i] != '\\' && s[i] != '"' && s[i] >= 0x20 {
		i++
	}
	return i
}
