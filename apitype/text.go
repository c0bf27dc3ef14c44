package apitype

import (
	"bytes"
	"encoding/json"
	"errors"
	"unicode/utf8"
)

// errNotUTF8 refuses text that JSON decoding would silently change: bytes
// that are not UTF-8, and \u escapes of unpaired surrogates, both of which
// encoding/json replaces with U+FFFD. A prompt or label is kept byte-exact
// or refused, never altered.
var errNotUTF8 = errors.New("text is not valid UTF-8 (invalid bytes or an unpaired \\u surrogate escape); belay keeps text byte-exact, so send it as UTF-8")

// checkText reports whether a JSON document decodes without replacement.
func checkText(raw []byte) error {
	if !utf8.Valid(raw) {
		return errNotUTF8
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		i++
		if i >= len(raw) || raw[i] != 'u' {
			continue // \\ \" \n ...: skip the escaped character
		}
		r, ok := hex4(raw[i+1:])
		if !ok {
			continue // the decoder reports the syntax error
		}
		i += 4
		switch {
		case r >= 0xDC00 && r <= 0xDFFF:
			return errNotUTF8 // a low surrogate alone
		case r >= 0xD800 && r <= 0xDBFF:
			rest := raw[i+1:]
			if len(rest) < 6 || rest[0] != '\\' || rest[1] != 'u' {
				return errNotUTF8
			}
			lo, ok := hex4(rest[2:])
			if !ok || lo < 0xDC00 || lo > 0xDFFF {
				return errNotUTF8
			}
			i += 6
		}
	}
	return nil
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c-'a') + 10
		case c >= 'A' && c <= 'F':
			r |= rune(c-'A') + 10
		default:
			return 0, false
		}
	}
	return r, true
}

// strictDecode decodes raw into v refusing unknown fields, as the request
// decoder does.
func strictDecode(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// UnmarshalJSON refuses text JSON decoding would alter (see checkText).
func (r *CreateRunRequest) UnmarshalJSON(raw []byte) error {
	if err := checkText(raw); err != nil {
		return err
	}
	type plain CreateRunRequest
	return strictDecode(raw, (*plain)(r))
}

// UnmarshalJSON refuses text JSON decoding would alter (see checkText).
func (r *CreateSessionRequest) UnmarshalJSON(raw []byte) error {
	if err := checkText(raw); err != nil {
		return err
	}
	type plain CreateSessionRequest
	return strictDecode(raw, (*plain)(r))
}

// UnmarshalJSON refuses text JSON decoding would alter (see checkText).
func (r *PostRequest) UnmarshalJSON(raw []byte) error {
	if err := checkText(raw); err != nil {
		return err
	}
	type plain PostRequest
	return strictDecode(raw, (*plain)(r))
}

// UnmarshalJSON refuses text JSON decoding would alter (see checkText),
// and unknown fields.
func (r *BatchRun) UnmarshalJSON(raw []byte) error {
	if err := checkText(raw); err != nil {
		return err
	}
	// Without CreateRunRequest's method, so that both parts decode.
	type plain CreateRunRequest
	var v struct {
		plain
		IdempotencyKey string `json:"idempotencyKey,omitempty"`
	}
	if err := strictDecode(raw, &v); err != nil {
		return err
	}
	r.CreateRunRequest, r.IdempotencyKey = CreateRunRequest(v.plain), v.IdempotencyKey
	return nil
}
