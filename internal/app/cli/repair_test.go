package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay/transcript"
)

const brokenPi = `{"type":"session","version":3,"id":"s","timestamp":"2026-03-01T10:00:00.000Z","cwd":"/w"}
{"type":"message","id":"b1","parentId":null,"timestamp":"2026-03-01T10:00:01.000Z","message":{"role":"user","content":"run","timestamp":1}}
{"type":"message","id":"b2","parentId":"b1","timestamp":"2026-03-01T10:00:02.000Z","message":{"role":"assistant","content":[{"type":"toolCall","id":"c1","name":"bash","arguments":{}}],"stopReason":"toolUse","timestamp":2}}
{"torn
`

// runCmd runs a command built by a constructor, as Main would.
func runCmd(t *testing.T, cmd func(Stdio) *cobra.Command, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	stdio := Stdio{In: &bytes.Buffer{}, Out: &out, Err: &errb, Getenv: func(k string) string {
		if k == "BELAY_HOME" {
			return t.TempDir()
		}
		return ""
	}}
	c := cmd(stdio)
	c.SetArgs(args)
	c.SetOut(&out)
	c.SetErr(&errb)
	c.SilenceErrors, c.SilenceUsage = true, true
	err := c.ExecuteContext(context.Background())
	var ue *usageError
	var ee *exitError
	switch {
	case err == nil:
		return ExitOK, out.String(), errb.String()
	case errors.As(err, &ue):
		return ExitUsage, out.String(), ue.Error()
	case errors.As(err, &ee):
		return ee.code, out.String(), ee.Error()
	}
	return ExitError, out.String(), err.Error()
}

func TestRepairCmd(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "s.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(brokenPi), 0o600))

	code, out, _ := runCmd(t, newRepairCmd, "--json", path)
	require.Equal(t, ExitOK, code)
	var res repairOutput
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	require.True(t, res.OK)
	require.Len(t, res.Files, 1)
	f := res.Files[0]
	require.Equal(t, transcript.StatusRepaired, f.Status)
	require.Equal(t, transcript.FormatPi, f.Format)
	require.Len(t, f.Changes, 2)
	require.Equal(t, transcript.ChangeDropLine, f.Changes[0].Kind)
	require.Equal(t, 4, f.Changes[0].Line)
	require.FileExists(t, f.Backup)

	code, out, _ = runCmd(t, newRepairCmd, path)
	require.Equal(t, ExitOK, code)
	require.Contains(t, out, "clean, not changed")

	code, out, msg := runCmd(t, newRepairCmd, filepath.Join(dir, "missing.jsonl"))
	require.Equal(t, ExitError, code)
	require.Contains(t, out, "missing")
	require.Contains(t, msg, "not repaired")

	code, _, _ = runCmd(t, newRepairCmd)
	require.Equal(t, ExitUsage, code)
	code, _, _ = runCmd(t, newRepairCmd, "--format", "yaml", path)
	require.Equal(t, ExitUsage, code)
	code, _, _ = runCmd(t, newRepairCmd, "--session", "bad")
	require.Equal(t, ExitUsage, code)
}

func TestBenchRepairCmdUsage(t *testing.T) {
	t.Parallel()
	code, _, _ := runCmd(t, newBenchRepairCmd, "--size", "lots")
	require.Equal(t, ExitUsage, code)
	code, _, _ = runCmd(t, newBenchRepairCmd, "--messages", "0")
	require.Equal(t, ExitUsage, code)
}
