package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/store"
)

// ExportEvents writes a session's transcript in a format. "belay" (or "")
// is the session's own journal events as JSON lines.
func ExportEvents(ctx context.Context, st store.Store, w io.Writer, session, format string) error {
	switch format {
	case "", "belay":
	default:
		return fmt.Errorf("%w: export format %q is not supported (supported: belay)", belay.ErrInvalid, format)
	}
	enc := json.NewEncoder(w)
	var after uint64
	for {
		evs, err := st.Events(ctx, session, after, 4096)
		for _, e := range evs {
			if err := enc.Encode(e); err != nil {
				return err
			}
			after = e.Seq
		}
		if err != nil {
			return err
		}
		if len(evs) == 0 {
			return nil
		}
	}
}
