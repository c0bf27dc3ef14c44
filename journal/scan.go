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
	var v viewDecoder
	return j.scanLines(after, v.decode, fn)
}

// viewDecoder decodes the lines of one scan, reusing the type and run
// strings of the line before when they repeat (a run's deltas).
type viewDecoder struct{ typ, run string }

func (v *viewDecoder) decode(line []byte) (Event, error) {
	body, err := checkLine(line)
	if err != nil {
		return Event{}, err
	}
	if e, ok := parseEnvelope(body, v); ok {
		return e, nil
	}
	return decodeLine(line)
}

// intern returns b as a string, the cached one if equal.
func intern(cache *string, b []byte) string {
	if string(b) != *cache {
		*cache = string(b)
	}
	return *cache
}

// decodeLineView verifies a line and decodes its envelope from the fixed
// layout of the format (see doc.go) without a JSON pass over the data,
// which it returns as a slice of line. A line that does not have exactly
// that layout (an id with escapes, say) is decoded by decodeLine.
func decodeLineView(line []byte) (Event, error) {
	var v viewDecoder
	return v.decode(line)
}

// parseEnvelope parses `{"seq":N,"ts":"...","type":"T"[,"id":"I"][,"run":"R"][,"epoch":N],"data":D`
// where the strings hold no escapes. ok is false for anything else.
func parseEnvelope(b []byte, v *viewDecoder) (e Event, ok bool) {
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
	t, ok := parseTS(ts)
	if !ok {
		var err error
		if t, err = time.Parse(time.RFC3339Nano, string(ts)); err != nil {
			return e, false
		}
	}
	e.TS = t
	typ, ok := p.field(`,"type":`)
	if !ok || len(typ) == 0 {
		return e, false
	}
	e.Type = intern(&v.typ, typ)
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
		e.Run = intern(&v.run, run)
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

// parseTS reads a time in the journal's layout (tsLayout), digit by digit.
// ok is false for anything it does not take exactly as time.Parse would;
// the caller then asks time.Parse.
func parseTS(b []byte) (time.Time, bool) {
	if len(b) != len(tsLayout) || b[4] != '-' || b[7] != '-' || b[10] != 'T' || b[13] != ':' || b[16] != ':' || b[19] != '.' || b[29] != 'Z' {
		return time.Time{}, false
	}
	num := func(from, to int) (int, bool) {
		n := 0
		for _, c := range b[from:to] {
			if c < '0' || c > '9' {
				return 0, false
			}
			n = n*10 + int(c-'0')
		}
		return n, true
	}
	y, ok1 := num(0, 4)
	mo, ok2 := num(5, 7)
	d, ok3 := num(8, 10)
	h, ok4 := num(11, 13)
	mi, ok5 := num(14, 16)
	s, ok6 := num(17, 19)
	ns, ok7 := num(20, 29)
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7) || mo < 1 || mo > 12 || d < 1 || h > 23 || mi > 59 || s > 59 {
		return time.Time{}, false
	}
	t := time.Date(y, time.Month(mo), d, h, mi, s, ns, time.UTC)
	if t.Day() != d { // past the end of the month
		return time.Time{}, false
	}
	return t, true
}
