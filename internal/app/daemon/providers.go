package daemon

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/belayhq/belay/internal/clock"
	"github.com/belayhq/belay/provider"
	"github.com/belayhq/belay/provider/anthropic"
	"github.com/belayhq/belay/provider/command"
	"github.com/belayhq/belay/provider/fake"
	"github.com/belayhq/belay/provider/openai"
)

// fakeConfig is a [providers.NAME] table with type = "fake".
type fakeConfig struct {
	Type   string `toml:"type"`
	Resume *bool  `toml:"resume"`
	// Script is a model-string script (fake's mini-language) used for runs
	// that bring none.
	Script string `toml:"script"`
}

// providerTypes builds a provider of each type from its TOML table.
var providerTypes = map[string]func(name string, d *Config, prim any, dataDir string) (provider.Provider, error){
	"openai": func(name string, c *Config, prim any, _ string) (provider.Provider, error) {
		var cfg openai.Config
		if err := c.decode(name, prim, &cfg); err != nil {
			return nil, err
		}
		cfg.History = sessionHistory(c.store)
		return openai.New(name, cfg)
	},
	"anthropic": func(name string, c *Config, prim any, _ string) (provider.Provider, error) {
		var cfg anthropic.Config
		if err := c.decode(name, prim, &cfg); err != nil {
			return nil, err
		}
		cfg.History = sessionHistory(c.store)
		return anthropic.New(name, cfg)
	},
	"command": func(name string, c *Config, prim any, dataDir string) (provider.Provider, error) {
		var cfg struct {
			Type string `toml:"type"`
			command.Config
		}
		if err := c.decode(name, prim, &cfg); err != nil {
			return nil, err
		}
		if cfg.RunDir == "" {
			cfg.RunDir = filepath.Join(dataDir, "command-runs")
		}
		return command.New(name, cfg.Config)
	},
	"fake": func(name string, c *Config, prim any, dataDir string) (provider.Provider, error) {
		var fc fakeConfig
		if err := c.decode(name, prim, &fc); err != nil {
			return nil, err
		}
		opts := fake.Options{Name: name, Resume: fc.Resume == nil || *fc.Resume, Clock: clock.Real, EffectsDir: filepath.Join(dataDir, "fake-effects")}
		if fc.Script != "" {
			s, err := fake.ParseModel(fake.ModelScriptPrefix + fc.Script)
			if err != nil {
				return nil, err
			}
			opts.Script = s
		}
		return fake.New(opts), nil
	},
}

// buildProviders returns the configured providers, plus the built-in fake
// provider "fake" (resumable) and browser provider "browser" unless the
// config defines those names.
func buildProviders(c *Config, dataDir string) (provider.Registry, error) {
	reg := provider.Registry{}
	names := make([]string, 0, len(c.Providers))
	for name := range c.Providers {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		prim := c.Providers[name]
		var head struct {
			Type string `toml:"type"`
		}
		if err := c.md.PrimitiveDecode(prim, &head); err != nil {
			return nil, fmt.Errorf("config: providers.%s: %w", name, err)
		}
		build, ok := providerTypes[head.Type]
		if !ok {
			return nil, fmt.Errorf("config: providers.%s: type %q is not one of %v", name, head.Type, providerTypeNames())
		}
		p, err := build(name, c, prim, dataDir)
		if err != nil {
			return nil, fmt.Errorf("config: providers.%s: %w", name, err)
		}
		reg[name] = p
	}
	if err := envProviders(c, reg); err != nil {
		return nil, err
	}
	if _, ok := reg["fake"]; !ok {
		reg["fake"] = fake.New(fake.Options{Name: "fake", Resume: true, Clock: clock.Real, EffectsDir: filepath.Join(dataDir, "fake-effects")})
	}
	if err := addBrowsers(c, reg, dataDir); err != nil {
		return nil, err
	}
	return reg, nil
}

// envProviders adds the providers the environment defines, as the
// providers' own SDKs and agent CLIs read it, unless config.toml defines
// the name (the file wins): "openai" when OPENAI_API_KEY or
// OPENAI_BASE_URL is set, "anthropic" when ANTHROPIC_API_KEY is set (with
// ANTHROPIC_BASE_URL). The key is held in the provider's memory only:
// nothing of it is written to disk.
func envProviders(c *Config, reg provider.Registry) error {
	getenv := c.getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	if _, ok := reg["openai"]; !ok && (getenv(openai.DefaultAPIKeyEnv) != "" || getenv("OPENAI_BASE_URL") != "") {
		cfg := openai.Config{BaseURL: getenv("OPENAI_BASE_URL"), APIKey: getenv(openai.DefaultAPIKeyEnv), History: sessionHistory(c.store)}
		p, err := openai.New("openai", cfg)
		if err != nil {
			return fmt.Errorf("environment (OPENAI_API_KEY / OPENAI_BASE_URL): %w", err)
		}
		reg["openai"] = p
	}
	if _, ok := reg["anthropic"]; !ok && getenv(anthropic.DefaultAPIKeyEnv) != "" {
		cfg := anthropic.Config{BaseURL: anthropicBase(getenv("ANTHROPIC_BASE_URL")), APIKey: getenv(anthropic.DefaultAPIKeyEnv), History: sessionHistory(c.store)}
		p, err := anthropic.New("anthropic", cfg)
		if err != nil {
			return fmt.Errorf("environment (ANTHROPIC_API_KEY / ANTHROPIC_BASE_URL): %w", err)
		}
		reg["anthropic"] = p
	}
	return nil
}

// anthropicBase turns ANTHROPIC_BASE_URL, which the Anthropic SDKs take
// without the API version ("https://api.anthropic.com"), into belay's API
// root, which includes it.
func anthropicBase(u string) string {
	u = strings.TrimRight(u, "/")
	if u == "" || strings.HasSuffix(u, "/v1") {
		return u
	}
	return u + "/v1"
}

func providerTypeNames() []string {
	out := make([]string, 0, len(providerTypes))
	for t := range providerTypes {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}
