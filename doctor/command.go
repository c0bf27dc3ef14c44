package doctor

import (
	"fmt"
	"strings"
)

// The commands a report names. They are the CLI of DESIGN section 8; every
// argument is an identifier from the report, quoted for a POSIX shell.

const (
	cmdDaemonStart  = "belay daemon start"
	cmdDaemonStatus = "belay daemon status"
	cmdDaemonStop   = "belay daemon stop"
	cmdPrune        = "belay sessions prune"
)

func command(args ...string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}

func cmdWatch(run string) string { return command("belay", "watch", run) }
func cmdWait(run string) string  { return command("belay", "wait", run) }
func cmdRead(run string) string  { return command("belay", "read", run) }

// cmdResend re-sends a run's journaled input as a new run. The idempotency
// key is derived from the run, so running the command twice sends once (G3).
func cmdResend(session, run string) string {
	return command("belay", "send", "--session", session, "--resend", run, "--idempotency-key", "resend-"+run)
}

func cmdInboxPoll(session string) string {
	return command("belay", "inbox", "poll", "--session", session)
}

func cmdInboxAck(delivery string, epoch uint64) string {
	return command("belay", "inbox", "ack", delivery, "--epoch", fmt.Sprint(epoch))
}

// cmdRepair names the journal file when it is known, else the session.
func cmdRepair(path, session string) string {
	if path != "" {
		return command("belay", "repair", path)
	}
	return command("belay", "repair", "--session", session)
}
