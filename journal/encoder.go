package journal

import (
	"bytes"
	"encoding/json"
	"hash/crc32"
	"strconv"
	"time"
)

// MaxRecordSize caps one line, terminator included.
const MaxRecordSize = 1 << 20

// trailerLen is len(`,"crc":"XXXXXXXX"}`).
const trailerLen = 18

const tsLayout = "2006-01-02T15:04:05.000000000Z"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// appendRecord appends the encoded line for e to dst. e must be validated.
// It returns ErrTooLarge, leaving dst as it was, if the line is too long.
func appendRecord(dst []byte, e *Event) ([]byte, error) {
	start := len(dst)
	dst = append(dst, `{"seq":`...)
	dst = strconv.AppendUint(dst, e.Seq, 10)
	dst = append(dst, `,"ts":"`...)
	dst = e.TS.UTC().AppendFormat(dst, tsLayout)
	dst = append(dst, `","type":`...)
	dst = appendString(dst, e.Type)
	if e.ID != "" {
		dst = append(dst, `,"id":`...)
		dst = appendString(dst, e.ID)
	}
	if e.Run != "" {
		dst = append(dst, `,"run":`...)
		dst = appendString(dst, e.Run)
	}
	if e.Epoch != 0 {
		dst = append(dst, `,"epoch":`...)
		dst = strconv.AppendUint(dst, e.Epoch, 10)
	}
	dst = append(dst, `,"data":`...)
	if len(e.Data) == 0 {
		dst = append(dst, "null"...)
	} else {
		// Compact removes insignificant white space, newlines included; the
		// data was validated, so it cannot fail.
		buf := bytes.NewBuffer(dst)
		if err := json.Compact(buf, e.Data); err != nil {
			return dst[:start], err
		}
		dst = buf.Bytes()
	}
	sum := crc32.Checksum(dst[start:], castagnoli)
	dst = append(dst, `,"crc":"`...)
	dst = appendHex32(dst, sum)
	dst = append(dst, "\"}\n"...)
	if len(dst)-start > MaxRecordSize {
		return dst[:start], ErrTooLarge
	}
	return dst, nil
}

// appendString appends s as a JSON string, escaped as encoding/json does.
func appendString(dst []byte, s string) []byte {
	plain := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' || c >= 0x80 {
			plain = false
			break
		}
	}
	if plain {
		dst = append(dst, '"')
		dst = append(dst, s...)
		return append(dst, '"')
	}
	b, _ := json.Marshal(s) // cannot fail for a string
	return append(dst, b...)
}

func appendHex32(dst []byte, v uint32) []byte {
	const hexdigits = "0123456789abcdef"
	for shift := 28; shift >= 0; shift -= 4 {
		dst = append(dst, hexdigits[(v>>uint(shift))&0xf])
	}
	return dst
}

// nowTS truncates nothing but normalizes t to UTC so that the encoded and
// decoded timestamps compare equal.
func nowTS(t time.Time) time.Time { return t.UTC().Round(0) }
