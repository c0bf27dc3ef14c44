// Package cli is the belay command line: one file per command, each with an
// options struct, a constructor that parses flags into it, and a run
// function that takes the options, so parsing and behaviour are tested
// apart.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/belayhq/belay"
)

// Exit codes (DESIGN section 8).
const (
	ExitOK           = 0
	ExitError        = 1
	ExitUsage        = 2
	ExitRunFailed    = 3
	ExitCancelled    = 4
	ExitStillRunning = 5
	ExitUnreachable  = 6
)

// Stdio is where a command reads and writes.
type Stdio struct {
	In       io.Reader
	Out, Err io.Writer
	// Getenv looks up the environment (os.Getenv if nil).
	Getenv func(string) string
}

// exitError carries an exit code through cobra.
type exitError struct {
	code int
	err  error
	// unreachable: the daemon did not answer; Main says what to try,
	// from the environment (unreachableHint).
	unreachable bool
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageError is a flag or argument mistake; it is printed with a hint.
type usageError struct {
	err  error
	hint string
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(hint, format string, args ...any) error {
	return &usageError{err: fmt.Errorf(format, args...), hint: hint}
}

// Main runs the command line and returns the exit code.
func Main(ctx context.Context, args []string, stdio Stdio) int {
	if stdio.Getenv == nil {
		stdio.Getenv = os.Getenv
	}
	root := newRootCmd(stdio)
	root.SetArgs(args[1:])
	root.SetIn(stdio.In)
	root.SetOut(stdio.Out)
	root.SetErr(stdio.Err)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	var ue *usageError
	var ee *exitError
	switch {
	case errors.As(err, &ue):
		fmt.Fprintf(stdio.Err, "belay: %s\n", strings.TrimPrefix(ue.err.Error(), "belay: "))
		if ue.hint != "" {
			fmt.Fprintf(stdio.Err, "Try: %s\n", ue.hint)
		}
		return ExitUsage
	case errors.As(err, &ee):
		fmt.Fprintf(stdio.Err, "belay: %s\n", strings.TrimPrefix(ee.err.Error(), "belay: "))
		if ee.unreachable {
			fmt.Fprintf(stdio.Err, "Try: %s\n", unreachableHint(stdio.Getenv))
		}
		return ee.code
	case isFlagError(err):
		hint := "belay --help"
		var fe flagErr
		if errors.As(err, &fe) && fe.cmd != "" {
			hint = fe.cmd + " --help"
		}
		fmt.Fprintf(stdio.Err, "belay: %v\nTry: %s\n", err, hint)
		return ExitUsage
	}
	if errors.Is(err, belay.ErrStoreUnreachable) {
		// The daemon answers but its store (the database) does not:
		// nothing was written. Like an unreachable daemon, it is exit 6.
		fmt.Fprintf(stdio.Err, "belay: %s\nNothing was written. The daemon resumes by itself when its store answers; then run the same command again (with the same idempotency key, if it had one).\nTry: belay daemon status\n", strings.TrimPrefix(err.Error(), "belay: "))
		return ExitUnreachable
	}
	fmt.Fprintf(stdio.Err, "belay: %s\n", strings.TrimPrefix(err.Error(), "belay: "))
	if errors.Is(err, belay.ErrInvalid) {
		// A value the daemon or the store refused (an unknown provider, a
		// cursor it never gave out, a listen address it cannot take): a
		// wrong flag or argument, as its message says.
		return ExitUsage
	}
	return ExitError
}

// flagErr marks errors from cobra's flag and argument parsing; cmd is the
// command path whose flags were wrong.
type flagErr struct {
	error
	cmd string
}

func isFlagError(err error) bool {
	var fe flagErr
	// cobra reports unknown subcommands with a plain error.
	return errors.As(err, &fe) || strings.HasPrefix(err.Error(), "unknown command ")
}

func newRootCmd(stdio Stdio) *cobra.Command {
	root := &cobra.Command{
		Use:           "belay",
		Short:         "A durable session runtime for long-running AI agent work",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return flagErr{humanFlagError(err), cmd.CommandPath()} })
	root.AddCommand(
		newServeCmd(stdio),
		newDaemonCmd(stdio),
		newSendCmd(stdio),
		newWatchCmd(stdio),
		newWaitCmd(stdio),
		newReadCmd(stdio),
		newCancelCmd(stdio),
		newRunsCmd(stdio),
		newSessionsCmd(stdio),
		newInboxCmd(stdio),
		newDoctorCmd(stdio),
		newMCPCmd(stdio),
		newDemoCmd(stdio),
		newRepairCmd(stdio),
		newBenchCmd(stdio),
		newBrowserCmd(stdio),
		newMigrateCmd(stdio),
		newVersionCmd(stdio),
	)
	// cobra's completion command printed its help and exited 0 when no
	// shell was named (an unknown one is an unknown subcommand: exit 2).
	root.InitDefaultCompletionCmd()
	if c, _, err := root.Find([]string{"completion"}); err == nil && c != root {
		c.RunE = func(*cobra.Command, []string) error {
			return usagef("belay completion bash", "name a shell: bash, zsh, fish or powershell")
		}
	}
	return root
}

// noArgs refuses positional arguments with a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef(cmd.CommandPath()+" --help", "%s takes no arguments, got %q", cmd.CommandPath(), args[0])
	}
	return nil
}

// writeJSON prints v as indented JSON, the stable --json output.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func asExit(err error, target **exitError) bool { return errors.As(err, target) }

// humanFlagError says what a flag takes instead of quoting the parser's
// internals ("strconv.ParseInt: parsing ...: invalid syntax").
func humanFlagError(err error) error {
	var iv *pflag.InvalidValueError
	if !errors.As(err, &iv) {
		return err
	}
	f := iv.GetFlag()
	want := ""
	switch f.Value.Type() {
	case "int", "int64", "int32":
		want = "a whole number such as 3"
	case "uint64", "uint", "uint32":
		want = "a whole number, 0 or more"
	case "float64", "float32":
		want = "a number such as 1.5"
	case "duration":
		want = "a duration such as 90s, 30m or 1h30m"
	case "bool":
		want = "true or false"
	default:
		// Our own flag types explain themselves.
		return fmt.Errorf("--%s: %v", f.Name, errors.Unwrap(err))
	}
	return fmt.Errorf("--%s takes %s, not %q", f.Name, want, iv.GetValue())
}
