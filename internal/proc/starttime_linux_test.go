package proc

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStartTimeLinuxToken(t *testing.T) {
	t.Parallel()
	tok, err := StartTime(os.Getpid())
	require.NoError(t, err)
	boot, err := bootID()
	require.NoError(t, err)
	require.Regexp(t, "^"+boot+`:\d+$`, tok)
}
