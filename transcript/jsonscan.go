package transcript

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// This file reads and patches top-level fields of a JSON object that is
// already known to be valid, without decoding the rest of it. File-level
// repair validates hundreds of MB per second this way, and writers change one
// field of an entry (a parent id, a content array) while every other byte of
// the line stays as it was.

// field is one top-level member of an object: key and the byte span of its
// value.
type field struct {
	key        []byte // raw key bytes between the quotes (still escaped)
	start, end int    // value span
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// skipString returns the index after the string that starts at b[i] ('"'),
// or len(b) if it does not end. A quote ends it unless an odd run of
// backslashes comes right before it; the search for quotes is
// bytes.IndexByte's, many bytes at a time.
func skipString(b []byte, i int) int {
	start := i + 1
	for j := start; j < len(b); {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			break
		}
		q := j + k
		n := 0
		for p := q - 1; p >= start && b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return q + 1
		}
		j = q + 1
	}
	return len(b)
}

// skipValue returns the index after the value that starts at b[i].
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return len(b)
	}
	for i < len(b) && !isSpace(b[i]) && b[i] != ',' && b[i] != '}' && b[i] != ']' {
		i++
	}
	return i
}

// topFields calls fn for each top-level member of the object in b, which
// must be valid JSON; it stops when fn returns false. It returns false if b
// is not an object.
func topFields(b []byte, fn func(f field) bool) bool {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipSpace(b, i+1)
	for i < len(b) && b[i] == '"' {
		ks := i + 1
		i = skipString(b, i)
		if i-1 < ks || b[i-1] != '"' {
			return false // the key runs to the end of b (a torn line)
		}
		key := b[ks : i-1]
		i = skipSpace(b, i)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i = skipSpace(b, i+1)
		vs := i
		i = skipValue(b, i)
		if !fn(field{key: key, start: vs, end: i}) {
			return true
		}
		i = skipSpace(b, i)
		if i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
		}
	}
	return true
}

// getField returns the raw value of the top-level key in the object b.
func getField(b []byte, key string) ([]byte, bool) {
	var out []byte
	found := false
	topFields(b, func(f field) bool {
		if string(f.key) == key {
			out, found = b[f.start:f.end], true
			return false
		}
		return true
	})
	return out, found
}

// fieldStart returns where the value of the top-level key starts, without
// skipping that value (the rest of b may be long).
func fieldStart(b []byte, key string) (int, bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return 0, false
	}
	i = skipSpace(b, i+1)
	for i < len(b) && b[i] == '"' {
		ks := i + 1
		i = skipString(b, i)
		if i-1 < ks || b[i-1] != '"' {
			return 0, false
		}
		k := b[ks : i-1]
		i = skipSpace(b, i)
		if i >= len(b) || b[i] != ':' {
			return 0, false
		}
		i = skipSpace(b, i+1)
		if string(k) == key {
			return i, true
		}
		i = skipSpace(b, skipValue(b, i))
		if i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
		}
	}
	return 0, false
}

// getString returns the top-level key's value if it is a string.
func getString(b []byte, key string) (string, bool) {
	v, ok := getField(b, key)
	if !ok {
		return "", false
	}
	return jsonString(v)
}

// jsonString decodes a JSON string value.
func jsonString(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' {
		return "", false
	}
	inner := v[1 : len(v)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		return string(inner), true
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", false
	}
	return s, true
}

// isNullish reports whether v is absent or JSON null.
func isNullish(v []byte) bool {
	v = bytes.TrimSpace(v)
	return len(v) == 0 || string(v) == "null"
}

// setField returns a copy of the object b with key set to the raw value
// val: replaced in place when present, appended otherwise. Every other byte
// is kept.
func setField(b []byte, key string, val []byte) []byte {
	span := field{start: -1}
	topFields(b, func(f field) bool {
		if string(f.key) == key {
			span = f
			return false
		}
		return true
	})
	out := make([]byte, 0, len(b)+len(val)+len(key)+4)
	if span.start >= 0 {
		out = append(out, b[:span.start]...)
		out = append(out, val...)
		return append(out, b[span.end:]...)
	}
	end := bytes.LastIndexByte(b, '}')
	if end < 0 {
		return b
	}
	head := bytes.TrimRight(b[:end], " \t\r\n")
	out = append(out, head...)
	if head[len(head)-1] != '{' {
		out = append(out, ',')
	}
	out = strconv.AppendQuote(out, key)
	out = append(out, ':')
	out = append(out, val...)
	return append(out, b[end:]...)
}

// arrayElems returns the spans of the elements of the JSON array in b,
// which must be valid.
func arrayElems(b []byte) [][2]int {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '[' {
		return nil
	}
	var out [][2]int
	i = skipSpace(b, i+1)
	for i < len(b) && b[i] != ']' {
		s := i
		i = skipValue(b, i)
		out = append(out, [2]int{s, i})
		i = skipSpace(b, i)
		if i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
		}
	}
	return out
}

// mustJSON marshals v without HTML escaping, as the agents' own writers do.
func mustJSON(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err) // only plain values reach here
	}
	return bytes.TrimRight(buf.Bytes(), "\n")
}

// delField returns a copy of the object b without the top-level key.
func delField(b []byte, key string) []byte {
	var prevEnd, start, end = -1, -1, -1
	first := true
	topFields(b, func(f field) bool {
		if string(f.key) == key {
			// Back up to the key's opening quote.
			start = bytes.LastIndexByte(b[:f.start], ':')
			start = bytes.LastIndexByte(b[:start], '"')
			start = bytes.LastIndexByte(b[:start], '"')
			end = f.end
			return false
		}
		first = false
		prevEnd = f.end
		return true
	})
	if start < 0 {
		return b
	}
	out := make([]byte, 0, len(b))
	if first {
		// Remove the member and the comma after it, if any.
		rest := b[end:]
		j := skipSpace(rest, 0)
		if j < len(rest) && rest[j] == ',' {
			rest = rest[skipSpace(rest, j+1):]
		}
		out = append(out, b[:start]...)
		return append(out, rest...)
	}
	out = append(out, b[:prevEnd]...)
	return append(out, b[end:]...)
}

// strictKeys reports whether the object b spells each of keys exactly
// and at most once. encoding/json matches keys case-insensitively and
// takes the last duplicate, while writers patch the exact key: an object
// that spells them otherwise is ambiguous, and repair leaves it alone.
func strictKeys(b []byte, keys ...string) bool {
	ok := true
	var seen [16]bool
	topFields(b, func(f field) bool {
		for i, k := range keys {
			if len(f.key) != len(k) || !bytes.EqualFold(f.key, []byte(k)) {
				continue
			}
			if string(f.key) != k || seen[i] {
				ok = false
				return false
			}
			seen[i] = true
		}
		return true
	})
	return ok
}

const ambiguous = "ambiguous keys (a key repeated or spelled in another case)"

// The keys each format's lines are checked for (keyCheck). The order is
// the index of each key's recorded value (topAt, subAt).
var (
	roleKeys   = newKeySet("role", "content", "tool_calls", "tool_call_id", "stop_reason", "model")
	piLineKeys = newKeySet("type", "id", "parentId", "timestamp", "message")
	piMsgKeys  = newKeySet("role", "content", "toolCallId", "toolName", "isError", "stopReason", "model", "provider", "usage", "timestamp")
	ccLineKeys = newKeySet("type", "uuid", "parentUuid", "timestamp", "message", "isSidechain")
	ccMsgKeys  = newKeySet("id", "role", "content", "model", "stop_reason", "usage")
)
