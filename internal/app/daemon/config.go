package daemon

import (
	"errors"
	"fmt"
	"github.com/belayhq/belay/store/fsstore"
	"io/fs"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/belayhq/belay/runtime"
	"github.com/belayhq/belay/store"
)

// ConfigName is the optional configuration file in the data directory.
const ConfigName = "config.toml"

// Config is <data>/config.toml. Every part is optional.
type Config struct {
	Store struct {
		// Sync is "log" (default), "file" or "filesystem" (see fsstore.Options.Sync).
		Sync string `toml:"sync"`
		// LockTTL is how long the data dir lock's owner record stays valid
		// without a heartbeat (default 15s); the daemon stops writing if it
		// cannot prove its hold for three quarters of it.
		LockTTL duration `toml:"lock_ttl"`
		// URL selects the store: "file:" (the default, the embedded store
		// in the data directory) or "postgres://..." (pgstore). The
		// --store flag and BELAY_STORE win over it.
		URL string `toml:"url"`
		// Migrate applies pending PostgreSQL schema migrations at start
		// (default true); false makes a start on an old schema fail and
		// name `belay migrate`.
		Migrate *bool `toml:"migrate"`
	} `toml:"store"`
	Runs struct {
		// LeaseTTL is the run lease's TTL (default 60s): a run's owner
		// renews it at half of it and stops the run's side effects at
		// three quarters of it when it cannot; another node rescues the
		// runs of a dead node within about one TTL.
		LeaseTTL duration `toml:"lease_ttl"`
	} `toml:"runs"`
	Limits struct {
		Global      int            `toml:"global"`
		PerProvider map[string]int `toml:"per_provider"`
	} `toml:"limits"`
	Watchdog struct {
		AwaitingFirst duration `toml:"awaiting_first"`
		Streaming     duration `toml:"streaming"`
		ToolRunning   duration `toml:"tool_running"`
		AfterTurnEnd  duration `toml:"after_turn_end"`
	} `toml:"watchdog"`
	Retry struct {
		MaxRetries int      `toml:"max_retries"`
		Base       duration `toml:"base"`
		Max        duration `toml:"max"`
	} `toml:"retry"`
	Recovery struct {
		MaxAttempts int `toml:"max_attempts"`
	} `toml:"recovery"`
	Deadlines struct {
		Default duration            `toml:"default"`
		Per     map[string]duration `toml:"per"`
	} `toml:"deadlines"`
	Retention struct {
		KeepComplete duration `toml:"keep_complete"`
		KeepFailed   duration `toml:"keep_failed"`
		Grace        duration `toml:"grace"`
		Every        duration `toml:"every"`
	} `toml:"retention"`
	// Providers are named provider instances: [providers.NAME] with a type.
	Providers map[string]toml.Primitive `toml:"providers"`
	Webhooks  []WebhookConfig           `toml:"webhooks"`
	Hooks     []HookConfig              `toml:"hooks"`

	md    toml.MetaData
	store store.Store // set before providers are built
	// getenv reads the environment for the providers it defines
	// (os.Getenv unless a test sets it).
	getenv func(string) string
}

// WebhookConfig is one [[webhooks]] entry: deliveries are POSTed to URL,
// signed per the Standard Webhooks spec with Secret.
type WebhookConfig struct {
	URL string `toml:"url"`
	// Secret is "whsec_" followed by base64; SecretEnv names an
	// environment variable holding it instead.
	Secret    string `toml:"secret"`
	SecretEnv string `toml:"secret_env"`
	// Sessions and Types filter what is sent (empty: everything).
	Sessions []string `toml:"sessions"`
	Types    []string `toml:"types"`
}

// HookConfig is one [[hooks]] entry: Command runs with the delivery JSON on
// its standard input.
type HookConfig struct {
	Command  []string `toml:"command"`
	Sessions []string `toml:"sessions"`
	Types    []string `toml:"types"`
	Timeout  duration `toml:"timeout"`
}

type duration time.Duration

// durationErrPrefix starts the errors of duration's UnmarshalText. They
// never hold the value (tomlError shows them: it hides other messages, as
// they may echo a secret).
const durationErrPrefix = "not a duration belay takes: "

func (d *duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	switch {
	case err != nil:
		return errors.New(durationErrPrefix + `give a Go duration string such as "90s" or "2h" (a bare number is not one)`)
	case v == 0:
		// Zero would be taken as "not set" and the default used: say so
		// rather than do it silently.
		return errors.New(durationErrPrefix + "zero means the default here; leave the key out for it, or give a positive duration")
	}
	*d = duration(v)
	return nil
}

