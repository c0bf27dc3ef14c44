package command

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/jsonx"
	"github.com/belayhq/belay/internal/proc"
	"github.com/belayhq/belay/provider"
)

func TestFormats(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		format string
		prompt string
		steps  []agentStep
		want   []provider.Event
	}{
		{
			name:   "claude",
			format: FormatClaude,
			steps: lines(
				`{"type":"system","subtype":"init","session_id":"s1","tools":["Bash","Read"]}`,
				`{"type":"assistant","message":{"content":[{"type":"thinking","thinking":"hmm"},{"type":"text","text":"Let me look."}]},"parent_tool_use_id":null}`,
				`{"type":"assistant","message":{"content":[{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"rm x"}}]},"parent_tool_use_id":null}`,
				`{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"done","is_error":false}]}}`,
				`{"type":"system","subtype":"api_retry","attempt":1,"error_status":529,"error":"overloaded"}`,
				`{"type":"assistant","message":{"content":[{"type":"tool_use","id":"toolu_2","name":"Read","input":{"file_path":"/a"}}]}}`,
				`{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"toolu_2","content":[{"type":"text","text":"line 1"},{"type":"text","text":"line 2"}],"is_error":true}]}}`,
				`{"type":"assistant","message":{"content":[{"type":"text","text":"sub"}]},"parent_tool_use_id":"toolu_9"}`,
				`{"type":"stream_event","event":{"type":"ping"}}`,
				`not json at all`,
				`{"type":"assistant","message":{"content":[{"type":"text","text":"All done."}]}}`,
				`{"type":"result","subtype":"success","is_error":false,"result":"All done.","usage":{"input_tokens":10,"cache_read_input_tokens":5,"output_tokens":7},"stop_reason":"end_turn"}`,
			),
			want: []provider.Event{
				thinking("hmm"), text("Let me look."),
				call("toolu_1", "Bash", `{"command":"rm x"}`, true), result("toolu_1", "done", false),
				call("toolu_2", "Read", `{"file_path":"/a"}`, false), result("toolu_2", "line 1\nline 2", true),
				text("\n\nAll done."), usage(15, 7), turnEnd("end_turn"),
			},
		},
		{
			name:   "codex",
			format: FormatCodex,
			steps: lines(
				`{"type":"thread.started","thread_id":"0199"}`,
				`{"type":"turn.started"}`,
				`{"type":"item.started","item":{"id":"item_1","type":"command_execution","command":"bash -lc ls","aggregated_output":"","exit_code":null,"status":"in_progress"}}`,
				`{"type":"item.completed","item":{"id":"item_1","type":"command_execution","command":"bash -lc ls","aggregated_output":"README.md\n","exit_code":0,"status":"completed"}}`,
				`{"type":"item.completed","item":{"id":"item_2","type":"reasoning","text":"thinking about it"}}`,
				`{"type":"item.completed","item":{"id":"item_3","type":"web_search","query":"go"}}`,
				`{"type":"item.completed","item":{"id":"item_4","type":"command_execution","command":"make","aggregated_output":"","exit_code":null,"status":"declined"}}`,
				`{"type":"error","message":"Reconnecting... 1/5"}`,
				`{"type":"item.completed","item":{"id":"item_5","type":"agent_message","text":"Yes, there is a README."}}`,
				`{"type":"turn.completed","usage":{"input_tokens":24763,"cached_input_tokens":24448,"output_tokens":122}}`,
			),
			want: []provider.Event{
				call("item_1", "command_execution", `{"command":"bash -lc ls"}`, true),
				result("item_1", "README.md\n", false),
				thinking("thinking about it"),
				call("item_3", "web_search", `{"query":"go"}`, false), result("item_3", "", false),
				call("item_4", "command_execution", `{"command":"make"}`, true),
				{Kind: provider.ToolResult, Result: &provider.Result{CallID: "item_4", IsError: true, Class: belay.ClassPermissionDenied}},
				text("Yes, there is a README."), usage(24763, 122), turnEnd("end_turn"),
			},
		},
		{
			name:   "jsonl",
			format: FormatJSONL,
			steps: append(lines(
				`{"type":"thinking","text":"plan"}`,
				`{"type":"text","text":"Hello"}`,
				`{"type":"tool_call","id":"c1","name":"write_file","input":{"path":"a"}}`,
				`{"type":"tool_result","id":"c1","content":"ok"}`,
				`{"type":"tool_call","id":"c2","name":"lookup","side_effect":false}`,
				`{"type":"tool_result","id":"c2","content":"no","is_error":true}`,
				`log noise`,
				`{"type":"mystery","text":"ignored"}`,
				`{"type":"usage","input_tokens":3,"output_tokens":4}`,
			), agentStep{Raw: `{"type":"done","stop_reason":"max_tokens"}`}),
			want: []provider.Event{
				thinking("plan"), text("Hello"),
				call("c1", "write_file", `{"path":"a"}`, true), result("c1", "ok", false),
				call("c2", "lookup", "", false), result("c2", "no", true),
				usage(3, 4), turnEnd("max_tokens"),
			},
		},
		{
			name:   "text from stdin",
			format: FormatText,
			prompt: "first line\nsecond line",
			steps:  []agentStep{{EchoStdin: true}},
			want:   []provider.Event{text("first line\n"), text("second line"), turnEnd("end_turn")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := newProvider(t, agentConfig(t, tt.format, agentScript{Steps: tt.steps}))
			evs, err := run(t, p, provider.Request{Prompt: tt.prompt})
			require.NoError(t, err)
			require.Equal(t, tt.want, content(evs))

			// The process is reported at once, and a ref follows every tool
			// call and result, so a reattach never reports them again.
			require.Equal(t, provider.RefUpdate, evs[0].Kind)
			require.Equal(t, "0", evs[0].Ref.Cursor)
			require.Equal(t, RefKind, evs[0].Ref.Kind)
			// (A line can hold both a call and its result.)
			for i, ev := range evs {
				if ev.Kind == provider.ToolCall || ev.Kind == provider.ToolResult {
					j := i + 1
					for evs[j].Kind == provider.ToolResult {
						j++
					}
					require.Equal(t, provider.RefUpdate, evs[j].Kind, "event %d (%s) is followed by a ref", i, ev.Kind)
				}
			}
		})
	}
}

