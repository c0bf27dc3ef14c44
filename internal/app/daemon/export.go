package daemon

import (
	"context"
	"fmt"
	"io"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/journal"
	"github.com/belayhq/belay/store"
	"github.com/belayhq/belay/transcript"
)

// ExportEvents writes a session's transcript in a format (belay's own
// journal format by default; see docs/transcripts.md for the others),
// streamed from the journal in bounded memory (transcript.ExportStream):
// it stops when ctx is done (the client went away) and at a damaged
// event, after writing what came before it. The summary says what the
// export changed to make the conversation valid for the format.
func ExportEvents(ctx context.Context, st store.Store, w io.Writer, session, format string) (transcript.ExportSummary, error) {
	if format == "" {
		format = "belay"
	}
	f, err := transcript.ParseFormat(format)
	if err != nil {
		return transcript.ExportSummary{}, fmt.Errorf("%w: export format %q is not supported: %v", belay.ErrInvalid, format, err)
	}
	scan := func(ctx context.Context, after uint64, fn func(journal.Event) error) error {
		return st.ScanEvents(ctx, session, after, fn)
	}
	return transcript.ExportStream(ctx, w, scan, f)
}
