package openai

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/provider/internal/httpapi"
	"github.com/belayhq/belay/provider/internal/prompt"
)

// APIs a Config can select.
const (
	APIChat      = "chat"
	APIResponses = "responses"
)

// Defaults.
const (
	DefaultBaseURL          = "https://api.openai.com/v1"
	DefaultAPIKeyEnv        = "OPENAI_API_KEY"
	DefaultConnectTimeout   = 10 * time.Second
	DefaultFirstByteTimeout = 120 * time.Second
	DefaultIdleTimeout      = 10 * time.Minute
	DefaultCancelTimeout    = 10 * time.Second
	DefaultPollInterval     = 2 * time.Second
	DefaultStreamRetries    = 2
)

// Message is one message of a session's history (see History).
type Message = prompt.Message

// ToolCall is a tool call inside an assistant Message.
type ToolCall = prompt.ToolCall

// History returns a session's conversation before the run's prompt,
// oldest first; the provider sends it, then the prompt as the user turn.
// Without one, only the prompt is sent.
type History = prompt.History

// Config configures an openai provider; the daemon decodes a
// [providers.<name>] table with type = "openai" into it.
type Config struct {
	// Type is the table's provider type; "" or "openai".
	Type string `toml:"type"`
	// BaseURL is the API root, up to and including the version
	// ("https://api.openai.com/v1", "http://127.0.0.1:8000/v1").
	BaseURL string `toml:"base_url"`
	// API is "chat" (Chat Completions, default) or "responses" (the
	// Responses API in background mode, resumable).
	API string `toml:"api"`
	// Model is the default model; a run's model overrides it.
	Model string `toml:"model"`
	// The API key comes from the environment variable APIKeyEnv, else the
	// file APIKeyFile (mode 0600), else APIKey inline. With none set,
	// OPENAI_API_KEY is used if present; a key is required only for
	// api.openai.com (local servers usually take none).
	APIKeyEnv  string `toml:"api_key_env"`
	APIKeyFile string `toml:"api_key_file"`
	APIKey     string `toml:"api_key"`
	// Organization and Project set the OpenAI-Organization and
	// OpenAI-Project headers.
	Organization string `toml:"organization"`
	Project      string `toml:"project"`
	// Headers are extra request headers (not Authorization).
	Headers map[string]string `toml:"headers"`
	// ConnectTimeout bounds connecting (TCP and TLS), FirstByteTimeout the
	// wait for response headers, IdleTimeout the silence inside a stream
	// (keepalives count). Negative disables one; 0 takes the default.
	ConnectTimeout   time.Duration `toml:"connect_timeout"`
	FirstByteTimeout time.Duration `toml:"first_byte_timeout"`
	IdleTimeout      time.Duration `toml:"idle_timeout"`
	// Responses API only. CancelTimeout bounds the cancel call made when a
	// run is cancelled; PollInterval is the polling period when a stream
	// cannot be resumed; StreamRetries is how many times a broken stream
	// is resumed in-process before polling; CursorEvery reports the
	// cursor every N stream events (1: every event, the default, so a
	// resume after a crash repeats at most one event).
	CancelTimeout time.Duration `toml:"cancel_timeout"`
	PollInterval  time.Duration `toml:"poll_interval"`
	StreamRetries int           `toml:"stream_retries"`
	CursorEvery   int           `toml:"cursor_every"`
	// History, set by the embedding program, supplies the session's
	// earlier messages.
	History History `toml:"-"`
}

// ErrConfig marks an invalid configuration.
var ErrConfig = fmt.Errorf("%w: openai config", belay.ErrInvalid)

func (c *Config) validate(name string) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: provider %q: %s", ErrConfig, name, fmt.Sprintf(format, args...))
	}
	if c.Type != "" && c.Type != "openai" {
		return bad("type is %q, want \"openai\"", c.Type)
	}
	base, err := httpapi.BaseURL(c.BaseURL, DefaultBaseURL, "http://127.0.0.1:8000/v1")
	if err != nil {
		return bad("%v", err)
	}
	c.BaseURL = base
	if !httpapi.ValidHeaderValue(c.Organization) || !httpapi.ValidHeaderValue(c.Project) {
		return bad("organization and project must not hold a line break or control character")
	}
	switch c.API {
	case "":
		c.API = APIChat
	case APIChat, APIResponses:
	default:
		return bad("api is %q, want \"chat\" or \"responses\"", c.API)
	}
	for k, v := range c.Headers {
		if !httpapi.ValidHeaderName(k) {
			return bad("headers: %q is not a valid header name", k)
		}
		if !httpapi.ValidHeaderValue(v) {
			return bad("headers: the value of %s holds a line break or control character", k)
		}
		if strings.EqualFold(k, "Authorization") {
			return bad("headers: set the key with api_key_env, api_key_file or api_key, not an Authorization header")
		}
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"connect_timeout", &c.ConnectTimeout, DefaultConnectTimeout},
		{"first_byte_timeout", &c.FirstByteTimeout, DefaultFirstByteTimeout},
		{"idle_timeout", &c.IdleTimeout, DefaultIdleTimeout},
		{"cancel_timeout", &c.CancelTimeout, DefaultCancelTimeout},
		{"poll_interval", &c.PollInterval, DefaultPollInterval},
	} {
		switch {
		case *d.v == 0:
			*d.v = d.def
		case *d.v < 0 && (d.name == "cancel_timeout" || d.name == "poll_interval"):
			return bad("%s must be positive", d.name)
		case *d.v < 0:
			*d.v = 0 // disabled
		}
	}
	if c.StreamRetries < 0 {
		return bad("stream_retries must not be negative")
	}
	if c.StreamRetries == 0 {
		c.StreamRetries = DefaultStreamRetries
	}
	if c.CursorEvery < 0 {
		return bad("cursor_every must not be negative")
	}
	if c.CursorEvery == 0 {
		c.CursorEvery = 1
	}
	return nil
}

func (c *Config) loadKey(name string) (string, error) {
	src := httpapi.KeySource{Env: c.APIKeyEnv, File: c.APIKeyFile, Inline: c.APIKey, DefaultEnv: DefaultAPIKeyEnv}
	key, _, err := httpapi.LoadKey(src)
	if err == nil {
		return key, nil
	}
	configured := c.APIKeyEnv != "" || c.APIKeyFile != "" || c.APIKey != ""
	if errors.Is(err, httpapi.ErrNoKey) && !configured && !isOpenAI(c.BaseURL) {
		return "", nil // a local server without auth
	}
	return "", fmt.Errorf("%w: provider %q: %v", ErrConfig, name, err)
}

func isOpenAI(base string) bool {
	u, err := url.Parse(base)
	return err == nil && strings.EqualFold(u.Hostname(), "api.openai.com")
}