func TestPromptInArgv(t *testing.T) {
	t.Parallel()
	cfg := agentConfig(t, FormatText, agentScript{Steps: []agentStep{{EchoArgs: true}}})
	cfg.Argv = append(cfg.Argv, "--", "{prompt}", "run={run}")
	cfg.ModelArgs = []string{"--model={model}"}
	p := newProvider(t, cfg)
	require.Equal(t, PromptArg, p.Config().Prompt, "argv with {prompt} passes it there")

	evs, err := run(t, p, provider.Request{Run: "run_1", Prompt: "hello world", Model: "m1"})
	require.NoError(t, err)
	require.Equal(t, []provider.Event{text("hello world\n"), text("run=run_1\n"), text("--model=m1\n"), turnEnd("end_turn")}, content(evs))

	evs, err = run(t, p, provider.Request{Run: "run_2", Prompt: "hi"})
	require.NoError(t, err)
	require.Equal(t, []provider.Event{text("hi\n"), text("run=run_2\n"), turnEnd("end_turn")}, content(evs), "no model: no model args")
}

func TestFailures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		format string
		script agentScript
		argv   []string
		want   belay.ErrorClass
		msg    string
	}{
		{name: "auth from stderr", format: FormatText, script: agentScript{Stderr: "Error: Invalid API key · Please run /login\n", Exit: 1}, want: belay.ClassAuth, msg: "status 1"},
		{name: "rate limit from stderr", format: FormatJSONL, script: agentScript{Stderr: "429 Too Many Requests\n", Exit: 2}, want: belay.ClassRateLimited},
		{name: "unknown exit", format: FormatText, script: agentScript{Steps: lines("partial"), Stderr: "boom\n", Exit: 3}, want: belay.ClassTransient, msg: "boom"},
		{name: "no such command", format: FormatText, argv: []string{"/nonexistent/belay-agent"}, want: belay.ClassInvalidRequest, msg: "127"},
		{
			name: "claude result error", format: FormatClaude,
			script: agentScript{Steps: lines(`{"type":"result","subtype":"success","is_error":true,"api_error_status":429,"result":"API Error"}`), Exit: 1},
			want:   belay.ClassRateLimited,
		},
		{
			name: "claude max turns", format: FormatClaude,
			script: agentScript{Steps: lines(`{"type":"result","subtype":"error_max_turns","is_error":true,"errors":["reached max turns"]}`), Exit: 1},
			want:   belay.ClassInvalidRequest,
		},
		{
			name: "codex turn failed exits 0", format: FormatCodex,
			script: agentScript{Steps: lines(`{"type":"turn.started"}`, `{"type":"turn.failed","error":{"message":"stream error: 503 Service Unavailable"}}`)},
			want:   belay.ClassOverloaded,
		},
		{
			name: "jsonl error with class", format: FormatJSONL,
			script: agentScript{Steps: lines(`{"type":"error","message":"too big","class":"context_overflow"}`)},
			want:   belay.ClassContextOverflow,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := agentConfig(t, tt.format, tt.script)
			if tt.argv != nil {
				cfg.Argv = tt.argv
			}
			_, err := run(t, newProvider(t, cfg), provider.Request{})
			requireClass(t, err, tt.want)
			if tt.msg != "" {
				require.ErrorContains(t, err, tt.msg)
			}
		})
	}
}

