package journal

import (
	"bytes"
	"encoding/json"
	"time"
)

// Scan calls fn for each synced event with seq > after, in order, until fn
// returns false, without holding more than one line in memory: it is how a
// run of any size is read back in bounded memory. Each event's Data aliases
// the read buffer and is valid only until fn returns; its JSON is covered
// by the line's checksum (the appender compacted, and so validated, it)
// but is not parsed again: a caller that decodes Data checks it then.
//
// Errors are those of Read: on a quarantined journal Scan yields the events
// before the damage and returns the *QuarantineError.
func (j *Journal) Scan(after uint64, fn func(Event) bool) error {
	return j.scanLines(after, decodeLineView, fn)
}

// decodeLineView verifies a line and decodes its envelope from the fixed
// layout of the format (see doc.go) without a JSON pass over the data,
// which it returns as a slice of line. A line that does not have exactly
// that layout (an id with escapes, say) is decoded by decodeLine.
func decodeLineView(line []byte) (Event, error) {
	body, err := checkLine(line)
	if err != nil {
		return Event{}, err
	}
	if e, ok := parseEnvelope(body); ok {
		return e, nil
	}
	return decodeLine(line)
}

// parseEnvelope parses `{"seq":N,"ts":"...","type":"T"[,"id":"I"][,"run":"R"][,"epoch":N],"data":D`
// where the strings hold no escapes. ok is false for anything else.
func parseEnvelope(b []byte) (e Event, ok bool) {
	p := envParser{b: b}
	if !p.lit(`{"seq":`) {
		return e, false
	}
	if e.Seq, ok = p.uint(); !ok || e.Seq == 0 {
		return e, false
	}
	ts, ok := p.field(`,"ts":`)
	if !ok || len(ts) != len(tsLayout) {
		return e, false
	}
	t, err := time.Parse(time.RFC3339Nano, string(ts))
	if err != nil {
		return e, false
	}
	e.TS = t
	typ, ok := p.field(`,"type":`)
	if !ok || len(typ) == 0 {
		return e, false
	}
	e.Type = string(typ)
	if p.has(`,"id":`) {
		id, ok := p.field(`,"id":`)
		if !ok || len(id) == 0 {
			return e, false
		}
		e.ID = string(id)
	}
	if p.has(`,"run":`) {
		run, ok := p.field(`,"run":`)
		if !ok || len(run) == 0 {
			return e, false
		}
		e.Run = string(run)
	}
	if p.lit(`,"epoch":`) {
		if e.Epoch, ok = p.uint(); !ok || e.Epoch == 0 {
			return e, false
		}
	}
	if !p.lit(`,"data":`) || p.i >= len(b) {
		return e, false
	}
	data := b[p.i:]
	if string(data) != "null" {
		e.Data = json.RawMessage(data)
	}
	return e, true
}

// envParser walks the envelope of a line.
type envParser struct {
	b []byte
	i int
}

func (p *envParser) has(s string) bool { return bytes.HasPrefix(p.b[p.i:], []byte(s)) }

func (p *envParser) lit(s string) bool {
	if !p.has(s) {
		return false
	}
	p.i += len(s)
	return true
}

// uint reads a decimal integer without leading zeros.
func (p *envParser) uint() (uint64, bool) {
	start := p.i
	var v uint64
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' && p.i-start < 19 {
		v = v*10 + uint64(p.b[p.i]-'0')
		p.i++
	}
	if p.i == start || p.b[start] == '0' && p.i-start > 1 {
		return 0, false
	}
	return v, true
}

// field reads `name"value"` where value has no escapes, control bytes or
// non-ASCII bytes (which encoding/json could have decoded differently).
func (p *envParser) field(name string) ([]byte, bool) {
	if !p.lit(name) || !p.lit(`"`) {
		return nil, false
	}
	start := p.i
	for p.i < len(p.b) {
		switch c := p.b[p.i]; {
		case c == '"':
			v := p.b[start:p.i]
			p.i++
			return v, true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return nil, false
		}
		p.i++
	}
	return nil, false
}
