package transcript

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"strings"
)

// validJSON reports whether b is one valid JSON value, as json.Valid does,
// at several times its speed: file-level repair validates every line.
// FuzzValidJSON checks that the two agree.
func validJSON(b []byte) bool {
	i, ok := validValue(b, skipSpace(b, 0), 0, nil, nil)
	return ok && skipSpace(b, i) == len(b)
}

// keyFunc is told each key of the top-level object (depth 0, parent nil)
// and of the objects that are values of its keys (depth 1, parent the
// key), with where the key's value starts.
type keyFunc func(depth int, parent, key []byte, start int)

// validJSONKeys is validJSON that also reports keys to fn, so that a line
// is validated and its entry fields found in one pass.
func validJSONKeys(b []byte, fn keyFunc) bool {
	i, ok := validValue(b, skipSpace(b, 0), 0, nil, fn)
	return ok && skipSpace(b, i) == len(b)
}

// maxDepth is encoding/json's nesting limit.
const maxDepth = 10000

func validValue(b []byte, i, depth int, parent []byte, fn keyFunc) (int, bool) {
	if i >= len(b) || depth > maxDepth {
		return i, false
	}
	switch c := b[i]; c {
	case '{':
		i = skipSpace(b, i+1)
		if i < len(b) && b[i] == '}' {
			return i + 1, true
		}
		for {
			if i >= len(b) || b[i] != '"' {
				return i, false
			}
			var ok bool
			ks := i + 1
			if i, ok = validString(b, i); !ok {
				return i, false
			}
			key := b[ks : i-1]
			i = skipSpace(b, i)
			if i >= len(b) || b[i] != ':' {
				return i, false
			}
			i = skipSpace(b, i+1)
			var sub keyFunc
			var subParent []byte
			if fn != nil && depth <= 1 {
				fn(depth, parent, key, i)
				if depth == 0 {
					sub, subParent = fn, key
				}
			}
			if i < len(b) && b[i] == '"' {
				i, ok = validString(b, i) // the common case, without a call down
			} else {
				i, ok = validValue(b, i, depth+1, subParent, sub)
			}
			if !ok {
				return i, false
			}
			i = skipSpace(b, i)
			if i >= len(b) {
				return i, false
			}
			switch b[i] {
			case ',':
				i = skipSpace(b, i+1)
			case '}':
				return i + 1, true
			default:
				return i, false
			}
		}
	case '[':
		i = skipSpace(b, i+1)
		if i < len(b) && b[i] == ']' {
			return i + 1, true
		}
		for {
			var ok bool
			if i < len(b) && b[i] == '"' {
				i, ok = validString(b, i)
			} else {
				i, ok = validValue(b, i, depth+1, nil, nil)
			}
			if !ok {
				return i, false
			}
			i = skipSpace(b, i)
			if i >= len(b) {
				return i, false
			}
			switch b[i] {
			case ',':
				i = skipSpace(b, i+1)
			case ']':
				return i + 1, true
			default:
				return i, false
			}
		}
	case '"':
		return validString(b, i)
	case 't':
		return literal(b, i, "true")
	case 'f':
		return literal(b, i, "false")
	case 'n':
		return literal(b, i, "null")
	}
	return validNumber(b, i)
}

func literal(b []byte, i int, lit string) (int, bool) {
	if len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit {
		return i + len(lit), true
	}
	return i, false
}

func validString(b []byte, i int) (int, bool) {
	i++
	for {
		// Skip plain bytes eight at a time, then jump to the first special
		// one (the lowest flagged byte of specialMask is exact).
		for i+8 <= len(b) {
			if m := specialMask(binary.LittleEndian.Uint64(b[i:])); m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				break
			}
			i += 8
		}
		for i < len(b) && !specialByte(b[i]) {
			i++
		}
		if i >= len(b) {
			return i, false
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1, true
		case c == '\\':
			i++
			if i >= len(b) {
				return i, false
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if len(b)-i < 5 {
					return i, false
				}
				for _, h := range b[i+1 : i+5] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						return i, false
					}
				}
				i += 5
			default:
				return i, false
			}
		default: // a control character
			return i, false
		}
	}
}

// specialByte reports whether c is a quote, a backslash or a control
// character: a byte a JSON string cannot hold as it is.
func specialByte(c byte) bool { return c == '"' || c == '\\' || c < 0x20 }

