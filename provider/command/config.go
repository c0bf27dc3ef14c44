package command

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Formats of an agent's output.
const (
	// FormatClaude is claude -p --output-format stream-json.
	FormatClaude = "claude-stream-json"
	// FormatCodex is codex exec --json.
	FormatCodex = "codex-json"
	// FormatJSONL is belay's generic JSONL: one {"type": ...} object a line.
	FormatJSONL = "jsonl"
	// FormatText is plain text: every line is answer text.
	FormatText = "text"
)

// Prompt modes.
const (
	// PromptArg passes the prompt in argv, where {prompt} appears.
	PromptArg = "arg"
	// PromptStdin writes the prompt to a file in the run directory and
	// makes it the agent's stdin.
	PromptStdin = "stdin"
)

// Defaults.
const (
	DefaultKillGrace    = 5 * time.Second
	DefaultPollInterval = 100 * time.Millisecond
	DefaultRefEvery     = 32
)

// DefaultReadOnlyTools are the tools whose calls are reported without side
// effects: they only read. Every other tool is side-effecting (G9).
var DefaultReadOnlyTools = []string{
	"Read", "Glob", "Grep", "LS", "NotebookRead", "WebSearch", "WebFetch",
	"TodoRead", "TodoWrite", "BashOutput", "web_search",
}

// Config configures a command provider. It is decoded from the daemon's
// config file: [providers.<name>] with type = "command".
type Config struct {
	// Preset fills Argv, ModelArgs, Prompt and Format for a known CLI:
	// "claude" or "codex". Fields set explicitly win; an explicit Argv
	// also drops the preset's Prompt mode.
	Preset string `toml:"preset"`
	// Argv is the command and its arguments. Placeholders, replaced inside
	// any argument: {prompt}, {model}, {session}, {run}, {attempt},
	// {run_dir}.
	Argv []string `toml:"argv"`
	// ModelArgs are appended to Argv when the run has a model, e.g.
	// ["--model", "{model}"].
	ModelArgs []string `toml:"model_args"`
	// Prompt is how the prompt reaches the agent: "arg" or "stdin".
	// Default: "arg" if an argument contains {prompt}, else "stdin".
	Prompt string `toml:"prompt"`
	// Format is how the agent's stdout is decoded: "claude-stream-json",
	// "codex-json", "jsonl" or "text" (default "jsonl").
	Format string `toml:"format"`
	// Env is added to the daemon's environment for the agent.
	Env map[string]string `toml:"env"`
	// Dir is the agent's working directory (default: the daemon's).
	Dir string `toml:"dir"`
	// RunDir is the root of the run directories, one per attempt at
	// <RunDir>/<session>/<run>/attempt<N>-<random>. Default:
	// <os.TempDir()>/belay-command. The daemon points it into its data dir.
	RunDir string `toml:"run_dir"`
	// KillGrace is how long a cancelled agent's process group gets between
	// SIGTERM and SIGKILL (default 5s).
	KillGrace time.Duration `toml:"kill_grace"`
	// PollInterval is how often the output file and the process are
	// checked when there is no new output (default 100ms).
	PollInterval time.Duration `toml:"poll_interval"`
	// RefEvery is how many consumed output lines may pass without a
	// RefUpdate (default 32). A ref is also reported after every tool call
	// and result, and whenever the output goes quiet.
	RefEvery int `toml:"ref_every"`
	// ReadOnlyTools replaces DefaultReadOnlyTools: tool names whose calls
	// have no side effects.
	ReadOnlyTools []string `toml:"read_only_tools"`
}

// presets are the argv and format of the known CLIs. Both read the prompt
// from stdin, so it never shows in ps and is not bounded by ARG_MAX.
var presets = map[string]Config{
	"claude": {
		Argv:      []string{"claude", "-p", "--output-format", "stream-json", "--verbose"},
		ModelArgs: []string{"--model", "{model}"},
		Prompt:    PromptStdin,
		Format:    FormatClaude,
	},
	"codex": {
		Argv:      []string{"codex", "exec", "--json"},
		ModelArgs: []string{"--model", "{model}"},
		Prompt:    PromptStdin,
		Format:    FormatCodex,
	},
}

