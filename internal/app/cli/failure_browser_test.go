package cli

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/provider/browser"
)

// TestBrowserStepAfterTheIntent: a browser run that failed after its
// intent to send is told to retry (which reads the answer without asking
// again) when its conversation is known, and to look at the site and ask
// in a new session when it is not (a retry would refuse); the command
// that advice names parses.
func TestBrowserStepAfterTheIntent(t *testing.T) {
	t.Parallel()
	const id = "run_01jfz0000000000000000000aa"
	run := belay.Run{ID: id, Ref: belay.ConversationRef{Kind: browser.RefKind,
		Cursor: `{"run":"` + id + `","site":"chatgpt","phase":"intent"}`}}
	retry := "belay runs retry " + id
	step := browserStep(run, belay.ClassTargetLost, retry)
	require.Contains(t, step, "belay will not send it again in this session")
	i := strings.Index(step, "belay send")
	require.GreaterOrEqual(t, i, 0, step)
	args := shellSplit(t, step[i:])
	parseCommand(t, args[1:])
	require.Equal(t, []string{"belay", "send", "--site", "chatgpt", "PROMPT"}, args)

	run.Ref.ID, run.Ref.URL = "c-1", "https://chatgpt.com/c/c-1"
	step = browserStep(run, belay.ClassTargetLost, retry)
	require.Contains(t, step, "This reads it without sending the prompt again: "+retry)
}
