package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestConfigRefusesSilentDefaults: a negative duration or count, a
// provider duration written as a number (TOML integers would be
// nanoseconds), a webhook that cannot be signed and a hook without a
// command were each taken (or skipped with a log line) instead of refused.
func TestConfigRefusesSilentDefaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ toml, want string }{
		{"[watchdog]\nstreaming = \"-5m\"\n", "watchdog.streaming must not be negative"},
		{"[deadlines]\nper = { \"x/y\" = \"-1s\" }\n", "deadlines.per.x/y must not be negative"},
		{"[limits]\nglobal = -1\n", "limits.global must not be negative"},
		{"[retry]\nbase = 5\n", `retry.base (line 2) is not a duration belay takes: give a Go duration string such as "90s"`},
		{"[retention]\ngrace = \"0s\"\n", "retention.grace (line 2) is not a duration belay takes: zero means the default here"},
		{"[watchdog]\nstreaming = \"soon\"\n", "watchdog.streaming (line 2) is not a duration"},
		{"[[webhooks]]\nurl = \"https://example.com/h\"\nsecret = \"nope\"\n", "webhooks[0]"},
		{"[[webhooks]]\nurl = \"example.com\"\nsecret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n", "webhooks[0]: url"},
		{"[[hooks]]\ncommand = []\n", "hooks[0]: command is empty"},
		{"[[webhooks]]\nurl = \"https://example.com/h\"\nsecret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n[[webhooks]]\nurl = \"https://example.com/h\"\nsecret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n", "webhooks[1]: url is the same as webhooks[0]'s"},
		{"[providers.o]\ntype = \"openai\"\nbase_url = \"http://127.0.0.1:1/v1\"\nidle_timeout = 600\n", `idle_timeout is a TOML integer: write a duration as a string like "30s"`},
		{"[providers.c]\ntype = \"command\"\nargv = [\"x\"]\nkill_grace = 5\n", "kill_grace is a TOML integer"},
		{"[store]\nurl = \"mysql://u:pw@x/db\"\n", `store.url is neither "file:" nor a postgres://USER@HOST/DB URL`},
		{"[store]\nsync = \"never\"\n", `store.sync is "never"; it is "log" (the default), "file" or "filesystem"`},
	} {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, ConfigName), []byte(tc.toml), 0o600))
		cfg, err := LoadConfig(dir)
		if err == nil {
			_, err = buildProviders(cfg, dir)
		}
		require.ErrorContains(t, err, tc.want, "%s", tc.toml)
	}
	// A bad duration is named by its key and line, never echoed (a line
	// of a config may hold a secret).
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, ConfigName), []byte("[watchdog]\nstreaming = \"sk-secret\"\n"), 0o600))
	_, err := LoadConfig(dir)
	require.ErrorContains(t, err, "watchdog.streaming")
	require.NotContains(t, err.Error(), "sk-secret")

	dir = t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, ConfigName), []byte("[retention]\nevery = \"-1s\"\n"), 0o600))
	cfg, err := LoadConfig(dir)
	require.NoError(t, err, "a negative retention.every turns pruning off")
	require.Equal(t, -time.Second, time.Duration(cfg.Retention.Every))
}

