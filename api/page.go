package api

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/internal/ids"
)

// pageParams reads ?limit= and ?cursor=.
func pageParams(w http.ResponseWriter, r *http.Request) (limit int, cursor string, ok bool) {
	q := r.URL.Query()
	limit = apitype.DefaultPage
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 0 {
			writeErrorCode(w, http.StatusBadRequest, apitype.CodeInvalid, "limit must be a non-negative integer", nil)
			return 0, "", false
		}
		if n > 0 {
			limit = min(n, apitype.MaxPage)
		}
	}
	return limit, q.Get("cursor"), true
}

func badCursor(w http.ResponseWriter, cursor string) {
	writeErrorCode(w, http.StatusBadRequest, apitype.CodeInvalid, fmt.Sprintf("cursor %q is not a cursor this list returned", cursor), nil)
}

// sessionsCursor checks a sessions cursor: the id of the last session of
// the page before.
func sessionsCursor(cursor string) error {
	if cursor == "" {
		return nil
	}
	return ids.Check(ids.Session, cursor)
}

// runsPage returns the runs (in creation order) after the cursor, the seq
// of the last run's input, and the next cursor.
func runsPage(runs []belay.Run, cursor string, limit int) ([]belay.Run, string, bool) {
	var after uint64
	if cursor != "" {
		n, err := strconv.ParseUint(cursor, 10, 64)
		if err != nil {
			return nil, "", false
		}
		after = n
	}
	i := 0
	for i < len(runs) && runs[i].InputSeq <= after {
		i++
	}
	runs = runs[i:]
	if len(runs) <= limit {
		return runs, "", true
	}
	runs = runs[:limit]
	return runs, strconv.FormatUint(runs[len(runs)-1].InputSeq, 10), true
}

// deliveriesPage returns the deliveries (in delivery order: priority, then
// seq) after the cursor "PRIORITY:SEQ", and the next cursor.
func deliveriesPage(ds []belay.Delivery, cursor string, limit int) ([]belay.Delivery, string, bool) {
	if cursor != "" {
		ps, ss, ok := strings.Cut(cursor, ":")
		p, perr := strconv.Atoi(ps)
		s, serr := strconv.ParseUint(ss, 10, 64)
		if !ok || perr != nil || serr != nil {
			return nil, "", false
		}
		i := 0
		for i < len(ds) && (ds[i].Priority > p || ds[i].Priority == p && ds[i].Seq <= s) {
			i++
		}
		ds = ds[i:]
	}
	if len(ds) <= limit {
		return ds, "", true
	}
	ds = ds[:limit]
	last := ds[len(ds)-1]
	return ds, fmt.Sprintf("%d:%d", last.Priority, last.Seq), true
}
