package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/internal/app/daemon"
	"github.com/belayhq/belay/internal/testpg"
)

// serveIn runs a daemon on home and the store setting until the test
// ends, or until the stop it returns is called (it waits for the daemon).
func serveIn(t *testing.T, home, storeURL string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- daemon.Run(ctx, daemon.Options{DataDir: home, Store: storeURL, Version: "test", Ready: func() { close(ready) }, Logger: slog.New(slog.DiscardHandler)})
	}()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		t.Fatal(err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			require.NoError(t, <-done)
		})
	}
	t.Cleanup(stop)
	return stop
}

// TestSendBatch: belay send --batch sends a JSONL file (or standard
// input) in batches, prints one result per line (--json: one object per
// line), names the lines that were refused and exits 1 for them; a
// second run of the same file makes no keyed run twice; a line that is
// not a submission is a usage error and nothing is sent. On both stores.
func TestSendBatch(t *testing.T) {
	stores := map[string]func(t *testing.T) string{
		"file":     func(*testing.T) string { return "" },
		"postgres": func(t *testing.T) string { return testpg.Start(t, testpg.Options{}).Database(t) },
	}
	for name, url := range stores {
		t.Run(name, func(t *testing.T) {
			home := t.TempDir()
			serveIn(t, home, url(t))
			env := map[string]string{"BELAY_HOME": home, "BELAY_NO_AUTOSTART": "1"}

			var lines []string
			for i := range 12 {
				lines = append(lines, fmt.Sprintf(`{"prompt":"job %d","idempotencyKey":"job-%d","tags":["batch-test"]}`, i, i))
			}
			lines[4] = `{"prompt":"refused","provider":"nope","idempotencyKey":"job-4"}`
			lines = append(lines, "", `{"prompt":"its own provider","provider":"fake","idempotencyKey":"job-12"}`)
			file := filepath.Join(t.TempDir(), "runs.jsonl")
			require.NoError(t, os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o600))

			code, out, stderr := run(t, env, "send", "--batch", file, "--provider", "fake", "--json")
			require.Equal(t, ExitError, code, stderr)
			require.Contains(t, stderr, "1 of 13 submissions were refused")
			var results []batchResult
			sc := bufio.NewScanner(strings.NewReader(out))
			for sc.Scan() {
				var r batchResult
				require.NoError(t, json.Unmarshal(sc.Bytes(), &r), sc.Text())
				results = append(results, r)
			}
			require.Len(t, results, 13)
			runs := map[int]string{}
			for _, r := range results {
				if r.Line == 5 {
					require.Equal(t, 400, r.HTTPStatus)
					require.Equal(t, apitype.CodeInvalid, r.Error.Code)
					require.Contains(t, r.Error.Message, "nope")
					continue
				}
				require.Nil(t, r.Error, "line %d", r.Line)
				require.True(t, strings.HasPrefix(r.Run, "run_"), "line %d", r.Line)
				runs[r.Line] = r.Run
			}
			require.Contains(t, runs, 14, "the blank line is skipped, lines keep their numbers")

			// Again from standard input, human output: the same runs.
			var sout, serr bytes.Buffer
			code = Main(context.Background(), []string{"belay", "send", "--batch", "-", "--provider", "fake"}, Stdio{
				In: strings.NewReader(strings.Join(lines, "\n")), Out: &sout, Err: &serr,
				Getenv: func(k string) string { return env[k] },
			})
			require.Equal(t, ExitError, code, serr.String())
			require.Contains(t, serr.String(), "line 5: ")
			for line, id := range runs {
				require.Contains(t, sout.String(), id, "line %d is the same run", line)
			}
			code, out, stderr = run(t, env, "runs", "list", "--tag", "batch-test", "--json")
			require.Equal(t, ExitOK, code, stderr)
			var page apitype.RunPage
			require.NoError(t, json.Unmarshal([]byte(out), &page))
			require.Len(t, page.Runs, 11, "no keyed run was made twice")
			for _, id := range runs {
				code, _, stderr = run(t, env, "wait", "--timeout", "1m", id)
				require.Equal(t, ExitOK, code, stderr)
			}
		})
	}
}

// TestSendBatchUsage: what --batch refuses before it sends anything.
func TestSendBatchUsage(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	env := map[string]string{"BELAY_HOME": home, "BELAY_NO_AUTOSTART": "1"}
	file := filepath.Join(t.TempDir(), "runs.jsonl")
	write := func(s string) {
		require.NoError(t, os.WriteFile(file, []byte(s), 0o600))
	}
	for _, tc := range []struct {
		content string
		args    []string
		want    string
	}{
		{`{"prompt":"a","provider":"fake"}` + "\nnot json\n", nil, "line 2 is not a run submission"},
		{`{"prompt":"a","provider":"fake","bogus":1}`, nil, `unknown field "bogus"`},
		{`{"prompt":"a","provider":"fake"} {"prompt":"b"}`, nil, "more than one JSON value"},
		{`{"prompt":"a"}`, nil, "line 1 names neither a session nor a provider"},
		{"\n\n", nil, "holds no submissions"},
		{`{"prompt":"a","provider":"fake"}`, []string{"--tag", "x"}, "--tag applies to one run"},
		{`{"prompt":"a","provider":"fake"}`, []string{"--wait"}, "--wait applies to one run"},
		{`{"prompt":"a","provider":"fake"}`, []string{"a prompt"}, "give no prompt argument"},
	} {
		write(tc.content)
		code, _, stderr := run(t, env, append([]string{"send", "--batch", file}, tc.args...)...)
		require.Equal(t, ExitUsage, code, "%q %v: %s", tc.content, tc.args, stderr)
		require.Contains(t, stderr, tc.want)
		require.Regexp(t, `Try: .*belay send (--batch|--file|--help)`, stderr)
	}
	// No daemon was needed (or started) for any of them.
	_, err := os.Stat(filepath.Join(home, daemon.SocketName))
	require.True(t, os.IsNotExist(err))
}

// TestReadBatchFillsOnlyWhatTheLineLeavesOut: --provider and --model fill
// a line that names neither a session nor a provider, but never replace
// the model the line names.
func TestReadBatchFillsOnlyWhatTheLineLeavesOut(t *testing.T) {
	t.Parallel()
	in := strings.NewReader(`{"prompt":"a","model":"script:tokens=3"}
{"prompt":"b"}
{"prompt":"c","provider":"other"}
`)
	lines, err := readBatch(in, "fake", "echo")
	require.NoError(t, err)
	require.Len(t, lines, 3)
	require.Equal(t, "fake", lines[0].run.Provider)
	require.Equal(t, "script:tokens=3", lines[0].run.Model, "the line's model stays")
	require.Equal(t, "echo", lines[1].run.Model)
	require.Equal(t, "other", lines[2].run.Provider)
	require.Empty(t, lines[2].run.Model, "a line with its own provider takes nothing from the flags")
}
