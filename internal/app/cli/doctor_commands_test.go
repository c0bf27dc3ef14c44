package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/doctor"
	"github.com/belayhq/belay/internal/app/daemon"
	"github.com/belayhq/belay/provider/browser"
)

// TestEveryCommandDoctorSuggestsParses runs every command the session
// doctor and `belay doctor` can name through the real command parser:
// the command, its flags and its arguments must all exist and be valid.
func TestEveryCommandDoctorSuggestsParses(t *testing.T) {
	t.Parallel()
	cmds := doctor.Commands("ses_01jfz0000000000000000000aa", "run_01jfz0000000000000000000aa",
		"dlv_01jfz0000000000000000000aa", "/data/sessions/ses_01jfz0000000000000000000aa/journal.jsonl", "chatgpt", 3)
	// belay doctor (the daemon report) names these.
	dir := t.TempDir()
	rep, err := daemon.Inspect(context.Background(), dir, nil, false)
	require.NoError(t, err)
	require.NotEmpty(t, rep.Command)
	cmds = append(cmds, rep.Command, "belay sessions doctor ses_01jfz0000000000000000000aa")
	for _, line := range cmds {
		args := shellSplit(t, line)
		require.Equal(t, "belay", args[0], line)
		parseCommand(t, args[1:])
	}
	// The check is real: a flag that does not exist is refused.
	require.Panics(t, func() {
		parseCommand(&panicT{}, strings.Fields("send --session ses_01jfz0000000000000000000aa --resend run_01jfz0000000000000000000aa"))
	})
}

type tester interface {
	Helper()
	Fatalf(format string, args ...any)
}

type panicT struct{}

func (*panicT) Helper()                           {}
func (*panicT) Fatalf(format string, args ...any) { panic(format) }

// parseCommand finds the command of args and parses its flags and
// arguments as Execute would, without running it.
func parseCommand(t tester, args []string) {
	t.Helper()
	var out bytes.Buffer
	root := newRootCmd(Stdio{In: &out, Out: &out, Err: &out, Getenv: func(string) string { return "" }})
	cmd, rest, err := root.Find(args)
	if err != nil || cmd == root {
		t.Fatalf("%v: no such command: %v", args, err)
		return
	}
	if err := cmd.ParseFlags(rest); err != nil {
		t.Fatalf("%v: %v", args, err)
		return
	}
	if err := cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
		t.Fatalf("%v: %v", args, err)
		return
	}
	if cmd.RunE == nil && cmd.Run == nil {
		t.Fatalf("%v: %s is not runnable", args, cmd.CommandPath())
	}
}

// shellSplit splits a POSIX shell command line of words and single-quoted
// strings (the quoting doctor uses).
func shellSplit(t *testing.T, line string) []string {
	t.Helper()
	var out []string
	var cur strings.Builder
	inWord, quoted := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quoted && c == '\'':
			quoted = false
		case quoted:
			cur.WriteByte(c)
		case c == '\'':
			quoted, inWord = true, true
		case c == ' ':
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		case strings.IndexByte("\"\\$`;&|<>(){}*?", c) >= 0:
			t.Fatalf("unexpected shell character %q in %q", c, line)
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	require.False(t, quoted, "unterminated quote in %q", line)
	if inWord {
		out = append(out, cur.String())
	}
	return out
}

// TestBrowserFailureStepsParse: the next step printed for a failed
// browser run names belay browser login/check or the retry that adopts
// the send, each of which parses; and belay browser reap exists.
func TestBrowserFailureStepsParse(t *testing.T) {
	t.Parallel()
	const id = "run_01jfz0000000000000000000aa"
	ref := belay.ConversationRef{Kind: browser.RefKind, URL: "https://chatgpt.com/c/x",
		Cursor: `{"run":"` + id + `","site":"chatgpt","phase":"sent","baseline":0}`}
	for class, want := range map[belay.ErrorClass][]string{
		belay.ClassAuth:      {"belay browser login chatgpt", "belay runs retry " + id},
		belay.ClassChallenge: {"belay browser login chatgpt", "belay runs retry " + id},
		belay.ClassUIDrift:   {"belay browser check chatgpt", "belay runs retry " + id},
		belay.ClassTimeout:   {"without sending the prompt again", "belay runs retry " + id},
	} {
		run := belay.Run{ID: id, Session: "ses_01jfz0000000000000000000aa", Status: belay.RunFailed,
			Error: &belay.RunError{Class: class, Message: "x"}, Ref: ref}
		text := failureText(run)
		for _, w := range want {
			require.Contains(t, text, w, class)
			if strings.HasPrefix(w, "belay ") {
				parseCommand(t, strings.Fields(w)[1:])
			}
		}
	}
	parseCommand(t, []string{"browser", "reap", "--json"})
}
