package prompt

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/belayhq/belay/provider"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseOptions(t *testing.T) {
	t.Parallel()
	o, err := ParseOptions(provider.Request{
		Options: json.RawMessage(`{"temperature":0.1,"system":"s","max_tokens":10,"other_tool":{"x":1}}`),
		Input:   json.RawMessage(`{"prompt":"p","options":{"temperature":0.7,"system":null}}`),
	})
	require.NoError(t, err)
	require.Equal(t, 0.7, *o.Temperature)
	require.Empty(t, o.System)
	require.Equal(t, 10, o.MaxTokens)

	for _, bad := range []string{`[1]`, `{"max_tokens":"ten"}`, `{"max_tokens":-1}`} {
		_, err := ParseOptions(provider.Request{Options: json.RawMessage(bad)})
		require.Error(t, err, bad)
	}
	o, err = ParseOptions(provider.Request{})
	require.NoError(t, err)
	require.Equal(t, Options{}, o)
}

func TestConversation(t *testing.T) {
	t.Parallel()
	h := func(context.Context, provider.Request) ([]Message, error) {
		return []Message{{Role: RoleUser, Text: "a"}, {Role: RoleAssistant, Text: "b"}}, nil
	}
	msgs, err := Conversation(context.Background(), h, provider.Request{Prompt: "c"})
	require.NoError(t, err)
	require.Equal(t, []Message{{Role: RoleUser, Text: "a"}, {Role: RoleAssistant, Text: "b"}, {Role: RoleUser, Text: "c"}}, msgs)

	_, err = Conversation(context.Background(), nil, provider.Request{})
	require.ErrorContains(t, err, "prompt is empty")
	_, err = Conversation(context.Background(), func(context.Context, provider.Request) ([]Message, error) {
		return nil, errors.New("boom")
	}, provider.Request{Prompt: "x"})
	require.ErrorContains(t, err, "session history: boom")
}

func TestToolInput(t *testing.T) {
	t.Parallel()
	require.Equal(t, `{}`, string(ToolInput("  ")))
	require.Equal(t, `{"a":1}`, string(ToolInput(`{"a":1}`)))
	require.Equal(t, `"{\"a\":"`, string(ToolInput(`{"a":`)))
}
