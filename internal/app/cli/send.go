package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/client"
	"github.com/belayhq/belay/internal/app/daemon"
	"github.com/belayhq/belay/internal/ids"
	"github.com/belayhq/belay/runtime"
)

type sendOptions struct {
	globalOptions
	Session        string
	Provider       string
	Model          string
	Policy         string
	Priority       int
	Deadline       deadlineFlag
	IdempotencyKey string
	Watch          bool
	Wait           bool
	File           string
	Script         string
	Timeout        time.Duration
	Progress       bool
	Prompt         string
	Tags           []string
	Meta           []string // k=v
	Site           string
	SiteURL        string
	Attach         []string
	// Batch is a JSONL file of submissions ("-": standard input).
	Batch string
}

// sendResult is `belay send --json`.
type sendResult struct {
	Session string `json:"session"`
	Run     string `json:"run"`
	Status  string `json:"status"`
	Phase   string `json:"phase"`
}

func newSendCmd(stdio Stdio) *cobra.Command {
	var opts sendOptions
	cmd := &cobra.Command{
		Use:   "send [PROMPT | -]",
		Short: "Send a prompt as a durable run; returns at once with its handle",
		Long: `Creates a run in a session (a new one unless --session is given) and
returns at once. The prompt is the argument, standard input ("-"), or
--file. With --watch it streams the run; with --wait it waits for its end.
The run goes on whatever happens to this command: follow it again with
belay watch RUN, belay wait RUN, and read it with belay read RUN.

With --batch FILE it sends many runs in few requests (POST /v1/runs:batch):
FILE ("-" for standard input) holds one JSON submission per line, e.g.
{"prompt":"...","provider":"fake","idempotencyKey":"job-1","tags":["x"]}
(the fields of POST /v1/runs, and the line's own idempotencyKey; --provider
and --model fill lines that name neither a session nor a provider). It
prints one line per submission: the run, or the error; with --json one
JSON object per line. Exit 1 if any submission failed.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usagef("belay send --provider fake \"your prompt\"", "send takes one prompt argument; quote it")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.Batch != "" {
				return runSendBatch(cmd, stdio, opts, args)
			}
			if len(args) == 1 {
				opts.Prompt = args[0]
			}
			return runSend(cmd, stdio, opts, len(args) == 1)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Data, "data", "", dataFlagHelp)
	f.BoolVar(&opts.JSON, "json", false, `print {"session","run","status","phase"} (with --wait: the wait result)`)
	f.StringVar(&opts.Session, "session", "", "session to send in (default: a new one)")
	f.StringVar(&opts.Provider, "provider", "", "provider for a new session: fake, or one from config.toml")
	f.StringVar(&opts.Model, "model", "", "model (the provider's default if empty)")
	f.StringVar(&opts.Policy, "policy", "enqueue", "if the session is busy: enqueue, reject, interrupt or replace")
	f.IntVar(&opts.Priority, "priority", 0, "admission priority (higher first)")
	f.Var(&opts.Deadline, "deadline", "absolute deadline for the run: a duration (90m) or an RFC 3339 time (default: the provider's)")
	f.StringVar(&opts.IdempotencyKey, "idempotency-key", "", "makes the send idempotent: the same key returns the same run")
	f.BoolVar(&opts.Watch, "watch", false, "stream the run's output after sending")
	f.BoolVar(&opts.Wait, "wait", false, "wait for the run to end after sending")
	f.StringVar(&opts.File, "file", "", "read the prompt from a file")
	f.StringVar(&opts.Script, "script", "", "fake provider: a JSON script file (see docs/providers.md)")
	f.StringVar(&opts.Site, "site", "", "browser provider: the site profile (chatgpt, gemini, grok, claude, ...); implies --provider browser")
	f.StringVar(&opts.SiteURL, "site-url", "", "browser provider: the site's start URL, if not the profile's")
	f.StringArrayVar(&opts.Attach, "attach", nil, "browser provider: upload this file with the prompt (repeatable)")
	f.DurationVar(&opts.Timeout, "timeout", 0, "with --watch/--wait: stop following after this long (exit 5; the run goes on)")
	f.StringArrayVar(&opts.Tags, "tag", nil, "tag the run, to find it with belay runs list --tag (repeatable)")
	f.StringArrayVar(&opts.Meta, "meta", nil, "metadata kept with the run: key=value (repeatable)")
	f.BoolVar(&opts.Progress, "progress", false, "with --watch: status lines on standard error even when it is not a terminal")
	f.StringVar(&opts.Batch, "batch", "", `send many runs: a JSONL file ("-": standard input) of {"prompt","provider","session","idempotencyKey",...}, one per line`)
	return cmd
}

func runSend(cmd *cobra.Command, stdio Stdio, opts sendOptions, hasArg bool) error {
	if opts.Site != "" && opts.Provider == "" && opts.Session == "" {
		opts.Provider = "browser"
	}
	switch {
	case opts.Watch && opts.Wait:
		return usagef("belay send --watch ...", "give --watch or --wait, not both")
	case opts.Timeout != 0 && !opts.Watch && !opts.Wait:
		// Without either, send returns once the run is accepted: a
		// timeout would bound nothing.
		return usagef("belay send --wait --timeout 10m ...", "--timeout bounds --watch or --wait; give one of them with it")
	case opts.Session == "" && opts.Provider == "":
		return usagef("belay send --provider fake \"hello\"", "give --provider for a new session, or --session")
	case !belay.Policy(opts.Policy).Valid():
		return usagef("belay send --policy enqueue ...", "--policy %q is not enqueue, reject, interrupt or replace", opts.Policy)
	case opts.Session != "" && ids.Check(ids.Session, opts.Session) != nil:
		return usagef("belay sessions list", "--session %q is not a session id", opts.Session)
	case opts.File != "" && hasArg:
		return usagef("belay send --file prompt.txt", "give the prompt as an argument or --file, not both")
	}
	meta, err := parseMeta(opts.Meta)
	if err != nil {
		return err
	}
	if err := belay.CheckTags(opts.Tags, meta); err != nil {
		return usagef("belay send --tag team-a --meta ticket=ABC-1 ...", "%s", strings.TrimPrefix(err.Error(), "belay: invalid argument: "))
	}
	prompt := opts.Prompt
	switch {
	case opts.File != "":
		f, err := os.Open(opts.File)
		if err != nil {
			return fmt.Errorf("read prompt: %w", err)
		}
		size := int64(-1)
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
			size = fi.Size()
		}
		b, err := readPrompt(f, "the prompt in "+opts.File, size)
		f.Close()
		if err != nil {
			return err
		}
		prompt = string(b)
	case prompt == "-" || (!hasArg && opts.Script == ""):
		if !hasArg && isTerminal(stdio.In) {
			return usagef("belay send --provider fake \"hello\"", "no prompt: give it as an argument, \"-\" for standard input, or --file")
		}
		b, err := readPrompt(stdio.In, "the prompt on standard input", -1)
		if err != nil {
			return err
		}
		prompt = string(b)
	}
	if !utf8.ValidString(prompt) {
		// JSON would replace the bad bytes; belay keeps a prompt byte-exact.
		return usagef("iconv -f LATIN1 -t UTF-8 prompt.txt | belay send --provider fake -", "the prompt is not valid UTF-8; convert it first")
	}
	var script json.RawMessage
	if opts.Script != "" {
		b, err := os.ReadFile(opts.Script)
		if err != nil {
			return fmt.Errorf("read script: %w", err)
		}
		if !json.Valid(b) {
			return usagef("belay send --provider fake --script script.json", "%s is not JSON", opts.Script)
		}
		script = b
	}
	// What the daemon could not store is refused here, before any upload.
	if _, err := runtime.CheckInput(belay.InputData{Prompt: prompt, Script: script}); err != nil {
		return fmt.Errorf("%w\nTry: send a shorter prompt, or give the agent a path to the long text instead of the text", err)
	}
	ctx := cmd.Context()
	c, err := connect(ctx, stdio, opts.globalOptions, true)
	if err != nil {
		return err
	}
	var options json.RawMessage
	if opts.Site != "" || opts.SiteURL != "" || len(opts.Attach) > 0 {
		o := map[string]any{"site": opts.Site, "site_url": opts.SiteURL}
		var files []string
		for _, f := range opts.Attach {
			abs, err := filepath.Abs(f)
			if err != nil {
				return err
			}
			if fi, err := os.Stat(abs); err != nil || !fi.Mode().IsRegular() {
				return usagef("belay send --attach ./context.tar ...", "--attach %s: not a readable file", f)
			}
			files = append(files, abs)
		}
		if files != nil {
			o["attachments"] = files
		}
		options, _ = json.Marshal(o)
	}
	run, err := c.CreateRun(ctx, apitype.CreateRunRequest{
		Session: opts.Session, Provider: opts.Provider, Model: opts.Model, Prompt: prompt, Script: script, Options: options,
		Policy: belay.Policy(opts.Policy), Priority: opts.Priority, Deadline: apitype.Duration(opts.Deadline.d),
		Tags: opts.Tags, Meta: meta,
	}, opts.IdempotencyKey)
	if err != nil {
		dir, _ := opts.dataDir(stdio)
		return refused(err, dir)
	}
	switch {
	case opts.Wait:
		return waitRun(ctx, stdio, c, run.ID, opts.Timeout, opts.JSON)
	case opts.Watch:
		if !opts.JSON {
			fmt.Fprintf(stdio.Err, "belay: run %s in session %s\n", run.ID, run.Session)
		}
		return watchRun(ctx, stdio, c, run.Run, watchOptions{globalOptions: opts.globalOptions, Timeout: opts.Timeout, Progress: opts.Progress})
	}
	if opts.JSON {
		return writeJSON(stdio.Out, sendResult{Session: run.Session, Run: run.ID, Status: string(run.Status), Phase: string(run.Phase)})
	}
	fmt.Fprintf(stdio.Out, "%s %s %s\n", run.ID, run.Session, run.Status)
	fmt.Fprintf(stdio.Err, "Follow it: belay watch %s   Read it: belay read %s\n", run.ID, run.ID)
	return nil
}

// isTerminal reports whether r is an interactive terminal.
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// parseMeta reads key=value pairs.
func parseMeta(kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	m := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usagef("belay send --meta ticket=ABC-1 ...", "--meta %q: want key=value", kv)
		}
		m[k] = v
	}
	return m, nil
}

// refused explains a request the daemon refused: a field it names is a
// usage error (exit 2); an unknown provider says which ones there are and
// how to add one.
func refused(err error, dataDir string) error {
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code == apitype.CodeStoreUnreachable {
		return apiError(err)
	}
	msg := strings.TrimPrefix(strings.TrimPrefix(ce.Message, "belay: "), "invalid argument: ")
	if ce.Code == apitype.CodeInvalid {
		if field, _ := ce.Details["field"].(string); field != "" {
			return &usageError{err: fmt.Errorf("refused before the run started: %s", msg), hint: fieldHint(field)}
		}
		if name, _ := ce.Details["provider"].(string); name != "" {
			return &usageError{err: errors.New(msg), hint: fmt.Sprintf("add [providers.%s] with a type to %s (see docs/providers.md), or export OPENAI_API_KEY for --provider openai, ANTHROPIC_API_KEY for --provider anthropic; then restart the daemon (belay daemon stop; the next command starts it)",
				name, filepath.Join(dataDir, daemon.ConfigName))}
		}
		return &usageError{err: errors.New(msg)}
	}
	return errors.New(msg)
}

func fieldHint(field string) string {
	switch field {
	case "model":
		return "belay send --provider fake --model echo \"hello\" (or a model of your provider)"
	case "script":
		return "belay send --provider fake --script script.json ... (docs/providers.md, JSON script)"
	}
	return "belay send --help"
}

// readPrompt reads a prompt of at most runtime.MaxInput bytes. A longer
// one is refused with its size when it is known (size, a regular file's),
// else as "more than" the limit: a stream is not read on to count it (it
// may never end).
func readPrompt(r io.Reader, what string, size int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, runtime.MaxInput+1))
	if err != nil {
		return nil, fmt.Errorf("read prompt: %w", err)
	}
	if len(b) <= runtime.MaxInput {
		return b, nil
	}
	if size >= int64(len(b)) {
		return nil, &belay.TooLargeError{What: what, Size: int(size), Limit: runtime.MaxInput}
	}
	return nil, fmt.Errorf("%w: %s is more than %d bytes; belay stores at most %d bytes (one journal record)", belay.ErrTooLarge, what, runtime.MaxInput, runtime.MaxInput)
}