// LoadConfig reads <dir>/config.toml; a missing file is an empty config. A
// file holding secrets must not be readable by others.
func LoadConfig(dir string) (*Config, error) {
	path := filepath.Join(dir, ConfigName)
	cfg := Config{getenv: os.Getenv}
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &cfg, nil
	}
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	md, err := toml.DecodeFile(path, &cfg)
	if err != nil {
		return nil, fmt.Errorf("config: %s: %w", path, tomlError(err))
	}
	if undec := md.Undecoded(); len(undec) > 0 {
		for _, k := range undec {
			if len(k) > 0 && k[0] == "providers" {
				continue // decoded per provider type
			}
			return nil, fmt.Errorf("config: %s: unknown key %q", path, k.String())
		}
	}
	cfg.md = md
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("config: %s: %w", path, err)
	}
	if fi.Mode().Perm()&0o077 != 0 && (md.IsDefined("providers") || len(cfg.Webhooks) > 0) {
		return nil, fmt.Errorf("config: %s may hold secrets and is readable by others (mode %v); run: chmod 600 %s", path, fi.Mode().Perm(), path)
	}
	if fi.Mode().Perm()&0o077 != 0 && len(cfg.Hooks) > 0 {
		// Hooks run commands: whoever can change the file runs them as us.
		return nil, fmt.Errorf("config: %s defines hooks, which run commands, and is open to others (mode %v); run: chmod 600 %s", path, fi.Mode().Perm(), path)
	}
	return &cfg, nil
}

// tomlError describes a TOML error by its place only: the text around a
// syntax error may be part of a secret (an unquoted api_key), so it is
// never echoed.
func tomlError(err error) error {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		if rest, ok := strings.CutPrefix(pe.Message, durationErrPrefix); ok && pe.LastKey != "" {
			return fmt.Errorf("%s (line %d) is %s%s", pe.LastKey, pe.Position.Line, durationErrPrefix, rest)
		}
		msg := fmt.Sprintf("TOML syntax error at line %d, column %d", pe.Position.Line, pe.Position.Col)
		if pe.LastKey != "" {
			msg += fmt.Sprintf(" (after key %q)", pe.LastKey)
		}
		return errors.New(msg + "; the line is not shown, as it may hold a secret")
	}
	return err
}

// CheckConfig reports whether the daemon would accept <dir>/config.toml
// and the providers the environment defines, without starting anything
// or changing any file. The CLI runs it before it starts a daemon, so that
// a refused config reaches the person as that error.
func CheckConfig(dir string) error {
	cfg, err := LoadConfig(dir)
	if err != nil {
		return err
	}
	if _, err := buildProviders(cfg, dir); err != nil {
		return err
	}
	for _, k := range cfg.md.Undecoded() {
		return fmt.Errorf("config: unknown key %q", k.String())
	}
	return nil
}

// validate checks what decoding cannot: no negative durations or counts
// (retention.every excepted: negative turns pruning off), webhooks that
// can be signed and sent, hooks that can be run. A mistake is an error at
// start, never a default or a notifier left out.
func (c *Config) validate() error {
	if c.Store.URL != "" {
		// Not echoed: a store URL may hold a password.
		if _, err := StoreKind(c.Store.URL); err != nil {
			return errors.New(`store.url is neither "file:" nor a postgres://USER@HOST/DB URL`)
		}
	}
	switch c.Store.Sync {
	case "", fsstore.SyncLog, fsstore.SyncFile, fsstore.SyncFilesystem:
	default:
		return fmt.Errorf("store.sync is %q; it is %q (the default), %q or %q", c.Store.Sync, fsstore.SyncLog, fsstore.SyncFile, fsstore.SyncFilesystem)
	}
	durs := map[string]duration{
		"watchdog.awaiting_first": c.Watchdog.AwaitingFirst, "watchdog.streaming": c.Watchdog.Streaming,
		"watchdog.tool_running": c.Watchdog.ToolRunning, "watchdog.after_turn_end": c.Watchdog.AfterTurnEnd,
		"retry.base": c.Retry.Base, "retry.max": c.Retry.Max, "deadlines.default": c.Deadlines.Default,
		"retention.keep_complete": c.Retention.KeepComplete, "retention.keep_failed": c.Retention.KeepFailed,
		"retention.grace": c.Retention.Grace, "runs.lease_ttl": c.Runs.LeaseTTL,
	}
	for k, d := range c.Deadlines.Per {
		durs["deadlines.per."+k] = d
	}
	for i, h := range c.Hooks {
		durs[fmt.Sprintf("hooks[%d].timeout", i)] = h.Timeout
	}
	for _, k := range slices.Sorted(maps.Keys(durs)) {
		if durs[k] < 0 {
			return fmt.Errorf("%s must not be negative", k)
		}
	}
	counts := map[string]int{"limits.global": c.Limits.Global, "retry.max_retries": c.Retry.MaxRetries, "recovery.max_attempts": c.Recovery.MaxAttempts}
	for k, n := range c.Limits.PerProvider {
		counts["limits.per_provider."+k] = n
	}
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		if counts[k] < 0 {
			return fmt.Errorf("%s must not be negative", k)
		}
	}
	for i, w := range c.Webhooks {
		// A webhook is known by its URL in the store's notification
		// records: two with one URL would share them.
		if j := slices.IndexFunc(c.Webhooks[:i], func(o WebhookConfig) bool { return o.URL == w.URL }); j >= 0 {
			return fmt.Errorf("webhooks[%d]: url is the same as webhooks[%d]'s; merge them (sessions and types lists)", i, j)
		}
		u, err := url.Parse(w.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("webhooks[%d]: url is not an http(s) URL", i)
		}
		secret := w.Secret
		if w.SecretEnv != "" {
			secret = os.Getenv(w.SecretEnv)
		}
		if _, err := webhookKey(secret); err != nil {
			return fmt.Errorf("webhooks[%d]: %w", i, err)
		}
	}
	for i, h := range c.Hooks {
		if len(h.Command) == 0 || h.Command[0] == "" {
			return fmt.Errorf("hooks[%d]: command is empty", i)
		}
		if slices.ContainsFunc(h.Command, func(a string) bool { return strings.IndexByte(a, 0) >= 0 }) {
			return fmt.Errorf("hooks[%d]: command must not hold a NUL byte", i)
		}
	}
	return nil
}

