package journal

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/crc32"
)

// checkLine verifies the trailer and checksum of one line without its
// terminating '\n' and returns the body. It does not allocate unless the
// line is damaged.
func checkLine(line []byte) (body []byte, err error) {
	body, problem := VerifyLine(line)
	if problem != "" {
		return nil, fmt.Errorf("%w: %s", ErrCorrupt, problem)
	}
	return body, nil
}

// VerifyLine checks the checksum trailer of one journal line, without its
// terminating '\n', as doc.go specifies it, and returns the body the
// checksum covers, or why the line is damaged. Other readers of the format
// (the transcript codec) check lines with it.
func VerifyLine(line []byte) (body []byte, problem string) {
	if len(line) < trailerLen+2 {
		return nil, fmt.Sprintf("line of %d bytes is too short", len(line))
	}
	body = line[:len(line)-trailerLen]
	tr := line[len(line)-trailerLen:]
	if !bytes.HasPrefix(tr, []byte(`,"crc":"`)) || tr[16] != '"' || tr[17] != '}' || line[0] != '{' {
		return nil, "missing checksum trailer"
	}
	want, ok := parseHex32(tr[8:16])
	if !ok {
		return nil, "malformed checksum"
	}
	if got := crc32.Checksum(body, castagnoli); got != want {
		return nil, fmt.Sprintf("checksum mismatch (stored %08x, computed %08x)", want, got)
	}
	return body, ""
}

// decodeLine verifies and decodes one line (without its '\n').
func decodeLine(line []byte) (Event, error) {
	if _, err := checkLine(line); err != nil {
		return Event{}, err
	}
	var e Event
	if err := json.Unmarshal(line, &e); err != nil {
		return Event{}, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if e.Seq == 0 || e.Type == "" {
		return Event{}, fmt.Errorf("%w: missing seq or type", ErrCorrupt)
	}
	if string(e.Data) == "null" {
		e.Data = nil
	}
	return e, nil
}

// lineHeader is what recovery needs from a line: its seq and idempotency id.
type lineHeader struct {
	Seq uint64 `json:"seq"`
	ID  string `json:"id"`
}

// decodeHeader verifies a line and decodes only its seq and id. The fast
// path reads seq from the fixed prefix; id needs JSON only when present.
func decodeHeader(line []byte) (lineHeader, error) {
	body, err := checkLine(line)
	if err != nil {
		return lineHeader{}, err
	}
	var h lineHeader
	const pre = `{"seq":`
	if !bytes.HasPrefix(body, []byte(pre)) {
		return h, fmt.Errorf("%w: line does not start with seq", ErrCorrupt)
	}
	i := len(pre)
	for ; i < len(body) && body[i] >= '0' && body[i] <= '9'; i++ {
		if h.Seq > (1<<63)/10 {
			return h, fmt.Errorf("%w: seq overflows", ErrCorrupt)
		}
		h.Seq = h.Seq*10 + uint64(body[i]-'0')
	}
	if h.Seq == 0 || i >= len(body) || body[i] != ',' {
		return h, fmt.Errorf("%w: malformed seq", ErrCorrupt)
	}
	if bytes.Contains(body, []byte(`","id":"`)) {
		// Possibly an id (or that text inside a string): decode properly.
		var full lineHeader
		if err := json.Unmarshal(line, &full); err != nil || full.Seq != h.Seq {
			return h, fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		h.ID = full.ID
	}
	return h, nil
}

// peekSeq reads the seq of a line from its fixed prefix without verifying
// the line.
func peekSeq(line []byte) (uint64, bool) {
	const pre = `{"seq":`
	if !bytes.HasPrefix(line, []byte(pre)) {
		return 0, false
	}
	var seq uint64
	i := len(pre)
	for ; i < len(line) && i < len(pre)+20 && line[i] >= '0' && line[i] <= '9'; i++ {
		seq = seq*10 + uint64(line[i]-'0')
	}
	return seq, i > len(pre) && i < len(line) && line[i] == ','
}

func parseHex32(b []byte) (uint32, bool) {
	var v uint32
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | uint32(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | uint32(c-'a'+10)
		default:
			return 0, false
		}
	}
	return v, true
}
