package daemon

import (
	"context"
	"fmt"
	"io"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/store"
	"github.com/belayhq/belay/transcript"
)

// ExportEvents writes a session's transcript in a format (belay's own
// journal format by default; see docs/transcripts.md for the others).
func ExportEvents(ctx context.Context, st store.Store, w io.Writer, session, format string) error {
	if format == "" {
		format = "belay"
	}
	f, err := transcript.ParseFormat(format)
	if err != nil {
		return fmt.Errorf("%w: export format %q is not supported: %v", belay.ErrInvalid, format, err)
	}
	var evs []belay.Event
	var after uint64
	for {
		if err := ctx.Err(); err != nil {
			return context.Cause(ctx) // the client went away
		}
		page, err := st.Events(ctx, session, after, 4096)
		evs = append(evs, page...)
		if err != nil {
			return err
		}
		if len(page) == 0 {
			break
		}
		after = page[len(page)-1].Seq
	}
	return transcript.Export(w, evs, f)
}
