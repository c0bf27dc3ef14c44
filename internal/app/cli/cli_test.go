package cli

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func run(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(context.Background(), append([]string{"belay"}, args...), Stdio{
		In: &bytes.Buffer{}, Out: &out, Err: &errb,
		Getenv: func(k string) string { return env[k] },
	})
	return code, out.String(), errb.String()
}

func TestExitCodes(t *testing.T) {
	t.Parallel()
	home := map[string]string{"BELAY_HOME": t.TempDir()}
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"version"}, ExitOK},
		{[]string{"version", "--json"}, ExitOK},
		{[]string{"nope"}, ExitUsage},
		{[]string{"version", "--bad"}, ExitUsage},
		{[]string{"version", "x"}, ExitUsage},
		{[]string{"bench", "journal", "--writers", "1"}, ExitUsage},
		{[]string{"bench", "journal", "--open-size", "x"}, ExitUsage},
		{[]string{"bench", "journal", "--writers", "1", "--sessions", "1", "--duration", "20ms", "--open-size", "0", "--dir", "/proc/nonexistent/x"}, ExitError},
	} {
		code, _, stderr := run(t, home, tc.args...)
		require.Equal(t, tc.code, code, "%v: %s", tc.args, stderr)
	}
}

func TestParseSize(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{"0": 0, "200MB": 200e6, "1GB": 1e9, "1gb": 1e9, "512KiB": 512 << 10, "2M": 2 << 20, "1.5GB": 1.5e9, "100": 100} {
		got, err := parseSize(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "lots", "-1MB", "MB"} {
		_, err := parseSize(in)
		require.Error(t, err, in)
	}
}