func TestCancelKillsProcessGroup(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		ignoreTerm bool
		grace      time.Duration
	}{
		{name: "TERM ends it", grace: 30 * time.Second},
		{name: "KILL after the grace period", ignoreTerm: true, grace: time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			s := agentScript{
				PIDFile: filepath.Join(dir, "agent.pid"),
				Steps: []agentStep{
					{Line: `{"type":"text","text":"working"}`},
					{Spawn: filepath.Join(dir, "child.pid")},
					{Hang: true},
				},
			}
			if tt.ignoreTerm {
				s.TermFile = filepath.Join(dir, "term")
			}
			cfg := agentConfig(t, FormatJSONL, s)
			cfg.KillGrace = tt.grace
			h := startRun(t, newProvider(t, cfg), provider.Request{})
			agent := readPID(t, s.PIDFile)
			child := readPID(t, filepath.Join(dir, "child.pid"))
			h.waitEvent(func(evs []provider.Event) bool { return len(content(evs)) == 1 })

			begin := time.Now()
			h.cancel(nil)
			evs, err := h.wait()
			elapsed := time.Since(begin)
			require.ErrorIs(t, err, context.Canceled)
			require.Equal(t, []provider.Event{text("working")}, content(evs))
			for _, pid := range []int{agent, child} {
				alive, err := proc.Alive(pid)
				require.NoError(t, err)
				require.False(t, alive, "pid %d of the group is gone", pid)
			}
			if tt.ignoreTerm {
				require.FileExists(t, s.TermFile, "TERM came first")
				require.GreaterOrEqual(t, elapsed, tt.grace, "KILL waited for the grace period")
			} else {
				require.Less(t, elapsed, tt.grace/2, "no wait once the group is gone")
			}

			// A resume after the cancel does not pretend the agent finished.
			_, err = run(t, newProvider(t, cfg), provider.Request{Resume: true, Ref: lastRef(t, evs)})
			requireClass(t, err, belay.ClassTargetLost)
		})
	}
}

// reattachScript is an agent that reports a tool call, then waits for the
// go file before it finishes.
func reattachScript(dir string, exit int, stderr string) agentScript {
	return agentScript{
		Steps: []agentStep{
			{Line: `{"type":"text","text":"one"}`},
			{Line: `{"type":"tool_call","id":"c1","name":"deploy","input":{}}`},
			{Line: `{"type":"tool_result","id":"c1","content":"deployed"}`},
			{Line: `{"type":"text","text":"two"}`},
			{WaitFile: filepath.Join(dir, "go")},
			{Line: `{"type":"text","text":"three"}`},
			{Line: `{"type":"usage","input_tokens":1,"output_tokens":2}`},
			{Line: `{"type":"done"}`},
		},
		Exit:   exit,
		Stderr: stderr,
	}
}

// detachAfter starts a run and detaches from it once it reported the text
// "two". It returns the events so far and the ref to resume from.
func detachAfter(t *testing.T, p *Provider, req provider.Request) ([]provider.Event, belay.ConversationRef) {
	t.Helper()
	h := startRun(t, p, req)
	h.waitEvent(func(evs []provider.Event) bool { return len(content(evs)) == 4 })
	h.cancel(ErrDetach)
	evs, err := h.wait()
	require.ErrorIs(t, err, context.Canceled)
	ref := lastRef(t, evs)
	require.Equal(t, stateRunning, handleOf(t, ref).state(), "a detach leaves the agent running")
	return evs, ref
}

