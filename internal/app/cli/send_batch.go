package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/belayhq/belay/api"
	"github.com/belayhq/belay/apitype"
)

// batchLine is one submission of `belay send --batch`, with its line.
type batchLine struct {
	line int
	run  apitype.BatchRun
	size int
}

// batchResult is one line of `belay send --batch --json`.
type batchResult struct {
	Line    int    `json:"line"`
	Session string `json:"session,omitempty"`
	Run     string `json:"run,omitempty"`
	Status  string `json:"status,omitempty"`
	Phase   string `json:"phase,omitempty"`
	// HTTPStatus and Error are set when the submission was refused.
	HTTPStatus int                `json:"httpStatus,omitempty"`
	Error      *apitype.ErrorBody `json:"error,omitempty"`
}

// batchOnlyFlags may be given with --batch; the others belong to one run.
var batchOnlyFlags = map[string]bool{"batch": true, "data": true, "json": true, "provider": true, "model": true}

// runSendBatch is `belay send --batch FILE`.
func runSendBatch(cmd *cobra.Command, stdio Stdio, opts sendOptions, args []string) error {
	if len(args) > 0 {
		return usagef("belay send --batch runs.jsonl", "--batch reads the prompts from the file; give no prompt argument")
	}
	var other error
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if !batchOnlyFlags[f.Name] && other == nil {
			other = usagef("belay send --batch runs.jsonl", "--%s applies to one run; with --batch, set it on each line (see belay send --help)", f.Name)
		}
	})
	if other != nil {
		return other
	}
	var in io.Reader = stdio.In
	if opts.Batch != "-" {
		f, err := os.Open(opts.Batch)
		if err != nil {
			return fmt.Errorf("read batch: %w", err)
		}
		defer f.Close()
		in = f
	}
	lines, err := readBatch(in, opts.Provider, opts.Model)
	if err != nil {
		return err
	}
	if len(lines) == 0 {
		return usagef("belay send --batch runs.jsonl", "%s holds no submissions", batchName(opts.Batch))
	}
	ctx := cmd.Context()
	c, err := connect(ctx, stdio, opts.globalOptions, true)
	if err != nil {
		return err
	}
	failed, unreachable, sent := 0, 0, 0
	for _, chunk := range batchChunks(lines) {
		runs := make([]apitype.BatchRun, len(chunk))
		for i, l := range chunk {
			runs[i] = l.run
		}
		results, err := c.CreateRuns(ctx, runs)
		if err != nil {
			if sent > 0 {
				fmt.Fprintf(stdio.Err, "belay: %d of %d submissions were sent before this error; run the same command again: lines with an idempotencyKey are not sent twice\n", sent, len(lines))
			}
			return apiError(err)
		}
		for i, r := range results {
			out := batchResult{Line: chunk[i].line, HTTPStatus: r.Status, Error: r.Error}
			if r.Run != nil {
				out = batchResult{Line: chunk[i].line, Session: r.Run.Session, Run: r.Run.ID, Status: string(r.Run.Status), Phase: string(r.Run.Phase)}
			} else {
				failed++
				if r.Error != nil && r.Error.Code == apitype.CodeStoreUnreachable {
					unreachable++
				}
			}
			if err := printBatchResult(stdio, opts.JSON, out); err != nil {
				return err
			}
		}
		sent += len(chunk)
	}
	if failed == 0 {
		if !opts.JSON {
			fmt.Fprintf(stdio.Err, "sent %s; follow one: belay watch RUN, or list them: belay runs list\n", counted(sent, "run"))
		}
		return nil
	}
	err = fmt.Errorf("%d of %d submissions were refused (see each line); fix them and run the same command again: lines with an idempotencyKey are not sent twice", failed, sent)
	if unreachable > 0 {
		return &exitError{code: ExitUnreachable, err: fmt.Errorf("%w\nTry: belay daemon status", err)}
	}
	return &exitError{code: ExitError, err: err}
}

func printBatchResult(stdio Stdio, asJSON bool, r batchResult) error {
	if asJSON {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdio.Out, "%s\n", b)
		return err
	}
	if r.Error != nil {
		fmt.Fprintf(stdio.Err, "belay: line %d: %s (%s)\n", r.Line, strings.TrimPrefix(r.Error.Message, "belay: "), r.Error.Code) // a daemon of an older version
		return nil
	}
	_, err := fmt.Fprintf(stdio.Out, "%s %s %s\n", r.Run, r.Session, r.Status)
	return err
}

func batchName(path string) string {
	if path == "-" {
		return "standard input"
	}
	return path
}

// readBatch reads JSONL submissions, strictly: a line that is not a
// submission is a usage error naming it, and nothing is sent.
func readBatch(in io.Reader, provider, model string) ([]batchLine, error) {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), api.MaxBatchBody)
	var out []batchLine
	n := 0
	for sc.Scan() {
		n++
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		var b apitype.BatchRun
		if err := dec.Decode(&b); err != nil {
			return nil, usagef(`echo '{"prompt":"hello","provider":"fake","idempotencyKey":"job-1"}' | belay send --batch -`, "line %d is not a run submission: %v", n, err)
		}
		if dec.More() {
			return nil, usagef(`echo '{"prompt":"hello","provider":"fake"}' | belay send --batch -`, "line %d has more than one JSON value; put one submission per line", n)
		}
		if b.Session == "" && b.Provider == "" {
			// --provider and --model fill in what the line leaves out,
			// never what it says.
			b.Provider = provider
			if b.Model == "" {
				b.Model = model
			}
		}
		if b.Session == "" && b.Provider == "" {
			return nil, usagef("belay send --batch runs.jsonl --provider fake", "line %d names neither a session nor a provider; set one on the line or give --provider", n)
		}
		// Its size as the client will send it (JSON escapes may grow it).
		enc, err := json.Marshal(b)
		if err != nil {
			return nil, err
		}
		if len(enc) > api.MaxBatchBody/2 {
			return nil, usagef("belay send --file prompt.txt ...", "line %d is %d bytes as JSON; a batch submission must fit in %d bytes", n, len(enc), api.MaxBatchBody/2)
		}
		out = append(out, batchLine{line: n, run: b, size: len(enc)})
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, usagef("belay send --batch runs.jsonl", "line %d is longer than %d bytes", n+1, api.MaxBatchBody)
		}
		return nil, fmt.Errorf("read batch: %w", err)
	}
	return out, nil
}

// batchChunks splits the submissions into requests within the limits of
// POST /v1/runs:batch (count and body size).
func batchChunks(lines []batchLine) [][]batchLine {
	const room = api.MaxBatchBody - 64<<10 // the envelope, and re-encoding
	var out [][]batchLine
	start, size := 0, 0
	for i, l := range lines {
		if i > start && (i-start == api.MaxBatchRuns || size+l.size+1 > room) {
			out = append(out, lines[start:i])
			start, size = i, 0
		}
		size += l.size + 1
	}
	return append(out, lines[start:])
}
