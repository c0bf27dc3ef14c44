package runtime

import (
	"encoding/json"
)

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only for the plain structs above
	}
	return b
}
