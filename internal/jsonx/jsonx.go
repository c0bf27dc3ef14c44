// Package jsonx holds the JSON helper belay's packages share.
package jsonx

import (
	"encoding/json"
	"fmt"
)

// Must marshals v, which must be a value that always marshals (a plain
// struct, map or slice of such: no channel, function or cyclic pointer,
// no Marshaler that fails). A failure is a programming error, so it
// panics rather than hand the caller an error it cannot act on.
func Must(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("jsonx: %T does not marshal: %v", v, err))
	}
	return b
}