// ErrConfig reports an invalid provider configuration.
var ErrConfig = errors.New("command: invalid config")

// withDefaults applies the preset and the defaults, and validates.
func (c Config) withDefaults() (Config, error) {
	if c.Preset != "" {
		p, ok := presets[c.Preset]
		if !ok {
			return c, fmt.Errorf("%w: unknown preset %q (want claude or codex)", ErrConfig, c.Preset)
		}
		if len(c.Argv) == 0 {
			c.Argv = slices.Clone(p.Argv)
			if c.Prompt == "" {
				c.Prompt = p.Prompt
			}
		}
		if c.ModelArgs == nil {
			c.ModelArgs = slices.Clone(p.ModelArgs)
		}
		if c.Format == "" {
			c.Format = p.Format
		}
	}
	if len(c.Argv) == 0 || c.Argv[0] == "" {
		return c, fmt.Errorf("%w: argv is empty", ErrConfig)
	}
	// The kernel takes no NUL byte in an argument, a variable or a path.
	for _, list := range [][]string{c.Argv, c.ModelArgs, {c.Dir, c.RunDir}, slices.Collect(maps.Values(c.Env))} {
		if slices.ContainsFunc(list, func(s string) bool { return strings.IndexByte(s, 0) >= 0 }) {
			return c, fmt.Errorf("%w: argv, model_args, env, dir and run_dir must not hold a NUL byte", ErrConfig)
		}
	}
	for k := range c.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return c, fmt.Errorf("%w: env: %q is not a variable name", ErrConfig, k)
		}
	}
	if c.Prompt == "" {
		c.Prompt = PromptStdin
		if slices.ContainsFunc(c.Argv, func(a string) bool { return strings.Contains(a, "{prompt}") }) {
			c.Prompt = PromptArg
		}
	}
	if c.Prompt != PromptArg && c.Prompt != PromptStdin {
		return c, fmt.Errorf("%w: prompt %q is not arg or stdin", ErrConfig, c.Prompt)
	}
	if c.Format == "" {
		c.Format = FormatJSONL
	}
	if _, ok := decoders[c.Format]; !ok {
		return c, fmt.Errorf("%w: format %q is not %s, %s, %s or %s", ErrConfig, c.Format, FormatClaude, FormatCodex, FormatJSONL, FormatText)
	}
	if c.RunDir == "" {
		c.RunDir = filepath.Join(os.TempDir(), "belay-command")
	}
	abs, err := filepath.Abs(c.RunDir)
	if err != nil {
		return c, fmt.Errorf("%w: run_dir: %v", ErrConfig, err)
	}
	c.RunDir = abs
	if c.KillGrace < 0 || c.PollInterval < 0 || c.RefEvery < 0 {
		return c, fmt.Errorf("%w: kill_grace, poll_interval and ref_every must not be negative", ErrConfig)
	}
	if c.KillGrace == 0 {
		c.KillGrace = DefaultKillGrace
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.RefEvery == 0 {
		c.RefEvery = DefaultRefEvery
	}
	if c.ReadOnlyTools == nil {
		c.ReadOnlyTools = DefaultReadOnlyTools
	}
	return c, nil
}

// expand returns the agent's argv for a request.
func (c Config) expand(v vars) []string {
	r := strings.NewReplacer(
		"{prompt}", v.prompt, "{model}", v.model, "{session}", v.session,
		"{run}", v.run, "{attempt}", v.attempt, "{run_dir}", v.runDir,
	)
	argv := make([]string, 0, len(c.Argv)+len(c.ModelArgs))
	for _, a := range c.Argv {
		argv = append(argv, r.Replace(a))
	}
	if v.model != "" {
		for _, a := range c.ModelArgs {
			argv = append(argv, r.Replace(a))
		}
	}
	return argv
}

// vars are the placeholder values of one attempt.
type vars struct {
	prompt, model, session, run, attempt, runDir string
}

// pathSafe reports whether id can name a directory.
func pathSafe(id string) bool {
	return id != "" && id != "." && id != ".." && len(id) <= 128 &&
		!strings.ContainsAny(id, "/\\\x00")
}