func TestReattach(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		exitedBefore bool
		exit         int
		stderr       string
		want         belay.ErrorClass
	}{
		{name: "agent still running"},
		{name: "agent exited before the reattach", exitedBefore: true},
		{name: "agent failed before the reattach", exitedBefore: true, exit: 1, stderr: "rate limit reached\n", want: belay.ClassRateLimited},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			cfg := agentConfig(t, FormatJSONL, reattachScript(dir, tt.exit, tt.stderr))
			cfg.RefEvery = 1000 // refs come from tool events and quiet output only
			first, ref := detachAfter(t, newProvider(t, cfg), provider.Request{})
			require.Equal(t, []provider.Event{
				text("one"), call("c1", "deploy", "{}", true), result("c1", "deployed", false), text("two"),
			}, content(first))
			require.NotEqual(t, "0", ref.Cursor, "the detach reported how far it read")

			if tt.exitedBefore {
				writeFile(filepath.Join(dir, "go"), "")
				waitFor(t, func() bool { return handleOf(t, ref).state() == stateGone })
			}
			// A new provider, as after a daemon restart.
			h := startRun(t, newProvider(t, cfg), provider.Request{Resume: true, Ref: ref})
			if !tt.exitedBefore {
				writeFile(filepath.Join(dir, "go"), "")
			}
			second, err := h.wait()
			if tt.want != "" {
				requireClass(t, err, tt.want)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, []provider.Event{text("three"), usage(1, 2), turnEnd("end_turn")}, content(second),
				"only what came after the cursor, exactly once")
			for _, ev := range second {
				if ev.Kind == provider.RefUpdate {
					require.Equal(t, ref.ID, ev.Ref.ID, "the same process")
				}
			}
		})
	}
}

func TestReattachRefusesReusedPID(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := agentConfig(t, FormatJSONL, reattachScript(dir, 0, ""))
	_, ref := detachAfter(t, newProvider(t, cfg), provider.Request{})
	h := handleOf(t, ref)
	t.Cleanup(func() { h.kill(time.Second) })

	// The pid is alive, but its start time says it is another process.
	forged := ref
	forged.ID = handle{pid: h.pid, pgid: h.pgid, token: h.token + "0", dir: h.dir}.id()
	evs, err := run(t, newProvider(t, cfg), provider.Request{Resume: true, Ref: forged})
	requireClass(t, err, belay.ClassTargetLost)
	require.ErrorContains(t, err, "start time")
	require.Empty(t, content(evs))
	require.Equal(t, stateRunning, h.state(), "a process that is not ours is never signalled")
}

// deadPID returns the pid of a process that has exited.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", "exit 0")
	require.NoError(t, cmd.Run())
	return cmd.Process.Pid
}

func TestReattachWithoutExitStatus(t *testing.T) {
	t.Parallel()
	full := `{"type":"text","text":"a"}` + "\n" + `{"type":"text","text":"b"}` + "\n"
	tests := []struct {
		name      string
		output    string
		cursor    int
		cancelled bool
		want      belay.ErrorClass
		events    []provider.Event
	}{
		{name: "result seen", output: full + `{"type":"done"}`, cursor: 27, events: []provider.Event{text("b"), turnEnd("end_turn")}},
		{name: "result seen before the cursor", output: full + `{"type":"done"}` + "\n", cursor: len(full) + 16},
		{name: "no result", output: full, cursor: 0, want: belay.ClassTransient, events: []provider.Event{text("a"), text("b")}},
		{name: "killed by a cancel", output: full, cursor: len(full), cancelled: true, want: belay.ClassTargetLost},
		{name: "cursor past the end", output: full, cursor: len(full) + 1, want: belay.ClassTargetLost},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "ses_test", "run_test", "attempt1-x")
			require.NoError(t, os.MkdirAll(dir, 0o700))
			require.NoError(t, os.WriteFile(filepath.Join(dir, fileStdout), []byte(tt.output), 0o600))
			if tt.cancelled {
				require.NoError(t, os.WriteFile(filepath.Join(dir, fileCancelled), nil, 0o600))
			}
			pid := deadPID(t)
			ref := belay.ConversationRef{
				Kind: RefKind, ID: handle{pid: pid, pgid: pid, token: "boot:1"}.id(),
				Target: filepath.Join(dir, fileStdout), Cursor: strconv.Itoa(tt.cursor),
			}
			cfg := agentConfig(t, FormatJSONL, agentScript{})
			evs, err := run(t, newProvider(t, cfg), provider.Request{Resume: true, Ref: ref})
			if tt.want != "" {
				requireClass(t, err, tt.want)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tt.events, content(evs))
		})
	}
}