// FuzzConfig loads arbitrary config.toml files and builds their
// providers, as the daemon does at start. Loading must not panic; a
// config it takes has no negative durations or counts (but
// retention.every), holds secrets only when it is private, and builds a
// registry of providers named after their tables, the fake included, with
// no key left undecoded. Anything else is an error that names the file.
func FuzzConfig(f *testing.F) {
	f.Add("[store]\nsync = \"file\"\n[limits]\nglobal = 8\nper_provider = { openai = 4 }\n[watchdog]\nawaiting_first = \"120s\"\nstreaming = \"120s\"\n"+
		"[retry]\nmax_retries = 3\nbase = \"1s\"\nmax = \"60s\"\n[recovery]\nmax_attempts = 2\n[deadlines]\ndefault = \"2h\"\nper = { \"openai/o3-pro\" = \"90m\" }\n"+
		"[retention]\nkeep_complete = \"336h\"\nevery = \"1h\"\n", false)
	f.Add("[providers.local]\ntype = \"openai\"\nbase_url = \"http://127.0.0.1:8000/v1\"\nmodel = \"m\"\nfirst_byte_timeout = \"10m\"\n"+
		"[providers.a]\ntype = \"anthropic\"\napi_key = \"k-123456\"\n[providers.a.headers]\nanthropic-beta = \"x\"\n"+
		"[providers.c]\ntype = \"command\"\npreset = \"claude\"\n[providers.fake]\ntype = \"fake\"\nresume = false\nscript = \"reply:hi\"\n", false)
	f.Add("[[webhooks]]\nurl = \"https://example.com/belay\"\nsecret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\ntypes = [\"run.completed\"]\n"+
		"[[hooks]]\ncommand = [\"notify-send\", \"belay\"]\ntimeout = \"30s\"\n", true)
	f.Add("[providers.x]\ntype = \"openai\"\nbase_url = \"http://h/v1\"\nbogus = 1\n", false)
	f.Add("[providers.x]\ntype = \"nope\"\n", false)
	f.Add("[watchdog]\nstreaming = \"-5m\"\n", false)
	f.Add("[providers.o]\ntype = \"openai\"\nbase_url = \"http://h/v1\"\nidle_timeout = 600\n", false)
	f.Add("[[hooks]]\ncommand = []\n", false)
	f.Add("unknown = 1\n", false)
	f.Fuzz(func(t *testing.T, text string, public bool) {
		dir := t.TempDir()
		path := filepath.Join(dir, ConfigName)
		mode := os.FileMode(0o600)
		if public {
			mode = 0o644
		}
		if err := os.WriteFile(path, []byte(text), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil { // whatever the umask
			t.Fatal(err)
		}
		cfg, err := LoadConfig(dir)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "config: ") {
				t.Fatalf("error does not say it is the config's: %v", err)
			}
			return
		}
		if public && (cfg.md.IsDefined("providers") || len(cfg.Webhooks) > 0) {
			t.Fatal("took a config readable by others that may hold secrets")
		}
		for _, d := range []duration{cfg.Watchdog.AwaitingFirst, cfg.Watchdog.Streaming, cfg.Watchdog.ToolRunning, cfg.Watchdog.AfterTurnEnd,
			cfg.Retry.Base, cfg.Retry.Max, cfg.Deadlines.Default, cfg.Retention.KeepComplete, cfg.Retention.KeepFailed, cfg.Retention.Grace} {
			if d < 0 {
				t.Fatalf("negative duration %v", time.Duration(d))
			}
		}
		for _, d := range cfg.Deadlines.Per {
			if d < 0 {
				t.Fatalf("negative deadline %v", time.Duration(d))
			}
		}
		if cfg.Limits.Global < 0 || cfg.Retry.MaxRetries < 0 || cfg.Recovery.MaxAttempts < 0 {
			t.Fatalf("negative count in %+v", cfg)
		}
		for _, h := range cfg.Hooks {
			if len(h.Command) == 0 || h.Command[0] == "" || h.Timeout < 0 {
				t.Fatalf("hook %+v", h)
			}
		}
		for _, w := range cfg.Webhooks {
			secret := w.Secret
			if w.SecretEnv != "" {
				secret = os.Getenv(w.SecretEnv)
			}
			if _, err := webhookKey(secret); err != nil {
				t.Fatalf("webhook %s: %v", w.URL, err)
			}
		}
		targets, err := notifyTargets(cfg)
		if err != nil {
			t.Fatalf("accepted config has notification targets that cannot be built: %v", err)
		}
		names := map[string]bool{}
		for _, tg := range targets {
			if names[tg.Name] {
				t.Fatalf("two notification targets named %s", tg.Name)
			}
			names[tg.Name] = true
		}
		reg, err := buildProviders(cfg, dir)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "config: providers.") {
				t.Fatalf("provider error does not name its table: %v", err)
			}
			return
		}
		if len(cfg.md.Undecoded()) > 0 {
			return // the daemon refuses this config (daemon.go)
		}
		if reg["fake"] == nil {
			t.Fatal("no fake provider")
		}
		for name, p := range reg {
			if p.Name() != name {
				t.Fatalf("provider %q is named %q", name, p.Name())
			}
			if c, ok := p.(interface{ Close() error }); ok {
				_ = c.Close()
			}
		}
		for name := range cfg.Providers {
			if reg[name] == nil {
				t.Fatalf("provider %q was not built", name)
			}
		}
	})
}
