package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestProvidersFromTheEnvironment(t *testing.T) {
	t.Parallel()
	env := func(vars map[string]string) func(string) string { return func(k string) string { return vars[k] } }
	dir := t.TempDir()
	cfg, err := LoadConfig(dir)
	require.NoError(t, err)

	cfg.getenv = env(nil)
	reg, err := buildProviders(cfg, dir)
	require.NoError(t, err)
	require.Equal(t, []string{"browser", "fake"}, reg.Names(), "nothing in the environment: only the built-in ones")

	cfg.getenv = env(map[string]string{
		"OPENAI_API_KEY": "sk-env-secret-0123456789", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
		"ANTHROPIC_API_KEY": "sk-ant-env-secret-0123456789", "ANTHROPIC_BASE_URL": "http://127.0.0.1:9",
	})
	reg, err = buildProviders(cfg, dir)
	require.NoError(t, err)
	require.Equal(t, []string{"anthropic", "browser", "fake", "openai"}, reg.Names())

	cfg.getenv = env(map[string]string{"OPENAI_BASE_URL": "http://127.0.0.1:8080/v1"})
	reg, err = buildProviders(cfg, dir)
	require.NoError(t, err)
	require.Contains(t, reg.Names(), "openai", "a local server needs no key")

	cfg.getenv = env(map[string]string{"OPENAI_BASE_URL": "ftp://nowhere"})
	_, err = buildProviders(cfg, dir)
	require.ErrorContains(t, err, "OPENAI_BASE_URL")

	require.Equal(t, "https://api.anthropic.com/v1", anthropicBase("https://api.anthropic.com/"))
	require.Equal(t, "http://proxy/v1", anthropicBase("http://proxy/v1"))
}

func TestConfigFileWinsOverTheEnvironment(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, ConfigName), []byte("[providers.openai]\ntype = \"fake\"\n"), 0o600))
	cfg, err := LoadConfig(dir)
	require.NoError(t, err)
	cfg.getenv = func(k string) string { return map[string]string{"OPENAI_API_KEY": "sk-env-0123456789"}[k] }
	reg, err := buildProviders(cfg, dir)
	require.NoError(t, err)
	p, err := reg.Get("openai")
	require.NoError(t, err)
	require.Equal(t, "openai", p.Name())
	require.Equal(t, "*fake.Provider", typeName(p), "config.toml wins")
}

func TestConfigErrorsKeepSecretsAndHooksSafe(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, ConfigName)
	require.NoError(t, os.WriteFile(path, []byte("[providers.openai]\ntype = \"openai\"\napi_key = sk-proj-SECRETSECRET1234\n"), 0o600))
	err := CheckConfig(dir)
	require.Error(t, err)
	require.Contains(t, err.Error(), "line 3")
	require.NotContains(t, err.Error(), "SECRET")
	require.NotContains(t, err.Error(), "sk-proj")

	require.NoError(t, os.WriteFile(path, []byte("[[hooks]]\ncommand = [\"true\"]\n"), 0o600))
	require.NoError(t, os.Chmod(path, 0o666))
	err = CheckConfig(dir)
	require.ErrorContains(t, err, "hooks")
	require.ErrorContains(t, err, "chmod 600")
	require.NoError(t, os.Chmod(path, 0o600))
	require.NoError(t, CheckConfig(dir))
}

func typeName(v any) string { return fmt.Sprintf("%T", v) }
