package anthropic

import (
	"fmt"
	"strings"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/provider/internal/httpapi"
	"github.com/belayhq/belay/provider/internal/prompt"
)

// Defaults.
const (
	DefaultBaseURL          = "https://api.anthropic.com/v1"
	DefaultAPIKeyEnv        = "ANTHROPIC_API_KEY"
	DefaultVersion          = "2023-06-01"
	DefaultMaxTokens        = 4096
	DefaultConnectTimeout   = 10 * time.Second
	DefaultFirstByteTimeout = 120 * time.Second
	DefaultIdleTimeout      = 10 * time.Minute
)

// Message is one message of a session's history (see History).
type Message = prompt.Message

// ToolCall is a tool call inside an assistant Message.
type ToolCall = prompt.ToolCall

// History returns a session's conversation before the run's prompt,
// oldest first. Without one, only the prompt is sent.
type History = prompt.History

// Config configures an anthropic provider; the daemon decodes a
// [providers.<name>] table with type = "anthropic" into it.
type Config struct {
	// Type is the table's provider type; "" or "anthropic".
	Type string `toml:"type"`
	// BaseURL is the API root including the version
	// ("https://api.anthropic.com/v1").
	BaseURL string `toml:"base_url"`
	// Model is the default model; a run's model overrides it.
	Model string `toml:"model"`
	// The API key comes from the environment variable APIKeyEnv, else the
	// file APIKeyFile (mode 0600), else APIKey inline; with none set, from
	// ANTHROPIC_API_KEY. A key is required.
	APIKeyEnv  string `toml:"api_key_env"`
	APIKeyFile string `toml:"api_key_file"`
	APIKey     string `toml:"api_key"`
	// AnthropicVersion is the anthropic-version header (default
	// 2023-06-01).
	AnthropicVersion string `toml:"anthropic_version"`
	// MaxTokens is the default max_tokens (the API requires one); the
	// options' max_tokens overrides it.
	MaxTokens int `toml:"max_tokens"`
	// Headers are extra request headers, e.g. anthropic-beta (not
	// x-api-key).
	Headers map[string]string `toml:"headers"`
	// ConnectTimeout bounds connecting (TCP and TLS), FirstByteTimeout the
	// wait for response headers, IdleTimeout the silence inside a stream
	// (pings count). Negative disables one; 0 takes the default.
	ConnectTimeout   time.Duration `toml:"connect_timeout"`
	FirstByteTimeout time.Duration `toml:"first_byte_timeout"`
	IdleTimeout      time.Duration `toml:"idle_timeout"`
	// History, set by the embedding program, supplies the session's
	// earlier messages.
	History History `toml:"-"`
}

// ErrConfig marks an invalid configuration.
var ErrConfig = fmt.Errorf("%w: anthropic config", belay.ErrInvalid)

func (c *Config) validate(name string) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: provider %q: %s", ErrConfig, name, fmt.Sprintf(format, args...))
	}
	if c.Type != "" && c.Type != "anthropic" {
		return bad("type is %q, want \"anthropic\"", c.Type)
	}
	base, err := httpapi.BaseURL(c.BaseURL, DefaultBaseURL, "https://api.anthropic.com/v1")
	if err != nil {
		return bad("%v", err)
	}
	c.BaseURL = base
	if c.AnthropicVersion == "" {
		c.AnthropicVersion = DefaultVersion
	}
	if !httpapi.ValidHeaderValue(c.AnthropicVersion) {
		return bad("anthropic_version must not hold a line break or control character")
	}
	if c.MaxTokens < 0 {
		return bad("max_tokens must not be negative")
	}
	if c.MaxTokens == 0 {
		c.MaxTokens = DefaultMaxTokens
	}
	for k, v := range c.Headers {
		if !httpapi.ValidHeaderName(k) {
			return bad("headers: %q is not a valid header name", k)
		}
		if !httpapi.ValidHeaderValue(v) {
			return bad("headers: the value of %s holds a line break or control character", k)
		}
		if strings.EqualFold(k, "x-api-key") || strings.EqualFold(k, "Authorization") {
			return bad("headers: set the key with api_key_env, api_key_file or api_key, not a %s header", k)
		}
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{
		{&c.ConnectTimeout, DefaultConnectTimeout},
		{&c.FirstByteTimeout, DefaultFirstByteTimeout},
		{&c.IdleTimeout, DefaultIdleTimeout},
	} {
		switch {
		case *d.v == 0:
			*d.v = d.def
		case *d.v < 0:
			*d.v = 0
		}
	}
	return nil
}
