package datadir

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestResolveOrder(t *testing.T) {
	t.Parallel()
	env := map[string]string{"HOME": "/home/u"}
	get := func(k string) string { return env[k] }
	d, err := Resolve("", get)
	require.NoError(t, err)
	require.Equal(t, "/home/u/.local/state/belay", d)
	env["XDG_STATE_HOME"] = "/xdg"
	d, _ = Resolve("", get)
	require.Equal(t, "/xdg/belay", d)
	env["BELAY_HOME"] = "/b"
	d, _ = Resolve("", get)
	require.Equal(t, "/b", d)
	d, _ = Resolve("rel", get)
	require.True(t, filepath.IsAbs(d))
}
