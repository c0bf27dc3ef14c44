package journal

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"strconv"
	"time"

	"github.com/belayhq/belay"
)

// trailerLen is len(`,"crc":"XXXXXXXX"}`).
const trailerLen = 18

const tsLayout = "2006-01-02T15:04:05.000000000Z"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// maxPrefixLen bounds len(`{"seq":N,"ts":"..."`), whatever the seq.
const maxPrefixLen = len(`{"seq":`) + 20 + len(`,"ts":"`) + len(tsLayout) + 1

// encodeTail appends the part of e's line that follows its seq and ts,
// from `,"type":` through the data, compacting (and so validating) the
// data. Appenders call it before taking the journal lock.
func encodeTail(dst []byte, e *Event) ([]byte, error) {
	start := len(dst)
	dst = append(dst, `,"type":`...)
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
		return append(dst, "null"...), nil
	}
	// Compact removes insignificant white space, newlines included.
	buf := bytes.NewBuffer(dst)
	if err := json.Compact(buf, e.Data); err != nil {
		return dst[:start], fmt.Errorf("%w: data is not valid JSON: %v", ErrInvalidEvent, err)
	}
	dst = buf.Bytes()
	if maxPrefixLen+len(dst)-start+trailerLen+1 > belay.MaxRecordSize {
		return dst[:start], ErrTooLarge
	}
	return dst, nil
}

// appendLine appends a complete line: seq, ts, the encoded tail and the
// checksum trailer.
func appendLine(dst []byte, seq uint64, ts time.Time, tail []byte) []byte {
	start := len(dst)
	dst = append(dst, `{"seq":`...)
	dst = strconv.AppendUint(dst, seq, 10)
	dst = append(dst, `,"ts":"`...)
	dst = ts.UTC().AppendFormat(dst, tsLayout)
	dst = append(dst, '"')
	dst = append(dst, tail...)
	sum := crc32.Checksum(dst[start:], castagnoli)
	dst = append(dst, `,"crc":"`...)
	dst = appendHex32(dst, sum)
	return append(dst, "\"}\n"...)
}

// AppendRecord appends to dst the line that records e with its Seq and
// TS as they are, byte for byte as Append writes it, for a writer that
// streams a journal of its own (a transcript export). A line longer than
// MaxRecordSize fails with ErrTooLarge, and data that is not valid JSON
// with ErrInvalidEvent.
func AppendRecord(dst []byte, e Event) ([]byte, error) { return appendRecord(dst, &e) }

// appendRecord appends the encoded line for e.
func appendRecord(dst []byte, e *Event) ([]byte, error) {
	tail, err := encodeTail(nil, e)
	if err != nil {
		return dst, err
	}
	return appendLine(dst, e.Seq, e.TS, tail), nil
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
