// Package delta decodes the data of belay's text delta events
// (run.text, run.thinking: {"text":"..."}) fast, with encoding/json
// deciding whatever the fast path is unsure of.
package delta

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"unicode/utf8"
)

// AppendText appends the text of a run.text event's data to dst. The data
// is what json.Marshal made of {"text": ...}, so a direct unquote of the one
// string is the fast path; anything else (or anything it is unsure of)
// goes through encoding/json, which decides.
func AppendText(dst, data []byte) ([]byte, error) {
	const pre, suf = `{"text":"`, `"}`
	if bytes.HasPrefix(data, []byte(pre)) && bytes.HasSuffix(data, []byte(suf)) && len(data) >= len(pre)+len(suf) {
		if out, ok := unquote(dst, data[len(pre):len(data)-len(suf)]); ok {
			return out, nil
		}
	}
	var t struct {
		Text string `json:"text"`
	}
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
			r, ok := hex4(s)
			if !ok || r >= 0xd800 && r < 0xe000 {
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

// Escape appends the body of s as a JSON string (without its
// quotes), escaped byte for byte as a JSON encoder: quotes,
// backslashes and control characters, U+2028 and U+2029, and each byte of
// invalid UTF-8 as \ufffd; <, > and & are left as they are: what
// encoding/json's Encoder with SetEscapeHTML(false) writes. Text escaped a
// piece at a time is escaped as the whole when the pieces are whole runes.
func Escape(dst, s []byte) []byte {
	const hex = "0123456789abcdef"
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	return append(dst, s[start:]...)
}

// AppendEscaped appends the text of a run.text event's data to dst
// escaped as Escape escapes it: AppendText then Escape, in one pass over
// the data when it is what json.Marshal writes.
func AppendEscaped(dst, data []byte) ([]byte, error) {
	const pre, suf = `{"text":"`, `"}`
	if bytes.HasPrefix(data, []byte(pre)) && bytes.HasSuffix(data, []byte(suf)) && len(data) >= len(pre)+len(suf) {
		if out, ok := reescape(dst, data[len(pre):len(data)-len(suf)]); ok {
			return out, nil
		}
	}
	text, err := AppendText(nil, data)
	if err != nil {
		return dst, err
	}
	return Escape(dst, text), nil
}

// reescape appends the JSON string body s (without its quotes) escaped
// as Escape escapes its text. It gives up (ok false) on what unquote gives
// up on.
func reescape(dst, s []byte) ([]byte, bool) {
	const hex = "0123456789abcdef"
	start := len(dst)
	for len(s) > 0 {
		i := plainPrefix(s)
		// plainPrefix passes bytes >= 0x80: they must be valid UTF-8 and
		// not U+2028 or U+2029, which Escape escapes.
		j := 0
		for j < i {
			k := bytes.IndexByte(s[j:i], 0xe2)
			if k < 0 {
				break
			}
			j += k
			if j+2 < len(s) && s[j+1] == 0x80 && (s[j+2] == 0xa8 || s[j+2] == 0xa9) {
				return dst[:start], false
			}
			j++
		}
		if !utf8.Valid(s[:i]) {
			return dst[:start], false
		}
		dst = append(dst, s[:i]...)
		s = s[i:]
		if len(s) == 0 {
			break
		}
		if s[0] != '\\' || len(s) < 2 {
			return dst[:start], false
		}
		switch c := s[1]; c {
		case '"', '\\', 'b', 'f', 'n', 'r', 't':
			dst = append(dst, '\\', c)
		case '/':
			dst = append(dst, '/')
		case 'u':
			r, ok := hex4(s)
			switch {
			case !ok || r >= 0xd800 && r < 0xe000:
				return dst[:start], false
			case r < 0x20 || r == '"' || r == '\\':
				dst = Escape(dst, []byte{byte(r)})
			case r == '\u2028' || r == '\u2029':
				dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xf])
			default:
				dst = utf8.AppendRune(dst, r)
			}
			s = s[4:]
		default:
			return dst[:start], false
		}
		s = s[2:]
	}
	return dst, true
}

// hex4 reads the four hex digits of the \uXXXX escape at the start of s.
func hex4(s []byte) (rune, bool) {
	if len(s) < 6 {
		return 0, false
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
			return 0, false
		}
	}
	return r, true
}
