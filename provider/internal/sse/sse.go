// Package sse decodes Server-Sent Events streams (WHATWG HTML §9.2) for
// the provider adapters: data, event and id fields, multi-line data,
// comments (reported, so that adapters can turn them into keepalives), CR,
// LF and CRLF line ends, and a leading byte order mark. Lines are capped
// before they are buffered.
package sse

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
)

// MaxLine is the longest line the decoder accepts.
const MaxLine = 8 << 20

// ErrLineTooLong is returned for a line longer than MaxLine.
var ErrLineTooLong = errors.New("sse: line too long")

// Event is one dispatched event, or one comment line.
type Event struct {
	// Type is the event field ("" when the event had none; the spec's
	// default is "message").
	Type string
	// Data is the data fields joined with "\n".
	Data string
	// ID is the last event id seen so far in the stream.
	ID string
	// Comment marks a comment line (": keepalive"); Data holds its text.
	Comment bool
}

// Decoder reads events from a stream.
type Decoder struct {
	s      *bufio.Scanner
	lastID string
	first  bool
}

// NewDecoder returns a decoder reading r.
func NewDecoder(r io.Reader) *Decoder {
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 0, 64<<10), MaxLine)
	s.Split(scanLines)
	return &Decoder{s: s, first: true}
}

// Next returns the next event or comment. At the end of the stream it
// returns io.EOF, or io.ErrUnexpectedEOF when the stream ended inside an
// event (fields read but no blank line yet).
func (d *Decoder) Next() (Event, error) {
	var (
		typ     string
		data    strings.Builder
		hasData bool
		pending bool
	)
	for d.s.Scan() {
		line := d.s.Text()
		if d.first {
			line = strings.TrimPrefix(line, "\uFEFF")
			d.first = false
		}
		if line == "" {
			if hasData {
				return Event{Type: typ, Data: data.String(), ID: d.lastID}, nil
			}
			typ, pending = "", false
			continue
		}
		if line[0] == ':' {
			return Event{Comment: true, Data: strings.TrimPrefix(line[1:], " "), ID: d.lastID}, nil
		}
		pending = true
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "data":
			if hasData {
				data.WriteByte('\n')
			}
			data.WriteString(value)
			hasData = true
		case "event":
			typ = value
		case "id":
			if !strings.ContainsRune(value, 0) {
				d.lastID = value
			}
		}
		// retry and unknown fields are ignored.
	}
	if err := d.s.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return Event{}, fmt.Errorf("%w (over %d bytes)", ErrLineTooLong, MaxLine)
		}
		return Event{}, err
	}
	if pending {
		return Event{}, io.ErrUnexpectedEOF
	}
	return Event{}, io.EOF
}

// scanLines splits on LF, CRLF or a lone CR.
func scanLines(data []byte, atEOF bool) (advance int, token []byte, err error) {
	if atEOF && len(data) == 0 {
		return 0, nil, nil
	}
	if i := bytes.IndexAny(data, "\r\n"); i >= 0 {
		if data[i] == '\n' {
			return i + 1, data[:i], nil
		}
		// A CR: a CRLF pair when LF follows; wait for more if it may.
		if i+1 < len(data) {
			if data[i+1] == '\n' {
				return i + 2, data[:i], nil
			}
			return i + 1, data[:i], nil
		}
		if atEOF {
			return i + 1, data[:i], nil
		}
		return 0, nil, nil
	}
	if atEOF {
		return len(data), data, nil
	}
	return 0, nil, nil
}