func TestResumeRejectsBadRefs(t *testing.T) {
	t.Parallel()
	p := newProvider(t, agentConfig(t, FormatJSONL, agentScript{}))
	missing := filepath.Join(t.TempDir(), "run_test", "attempt1-x", fileStdout)
	other := filepath.Join(t.TempDir(), "run_other", "attempt1-x", fileStdout)
	tests := []struct {
		name string
		ref  belay.ConversationRef
		want belay.ErrorClass
	}{
		{name: "other kind", ref: belay.ConversationRef{Kind: "openai", ID: "resp_1"}, want: belay.ClassInvalidRequest},
		{name: "malformed id", ref: belay.ConversationRef{Kind: RefKind, ID: "12", Target: missing}, want: belay.ClassInvalidRequest},
		{name: "malformed cursor", ref: belay.ConversationRef{Kind: RefKind, ID: "12:12:x", Target: missing, Cursor: "x"}, want: belay.ClassInvalidRequest},
		{name: "target not an output file", ref: belay.ConversationRef{Kind: RefKind, ID: "12:12:x", Target: "/etc/passwd"}, want: belay.ClassInvalidRequest},
		{name: "another run's agent", ref: belay.ConversationRef{Kind: RefKind, ID: "12:12:x", Target: other}, want: belay.ClassInvalidRequest},
		{name: "output gone", ref: belay.ConversationRef{Kind: RefKind, ID: "12:12:x", Target: missing}, want: belay.ClassTargetLost},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := run(t, p, provider.Request{Resume: true, Ref: tt.ref})
			requireClass(t, err, tt.want)
		})
	}
}

func TestNewAttemptReapsEarlierAgent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := agentConfig(t, FormatJSONL, reattachScript(dir, 0, ""))
	cfg.KillGrace = 10 * time.Second
	p := newProvider(t, cfg)
	_, ref := detachAfter(t, p, provider.Request{Attempt: 1})
	old := handleOf(t, ref)

	// The runtime resends: attempt 2 of the same run starts a new agent.
	h := startRun(t, p, provider.Request{Attempt: 2})
	h.waitEvent(func(evs []provider.Event) bool { return len(content(evs)) == 4 })
	require.Equal(t, stateGone, old.state(), "the earlier attempt's agent was stopped")
	newRef := lastRef(t, h.snapshot())
	require.NotEqual(t, ref.ID, newRef.ID)
	writeFile(filepath.Join(dir, "go"), "")
	_, err := h.wait()
	require.NoError(t, err)
}

func TestEmitErrorStopsAgent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := agentConfig(t, FormatJSONL, reattachScript(dir, 0, ""))
	p := newProvider(t, cfg)
	refuse := provider.Errorf(belay.ClassInternal, "refused")
	var ref belay.ConversationRef
	err := p.Run(context.Background(), provider.Request{Session: "s", Run: "r"}, func(ev provider.Event) error {
		if ev.Kind == provider.RefUpdate {
			ref = *ev.Ref
		}
		if ev.Kind == provider.ToolCall {
			return refuse
		}
		return nil
	})
	require.ErrorIs(t, err, refuse)
	require.Equal(t, stateGone, handleOf(t, ref).state(), "nobody follows it: it is stopped")
}