// specialMask flags (high bit) the bytes of v that are specialByte; the
// lowest flagged byte is always one, higher ones may be flagged falsely
// after it.
func specialMask(v uint64) uint64 {
	q := v ^ ('"' * lo8)
	s := v ^ ('\\' * lo8)
	return ((q-lo8)&^q | (s-lo8)&^s | (v-0x20*lo8)&^v) & hi8
}

const (
	lo8 = 0x0101010101010101
	hi8 = 0x8080808080808080
)

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func validNumber(b []byte, i int) (int, bool) {
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	default:
		return i, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || !isDigit(b[i]) {
			return i, false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return i, false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	return i, true
}

// keyCheck gathers, in the validating pass, where the values of the keys
// an entry is checked for start, and whether any of them is ambiguous
// (repeated, or spelled in another case).
type keyCheck struct {
	top, sub     *keySet // keys of the object and of its subOf object
	subOf        string
	topAt, subAt [16]int // value start + 1 of each key; 0 when absent
	bad          bool
	// apiErrorAt is the value start + 1 of the last top-level
	// "isApiErrorMessage" (Claude Code), which the light reading of a line
	// takes, as encoding/json would; it does not make a line ambiguous.
	apiErrorAt int
}

// keySet is a list of keys (at most 16, each at most 32 bytes), indexed by
// length so that a key is compared with the names of its length only.
type keySet struct {
	names []string
	byLen [33]uint16 // bit i set: names[i] has this length
}

func newKeySet(names ...string) *keySet {
	ks := &keySet{names: names}
	if len(names) > 16 {
		panic("transcript: more than 16 keys in a keySet")
	}
	for i, n := range names {
		if len(n) > 32 {
			panic("transcript: key longer than 32 bytes in a keySet")
		}
		for _, m := range names[:i] {
			if strings.EqualFold(m, n) {
				panic("transcript: two keys of a keySet differ only in case")
			}
		}
		ks.byLen[len(n)] |= 1 << i
	}
	return ks
}

// at returns the index of name in the set, where keyCheck records its
// value (topAt, subAt). A name not in the set is a programming error.
func (ks *keySet) at(name string) int {
	for i, n := range ks.names {
		if n == name {
			return i
		}
	}
	panic("transcript: key " + name + " is not in the keySet")
}

func (k *keyCheck) add(depth int, parent, key []byte, start int) {
	names, at := k.top, &k.topAt
	if depth == 1 {
		if string(parent) != k.subOf || names == nil {
			return
		}
		names, at = k.sub, &k.subAt
	} else if len(key) == len("isApiErrorMessage") && string(key) == "isApiErrorMessage" {
		k.apiErrorAt = start + 1
	}
	if names == nil || len(key) > 32 {
		return
	}
	for m := names.byLen[len(key)]; m != 0; m &= m - 1 {
		i := bits.TrailingZeros16(m)
		n := names.names[i]
		if string(key) == n {
			if at[i] != 0 {
				k.bad = true // repeated
				return
			}
			at[i] = start + 1
			return // (no two names are the same but for case)
		}
		if key[0]|0x20 == n[0]|0x20 && bytes.EqualFold(key, []byte(n)) {
			k.bad = true // spelled in another case
			return
		}
	}
}

// check validates line and gathers its keys; it returns why the line is
// not valid JSON or not an object, or "".
func (k *keyCheck) check(line []byte) string {
	if !validJSONKeys(line, k.add) {
		return "not valid JSON"
	}
	if t := skipSpace(line, 0); line[t] != '{' {
		return "not a JSON object"
	}
	return ""
}

// strBytes returns the string value at a recorded start (0: absent),
// decoded; without escapes it is the line's own bytes.
func strBytes(line []byte, at int) ([]byte, bool) {
	if at == 0 || line[at-1] != '"' {
		return nil, false
	}
	v := line[at-1 : skipString(line, at-1)]
	if len(v) >= 2 && bytes.IndexByte(v, '\\') < 0 {
		return v[1 : len(v)-1], true
	}
	s, ok := jsonString(v)
	return []byte(s), ok
}

// object reports whether the value at a recorded start is an object.
func object(line []byte, at int) bool { return at != 0 && line[at-1] == '{' }

// truncatedAt reports whether b is a JSON value cut short: valid up to
// its end (trailing blanks aside), where a value was still open. It
// returns the byte the document stops at.
func truncatedAt(b []byte) (int, bool) {
	b = bytes.TrimRight(b, " \t\r\n")
	start := skipSpace(b, 0)
	if start >= len(b) {
		return 0, false
	}
	i, ok := validValue(b, start, 0, nil, nil)
	if ok || i < len(b) {
		return 0, false
	}
	return len(b), true
}