// runtimeOptions applies the config to runtime options.
func (c *Config) runtimeOptions(o *runtime.Options) {
	o.Limits = runtime.Limits{Global: c.Limits.Global, PerProvider: c.Limits.PerProvider}
	o.LeaseTTL = time.Duration(c.Runs.LeaseTTL)
	o.Tiers = runtime.Tiers{
		AwaitingFirst: time.Duration(c.Watchdog.AwaitingFirst), Streaming: time.Duration(c.Watchdog.Streaming),
		ToolRunning: time.Duration(c.Watchdog.ToolRunning), AfterTurnEnd: time.Duration(c.Watchdog.AfterTurnEnd),
	}
	o.Retry = runtime.RetryPolicy{MaxRetries: c.Retry.MaxRetries, Base: time.Duration(c.Retry.Base), Max: time.Duration(c.Retry.Max)}
	o.Recovery = runtime.RecoveryPolicy{MaxAttempts: c.Recovery.MaxAttempts}
	o.DefaultDeadline = time.Duration(c.Deadlines.Default)
	if len(c.Deadlines.Per) > 0 {
		o.Deadlines = map[string]time.Duration{}
		for k, v := range c.Deadlines.Per {
			o.Deadlines[k] = time.Duration(v)
		}
	}
	o.Retention = store.PrunePolicy{
		KeepComplete: time.Duration(c.Retention.KeepComplete), KeepFailed: time.Duration(c.Retention.KeepFailed),
		Grace: time.Duration(c.Retention.Grace),
	}
	o.PruneEvery = time.Duration(c.Retention.Every)
}

// decode decodes the TOML table of provider name strictly. A duration
// written as a number is an error: TOML integers would be nanoseconds.
func (c *Config) decode(name string, prim any, v any) error {
	p, ok := prim.(toml.Primitive)
	if !ok {
		return fmt.Errorf("not a table")
	}
	if err := c.md.PrimitiveDecode(p, v); err != nil {
		return err
	}
	for _, key := range durationKeys(reflect.TypeOf(v).Elem()) {
		if typ := c.md.Type("providers", name, key); typ != "" && typ != "String" {
			return fmt.Errorf("%s is a TOML %s: write a duration as a string like \"30s\"", key, strings.ToLower(typ))
		}
	}
	return nil
}

// durationKeys returns the TOML keys of t's time.Duration fields,
// embedded structs included.
func durationKeys(t reflect.Type) []string {
	var keys []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		switch {
		case f.Anonymous && f.Type.Kind() == reflect.Struct:
			keys = append(keys, durationKeys(f.Type)...)
		case f.Type == reflect.TypeFor[time.Duration]():
			if key, _, _ := strings.Cut(f.Tag.Get("toml"), ","); key != "" && key != "-" {
				keys = append(keys, key)
			}
		}
	}
	return keys
}