func TestConfig(t *testing.T) {
	t.Parallel()
	p, err := New("claude", Config{Preset: "claude", RunDir: t.TempDir()})
	require.NoError(t, err)
	c := p.Config()
	require.Equal(t, FormatClaude, c.Format)
	require.Equal(t, PromptStdin, c.Prompt)
	require.Equal(t, []string{"claude", "-p", "--output-format", "stream-json", "--verbose", "--model", "opus"},
		c.expand(vars{model: "opus"}))
	require.Equal(t, DefaultKillGrace, c.KillGrace)
	require.Equal(t, provider.Capabilities{Resume: true, Cancel: true, Tools: true}, p.Capabilities())

	p, err = New("claude", Config{Preset: "claude", Argv: []string{"claude", "-p", "--output-format", "stream-json", "--verbose", "{prompt}"}})
	require.NoError(t, err)
	require.Equal(t, PromptArg, p.Config().Prompt, "an explicit argv decides the prompt mode")
	require.Equal(t, []string{"claude", "-p", "--output-format", "stream-json", "--verbose", "hi", "--model", "opus"},
		p.Config().expand(vars{prompt: "hi", model: "opus"}), "the preset's model args stay")

	p, err = New("codex", Config{Preset: "codex", Format: FormatJSONL})
	require.NoError(t, err)
	require.Equal(t, FormatJSONL, p.Config().Format, "explicit fields win")
	require.Equal(t, []string{"codex", "exec", "--json"}, p.Config().expand(vars{}))

	for name, cfg := range map[string]Config{
		"no argv":      {},
		"bad preset":   {Preset: "gemini"},
		"bad format":   {Argv: []string{"x"}, Format: "xml"},
		"bad prompt":   {Argv: []string{"x"}, Prompt: "file"},
		"negative ref": {Argv: []string{"x"}, RefEvery: -1},
	} {
		_, err := New("x", cfg)
		require.ErrorIs(t, err, ErrConfig, name)
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	tests := []struct {
		text string
		want belay.ErrorClass
	}{
		{"Error: Invalid API key · Please run /login", belay.ClassAuth},
		{"authentication_failed", belay.ClassAuth},
		{"API Error: 401 {\"type\":\"error\"}", belay.ClassAuth},
		{"rate_limit", belay.ClassRateLimited},
		{"Claude AI usage limit reached|1750000000", belay.ClassRateLimited},
		{"You exceeded your current quota", belay.ClassRateLimited},
		{"API Error: 529 overloaded_error", belay.ClassOverloaded},
		{"prompt is too long: 210000 tokens > 200000 maximum", belay.ClassContextOverflow},
		{"Error: When using --print, --output-format=stream-json requires --verbose", belay.ClassInvalidRequest},
		{"stream disconnected: connection reset by peer", belay.ClassTransient},
		{"API Error: 500 internal", belay.ClassTransient},
		{"something else", ""},
		{"", ""},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, classify(tt.text), tt.text)
	}
	require.Equal(t, belay.ClassInvalidRequest, exitError(127, "", "sh: 1: x: not found").Class)
	require.Equal(t, belay.ClassTransient, exitError(137, "", "").Class)
	require.Contains(t, exitError(137, "", "").Message, "signal 9")
}

func TestDecodersIgnoreGarbage(t *testing.T) {
	t.Parallel()
	for format, mk := range decoders {
		d := mk(readOnlySet(DefaultReadOnlyTools))
		for _, l := range []string{"", "{", "[]", "null", `{"type":5}`, `{"type":"assistant","message":{"content":"hi"}}`, `{"type":"item.completed","item":null}`, `{"type":"tool_call"}`} {
			require.NotPanics(t, func() { d.decode([]byte(l)) }, "%s: %q", format, l)
		}
	}
	var raw json.RawMessage = jsonx.Must(map[string]int{"a": 1})
	require.JSONEq(t, `{"a":1}`, string(raw))
}

func TestWholeMessagesAreSetApart(t *testing.T) {
	t.Parallel()
	lines := map[string][]string{
		FormatClaude: {
			`{"type":"assistant","message":{"content":[{"type":"text","text":"I will look."}]}}`,
			`{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t1","name":"Read","input":{}}]}}`,
			`{"type":"assistant","message":{"content":[{"type":"text","text":"Done."}]}}`,
		},
		FormatCodex: {
			`{"type":"item.completed","item":{"id":"i1","type":"agent_message","text":"I will look."}}`,
			`{"type":"item.completed","item":{"id":"i2","type":"agent_message","text":"Done."}}`,
		},
	}
	for format, ls := range lines {
		d := decoders[format](readOnlySet(DefaultReadOnlyTools))
		var answer strings.Builder
		for _, l := range ls {
			for _, ev := range d.decode([]byte(l)) {
				if ev.Kind == provider.TextDelta {
					answer.WriteString(ev.Text)
				}
			}
		}
		require.Equal(t, "I will look.\n\nDone.", answer.String(), format)
	}
}
