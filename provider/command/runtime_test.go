package command

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/clock"
	"github.com/belayhq/belay/provider"
	"github.com/belayhq/belay/runtime"
	"github.com/belayhq/belay/store/fsstore"
)

func TestRuntimeResumesAfterRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir, data := t.TempDir(), t.TempDir()
	out := []string{
		`{"type":"text","text":"one "}`,
		`{"type":"tool_call","id":"c1","name":"deploy","input":{}}`,
		`{"type":"tool_result","id":"c1","content":"deployed"}`,
		`{"type":"text","text":"two "}`,
	}
	cursor := 0
	for _, l := range out {
		cursor += len(l) + 1
	}
	s := agentScript{Steps: append(lines(out...),
		agentStep{WaitFile: filepath.Join(dir, "go")},
		agentStep{Line: `{"type":"text","text":"three"}`},
		agentStep{Line: `{"type":"done"}`},
	)}
	// The runtime's stop cancels with provider.ErrDetach: the agent goes on.
	det := newProvider(t, agentConfig(t, FormatJSONL, s))

	open := func() (*fsstore.Store, *runtime.Runtime) {
		st, err := fsstore.Open(ctx, data, fsstore.Options{})
		require.NoError(t, err)
		rt, err := runtime.New(runtime.Options{
			Store: st, Providers: provider.Registry{"agent": det}, Clock: clock.Real, PruneEvery: -1,
		})
		require.NoError(t, err)
		require.NoError(t, rt.Start(ctx))
		return st, rt
	}
	shut := func(st *fsstore.Store, rt *runtime.Runtime) {
		sctx, cancel := context.WithTimeout(ctx, patience)
		defer cancel()
		require.NoError(t, rt.Stop(sctx))
		require.NoError(t, st.Close())
	}

	st, rt := open()
	run, err := rt.Submit(ctx, runtime.SubmitRequest{Provider: "agent", Prompt: "deploy it"})
	require.NoError(t, err)
	// The runtime journaled the ref past the first four lines: the agent
	// now waits for the go file.
	var ref belay.ConversationRef
	waitFor(t, func() bool {
		r, err := st.Run(ctx, run.ID)
		require.NoError(t, err)
		ref = r.Ref
		return r.Ref.Cursor == strconv.Itoa(cursor)
	})

	// The daemon stops; the agent goes on.
	shut(st, rt)
	require.Equal(t, stateRunning, handleOf(t, ref).state(), "the stop left the agent running")
	writeFile(filepath.Join(dir, "go"), "")

	// The next daemon reclaims the run and resumes it through the provider.
	st, rt = open()
	defer shut(st, rt)
	wctx, cancel := context.WithTimeout(ctx, patience)
	defer cancel()
	done, err := rt.Wait(wctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, belay.RunComplete, done.Status, "%s: %s", done.Phase, done.Reason)

	evs, err := st.Events(ctx, run.Session, 0, 0)
	require.NoError(t, err)
	var answer string
	var calls, results, resumes int
	for _, e := range evs {
		if e.Run != run.ID {
			continue
		}
		switch e.Type {
		case belay.EventRunText:
			var d struct{ Text string }
			require.NoError(t, json.Unmarshal(e.Data, &d))
			answer += d.Text
		case belay.EventRunToolCall:
			calls++
		case belay.EventRunToolResult:
			results++
		case belay.EventRunRecovery:
			var d struct{ Decision string }
			require.NoError(t, json.Unmarshal(e.Data, &d))
			require.Equal(t, "resume", d.Decision)
			resumes++
		}
	}
	require.Equal(t, "one two three", answer, "every line exactly once across the restart")
	require.Equal(t, 1, calls)
	require.Equal(t, 1, results)
	require.Equal(t, 1, resumes)
	require.Equal(t, stateGone, handleOf(t, ref).state())
}
