package doctor

import (
	"fmt"

	"github.com/belayhq/belay/internal/cmdline"
)

// The commands a report names. They are the CLI of DESIGN section 8; every
// argument is an identifier from the report, quoted for a POSIX shell.

const (
	cmdDaemonStart  = "belay daemon start"
	cmdDaemonStatus = "belay daemon status"
	cmdDaemonStop   = "belay daemon stop"
	cmdPrune        = "belay sessions prune"
)

func command(args ...string) string { return cmdline.Join(args...) }

func cmdWatch(run string) string { return command("belay", "watch", run) }
func cmdWait(run string) string  { return command("belay", "wait", run) }
func cmdRead(run string) string  { return command("belay", "read", run) }

// cmdRetry sends a run's journaled input again as a new run in its
// session. Its idempotency key defaults to retry-RUN, so running the
// command twice sends once (G3).
func cmdRetry(run string) string {
	return command("belay", "runs", "retry", run)
}

func cmdSessionsDoctor(session string) string {
	return command("belay", "sessions", "doctor", session)
}

func cmdSessionsDelete(session string) string {
	return command("belay", "sessions", "delete", session)
}

// cmdBrowserLogin and cmdBrowserCheck open site at siteURL, the start URL
// a run was sent with ("" for the profile's).
func cmdBrowserLogin(prov, site, siteURL string) string {
	return cmdline.BrowserSite("login", prov, site, siteURL)
}

func cmdBrowserCheck(prov, site, siteURL string) string {
	return cmdline.BrowserSite("check", prov, site, siteURL)
}

func cmdInboxPoll(session string) string {
	return command("belay", "inbox", "poll", "--session", session)
}

func cmdInboxPollTo(to string) string {
	return command("belay", "inbox", "poll", "--to", to)
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

// ExampleAddressee stands for the addressee of an inbox item (an MCP
// server's subscriber) in Commands.
const ExampleAddressee = "mcp:tag:mcp"

// ExampleBrowserProvider stands in Commands for the name of a browser
// provider other than the default one ([providers.NAME] type = "browser").
const ExampleBrowserProvider = "work"

// ExampleSiteURL stands in Commands for the start URL a browser run was
// sent with.
const ExampleSiteURL = "http://127.0.0.1:8080/app?x=1&y=2"

// Commands returns every form of command a report can name, built by the
// same functions the rules use, with the given identifiers. The command
// line's tests parse each one with its real parser, so a report never
// suggests a command or flag that does not exist.
func Commands(session, run, delivery, journal, site string, epoch uint64) []string {
	return []string{
		cmdDaemonStart, cmdDaemonStatus, cmdDaemonStop, cmdPrune,
		cmdSessionsDoctor(session), cmdSessionsDelete(session),
		cmdWatch(run), cmdWait(run), cmdRead(run), cmdRetry(run),
		cmdInboxPoll(session), cmdInboxAck(delivery, epoch), cmdInboxPollTo(ExampleAddressee),
		cmdRepair(journal, session), cmdRepair("", session), cmdBrowserLogin("", site, ""), cmdBrowserCheck("", site, ""),
		cmdBrowserLogin("", site, ExampleSiteURL), cmdBrowserCheck("", site, ExampleSiteURL),
		cmdBrowserLogin(ExampleBrowserProvider, site, ""), cmdBrowserCheck(ExampleBrowserProvider, site, ""),
		cmdBrowserLogin(ExampleBrowserProvider, site, ExampleSiteURL), cmdBrowserCheck(ExampleBrowserProvider, site, ExampleSiteURL),
	}
}
