package openai

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay/provider"
)

func TestValidateAtTheDoor(t *testing.T) {
	t.Parallel()
	p, err := New("local", Config{BaseURL: "http://127.0.0.1:1/v1"})
	require.NoError(t, err)
	var fe *provider.FieldError
	require.ErrorAs(t, p.Validate(provider.Request{}), &fe)
	require.Equal(t, "model", fe.Field, "no model anywhere")
	require.ErrorAs(t, p.Validate(provider.Request{Model: "m", Input: json.RawMessage(`{"prompt":"x","options":{"max_tokens":-1}}`)}), &fe)
	require.Equal(t, "options", fe.Field)
	require.ErrorAs(t, p.Validate(provider.Request{Model: "m", Options: json.RawMessage(`{"temperature":"hot"}`)}), &fe)
	require.Equal(t, "options", fe.Field)
	require.NoError(t, p.Validate(provider.Request{Model: "m", Input: json.RawMessage(`{"prompt":"x","options":{"max_tokens":5}}`)}))
}
