package doctor

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
)

// browserSession makes the session a browser provider's, bound to a
// ChatGPT conversation after a verified send.
func browserSession(in *Input) {
	in.Session.Provider = "browser"
	in.Session.Ref = belay.ConversationRef{
		Kind: "browser", ID: "68a1b2c3-0000-4000-8000-00000000beef", URL: "https://chatgpt.com/c/68a1b2c3-0000-4000-8000-00000000beef?token=secret",
		Target: "A1B2C3D4E5F60718293A4B5C6D7E8F90",
		Cursor: `{"run":"run_1","site":"chatgpt","phase":"sent","baseline":2,"chrome":{"pid":777,"ws":"ws://127.0.0.1:1/x","profile":"/p"},"rebinds":1}`,
	}
}

func TestBrowserReport(t *testing.T) {
	for _, tc := range []struct {
		class   belay.ErrorClass
		state   string
		command string
	}{
		{belay.ClassAuth, "login_required", "belay browser login chatgpt"},
		{belay.ClassChallenge, "challenge_blocking", "belay browser login chatgpt"},
		{belay.ClassUIDrift, "unknown", "belay browser check chatgpt"},
	} {
		in := setup()
		browserSession(&in)
		finished(&in, "run_1", belay.RunFailed, tc.class, 0)
		rep := Diagnose(in)
		checkReport(t, rep)
		b := rep.Browser
		require.NotNil(t, b, tc.class)
		require.Equal(t, "chatgpt", b.Site)
		require.Equal(t, "sent", b.SendPhase)
		require.Equal(t, 777, b.BrowserPID)
		require.Equal(t, 1, b.Rebinds)
		require.Equal(t, tc.state, b.PageState)
		require.NotContains(t, b.ConversationURL, "secret")
		require.Equal(t, tc.command, rep.Command, tc.class)
		require.True(t, strings.Contains(rep.Reason, "chatgpt"), rep.Reason)
	}
	// A run whose deadline passed after its send: the retry reads the
	// site's answer instead of asking again; before the send (phase open)
	// it is the generic resend.
	for _, phase := range []string{"sent", "intent", "open"} {
		in := setup()
		browserSession(&in)
		cur := strings.Replace(in.Session.Ref.Cursor, `"phase":"sent"`, `"phase":"`+phase+`"`, 1)
		in.Session.Ref.Cursor = strings.Replace(cur, `"run":"run_1"`, `"run":"`+runA+`"`, 1)
		finished(&in, runA, belay.RunFailed, belay.ClassTimeout, 0)
		rep := Diagnose(in)
		checkReport(t, rep)
		require.Equal(t, apitype.ActionResend, rep.NextAction, phase)
		require.Equal(t, "belay runs retry "+runA, rep.Command, phase)
		if phase == "open" {
			require.Contains(t, rep.Reason, "resending it is safe")
			continue
		}
		require.Contains(t, rep.Reason, "without sending the prompt again", phase)
	}
	// An intent recorded before belay saw the conversation (a first
	// prompt): the prompt may be on the site and a retry refuses to ask
	// again, so the doctor says to look and ask in a new session.
	{
		in := setup()
		browserSession(&in)
		in.Session.Ref.ID, in.Session.Ref.URL = "", ""
		cur := strings.Replace(in.Session.Ref.Cursor, `"phase":"sent"`, `"phase":"intent"`, 1)
		in.Session.Ref.Cursor = strings.Replace(cur, `"run":"run_1"`, `"run":"`+runA+`"`, 1)
		for _, class := range []belay.ErrorClass{belay.ClassTimeout, belay.ClassTargetLost} {
			finished(&in, runA, belay.RunFailed, class, 0)
			rep := Diagnose(in)
			checkReport(t, rep)
			require.Equal(t, apitype.ActionResolveManually, rep.NextAction, class)
			require.Equal(t, "belay read "+runA, rep.Command, class)
			require.Contains(t, rep.Reason, "send the prompt in a new session", class)
			in.Runs = nil
		}
	}
	// A run sent with its own start URL (--site-url): the login and check
	// commands open it, unless the report would hide it (redaction), when
	// the reason says to add it.
	for _, tc := range []struct{ url, command, reason string }{
		{"http://127.0.0.1:8080/app", "belay browser login chatgpt --url http://127.0.0.1:8080/app", "the next run copies that profile."},
		{"https://chat.example/?token=s3cret", "belay browser login chatgpt", "add --url with it."},
		// The shape belay send --site-url usually gets: redaction drops
		// only the trailing slash, so the URL is shown.
		{"http://127.0.0.1:36595/", "belay browser login chatgpt --url http://127.0.0.1:36595/", "the next run copies that profile."},
	} {
		in := setup()
		browserSession(&in)
		in.Session.Ref.Cursor = strings.Replace(in.Session.Ref.Cursor, `"site":"chatgpt"`, `"site":"chatgpt","siteUrl":"`+tc.url+`"`, 1)
		finished(&in, "run_1", belay.RunFailed, belay.ClassAuth, 0)
		rep := Diagnose(in)
		checkReport(t, rep)
		require.Equal(t, tc.command, rep.Command)
		require.True(t, strings.HasSuffix(rep.Reason, tc.reason), rep.Reason)
		require.NotContains(t, rep.Reason+rep.Command, "s3cret")
	}
	// A usage cap or an outage on every attempt: wait, and the reason
	// names the site, what its page showed and the check that shows it
	// now; the provider named no time, so neither does the reason claim
	// the provider's.
	for _, tc := range []struct {
		class belay.ErrorClass
		says  string
	}{
		{belay.ClassRateLimited, "The chatgpt page showed its usage cap"},
		{belay.ClassTransient, "The chatgpt page showed an outage"},
	} {
		in := setup()
		browserSession(&in)
		in.Session.Ref.Cursor = strings.Replace(in.Session.Ref.Cursor, `"run":"run_1"`, `"run":"`+runA+`"`, 1)
		finished(&in, runA, belay.RunFailed, tc.class, time.Second)
		rep := Diagnose(in)
		checkReport(t, rep)
		require.Equal(t, apitype.ActionRetryLater, rep.NextAction, tc.class)
		require.Equal(t, "belay runs retry "+runA, rep.Command)
		require.Contains(t, rep.Reason, tc.says)
		require.Contains(t, rep.Reason, "belay browser check chatgpt shows")
		require.Contains(t, rep.Reason, "the provider named no time to wait")
		require.NotContains(t, rep.Reason, "the provider needs")
	}
	// Another rule's retry_later (a full disk) keeps its own command and
	// reason: the cap is not what to wait for.
	{
		in := setup()
		browserSession(&in)
		in.Session.Ref.Cursor = strings.Replace(in.Session.Ref.Cursor, `"run":"run_1"`, `"run":"`+runA+`"`, 1)
		finished(&in, runA, belay.RunFailed, belay.ClassRateLimited, time.Second)
		in.Journal = Journal{Path: "/data/sessions/x/journal.jsonl", DiskFull: true, FreeBytes: 4096, WriteError: "belay: disk full"}
		rep := Diagnose(in)
		checkReport(t, rep)
		require.Equal(t, "journal_write_failing", rep.Rule)
		require.Equal(t, "belay sessions doctor "+sesID, rep.Command)
		require.NotContains(t, rep.Reason, "usage cap")
	}
	// A browser provider of another name: its commands name it.
	{
		in := setup()
		browserSession(&in)
		in.Session.Provider = ExampleBrowserProvider
		finished(&in, "run_1", belay.RunFailed, belay.ClassAuth, 0)
		rep := Diagnose(in)
		checkReport(t, rep)
		require.Equal(t, "belay browser login chatgpt --provider "+ExampleBrowserProvider, rep.Command)
	}
	// A later run of another provider in the browser session (an API's
	// 429): the site's page showed nothing, and no page state is made up.
	{
		in := setup()
		browserSession(&in)
		finished(&in, "run_1", belay.RunComplete, "", time.Hour)
		r := finished(&in, runA, belay.RunFailed, belay.ClassRateLimited, time.Second)
		r.Provider = "openai"
		rep := Diagnose(in)
		checkReport(t, rep)
		require.Empty(t, rep.Browser.PageState)
		require.Equal(t, apitype.ActionRetryLater, rep.NextAction)
		require.NotContains(t, rep.Reason, "usage cap")
	}
	// Not a browser provider's ref: no browser report.
	in := setup()
	in.Session.Ref = belay.ConversationRef{Kind: "browser", URL: "https://chatgpt.com/c/x"}
	require.Nil(t, Diagnose(in).Browser)
}
