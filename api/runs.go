package api

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/internal/ids"
	"github.com/belayhq/belay/runtime"
	"github.com/belayhq/belay/store"
)

// parseRunQuery reads the query of GET /v1/runs.
func parseRunQuery(r *http.Request, now time.Time) (apitype.RunQuery, error) {
	v := r.URL.Query()
	q := apitype.RunQuery{Sort: v.Get("sort"), Cursor: v.Get("cursor"), Limit: apitype.DefaultRunsLimit}
	q.Session, q.Provider, q.Tag = v.Get("session"), v.Get("provider"), v.Get("tag")
	q.Status = belay.RunStatus(v.Get("status"))
	if q.Session != "" {
		if err := ids.Check(ids.Session, q.Session); err != nil {
			return q, queryError{"session", err.Error()}
		}
	}
	if q.Cursor != "" {
		if _, err := decodeCursor(q.Cursor); err != nil {
			return q, queryError{"cursor", err.Error()}
		}
	}
	if q.Status != "" && !q.Status.Valid() {
		return q, queryErrorf("status", "status %q is not queued, running, complete, failed, cancelled or stranded", q.Status)
	}
	if q.Tag != "" {
		if err := belay.CheckTags([]string{q.Tag}, nil); err != nil {
			return q, queryError{"tag", err.Error()}
		}
	}
	if s := v.Get("since"); s != "" {
		if d, err := time.ParseDuration(s); err == nil && d >= 0 {
			q.Since = now.Add(-d)
		} else if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			q.Since = t
		} else {
			return q, queryErrorf("since", "since %q: want a duration such as 24h or an RFC 3339 time", s)
		}
	}
	if f := v.Get("failed"); f != "" {
		b, err := strconv.ParseBool(f)
		if err != nil {
			return q, queryErrorf("failed", "failed must be true or false")
		}
		q.Failed = b
	}
	switch q.Sort {
	case "":
		q.Sort = apitype.SortNewest
	case apitype.SortNewest, apitype.SortOldest, apitype.SortUpdated:
	default:
		return q, queryErrorf("sort", "sort %q is not %s, %s or %s", q.Sort, apitype.SortNewest, apitype.SortOldest, apitype.SortUpdated)
	}
	if l := v.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > apitype.MaxRunsLimit {
			return q, queryErrorf("limit", "limit must be 1-%d", apitype.MaxRunsLimit)
		}
		q.Limit = n
	}
	return q, nil
}

// queryError is a query parameter of GET /v1/runs that is wrong: its
// 400 names it in details.field.
type queryError struct{ field, msg string }

func (e queryError) Error() string { return e.msg }

func queryErrorf(field, format string, args ...any) error {
	return queryError{field, fmt.Sprintf(format, args...)}
}

// runKey is a run's position in an order: the time it sorts by, then its id.
type runKey struct {
	at time.Time
	id string
}

func keyOf(r *belay.Run, sort string) runKey {
	if sort == apitype.SortUpdated {
		return runKey{r.UpdatedAt, r.ID}
	}
	return runKey{r.CreatedAt, r.ID}
}

// before reports whether a comes before b in the order.
func (a runKey) before(b runKey, sort string) bool {
	c := a.at.Compare(b.at)
	if c == 0 {
		c = strings.Compare(a.id, b.id)
	}
	if sort == apitype.SortOldest {
		return c < 0
	}
	return c > 0
}

// The cursor is the sort key of the last run of a page, opaque to clients.
func encodeCursor(k runKey) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(k.at.UnixNano(), 10) + "." + k.id))
}

func decodeCursor(c string) (runKey, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	ns, id, ok := strings.Cut(string(b), ".")
	n, perr := strconv.ParseInt(ns, 10, 64)
	if err != nil || !ok || perr != nil || ids.Check(ids.Run, id) != nil {
		return runKey{}, fmt.Errorf("cursor %q is not a cursor this endpoint returned", c)
	}
	return runKey{time.Unix(0, n), id}, nil
}

// listAllRuns is GET /v1/runs: runs across sessions, filtered, sorted and
// paged, from the store's in-memory state (no journal is read).
func (s *Server) listAllRuns(w http.ResponseWriter, r *http.Request) {
	q, err := parseRunQuery(r, time.Now())
	if err != nil {
		var details map[string]any
		if qe, ok := err.(queryError); ok {
			details = map[string]any{"field": qe.field}
		}
		writeErrorCode(w, http.StatusBadRequest, apitype.CodeInvalid, err.Error(), details)
		return
	}
	page, next, err := ListRuns(r.Context(), s.st, q)
	if err != nil {
		writeError(w, err)
		return
	}
	out := apitype.RunPage{Runs: make([]apitype.Run, 0, len(page)), NextCursor: next}
	for _, run := range page {
		out.Runs = append(out.Runs, s.withActivity(run))
	}
	writeJSON(w, http.StatusOK, out)
}

// ListRuns is GET /v1/runs on a store: the page q selects and the cursor
// of the next page ("" after the last). A store that is a
// store.RunLister selects the page without copying every run; the CLI
// uses this to list runs from the files when the daemon is down.
func ListRuns(ctx context.Context, st store.Store, q apitype.RunQuery) ([]belay.Run, string, error) {
	if q.Sort == "" {
		q.Sort = apitype.SortNewest
	}
	if q.Limit <= 0 {
		q.Limit = apitype.DefaultRunsLimit
	}
	var after *runKey
	if q.Cursor != "" {
		k, err := decodeCursor(q.Cursor)
		if err != nil {
			return nil, "", fmt.Errorf("%w: %v", belay.ErrInvalid, err)
		}
		after = &k
	}
	if l, ok := st.(store.RunLister); ok {
		less := func(a, b *belay.Run) bool { return keyOf(a, q.Sort).before(keyOf(b, q.Sort), q.Sort) }
		var afterFn func(*belay.Run) bool
		if after != nil {
			afterFn = func(r *belay.Run) bool { return after.before(keyOf(r, q.Sort), q.Sort) }
		}
		page, more, err := l.ListRuns(ctx, q.RunFilter, less, afterFn, q.Limit)
		if err != nil || !more || len(page) == 0 {
			return page, "", err
		}
		return page, encodeCursor(keyOf(&page[len(page)-1], q.Sort)), nil
	}
	runs, err := st.Runs(ctx, q.RunFilter)
	if err != nil {
		return nil, "", err
	}
	// A store may apply only part of the filter: apply all of it.
	runs = slices.DeleteFunc(runs, func(r belay.Run) bool { return !q.RunFilter.Match(&r) })
	page, next := pageOf(runs, q.Sort, after, q.Limit)
	return page, next, nil
}

// pageOf returns a page and the cursor of the next one ("" if none).
func pageOf(runs []belay.Run, sort string, after *runKey, limit int) ([]belay.Run, string) {
	page := pageRuns(runs, sort, after, limit)
	if len(page) < limit {
		return page, ""
	}
	next := keyOf(&page[len(page)-1], sort)
	// A next page exists if any run sorts after the last one.
	for i := range runs {
		if next.before(keyOf(&runs[i], sort), sort) {
			return page, encodeCursor(next)
		}
	}
	return page, ""
}

// pageRuns returns the first limit runs in the order sort that come after
// the key after (nil: from the start). It selects before it sorts, so a
// page of a large list costs one pass and a sort of the page.
func pageRuns(runs []belay.Run, sort string, after *runKey, limit int) []belay.Run {
	cmp := func(a, b belay.Run) int {
		ka, kb := keyOf(&a, sort), keyOf(&b, sort)
		switch {
		case ka.before(kb, sort):
			return -1
		case kb.before(ka, sort):
			return 1
		}
		return 0
	}
	var page []belay.Run
	for _, run := range runs {
		if after != nil && !after.before(keyOf(&run, sort), sort) {
			continue
		}
		// Keep the limit smallest in a sorted window: insertion is cheap
		// for pages of up to a thousand.
		if len(page) == limit && cmp(run, page[len(page)-1]) >= 0 {
			continue
		}
		i, _ := slices.BinarySearchFunc(page, run, cmp)
		page = slices.Insert(page, i, run)
		if len(page) > limit {
			page = page[:limit]
		}
	}
	return page
}

func (s *Server) withActivity(run belay.Run) apitype.Run {
	out := apitype.Run{Run: run}
	if a, ok := s.rt.RunActivity(run); ok {
		out.Activity = &a
	}
	return out
}

func (s *Server) listRuns(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, ids.Session)
	if !ok {
		return
	}
	status := belay.RunStatus(r.URL.Query().Get("status"))
	if status != "" && !status.Valid() {
		writeErrorCode(w, http.StatusBadRequest, apitype.CodeInvalid, "status must be queued, running, complete, failed, cancelled or stranded", map[string]any{"field": "status"})
		return
	}
	limit, cursor, ok := pageParams(w, r)
	if !ok {
		return
	}
	runs, err := s.st.Runs(r.Context(), belay.RunFilter{Session: id, Status: status})
	if err != nil {
		writeError(w, err)
		return
	}
	runs, next, ok := runsPage(runs, cursor, limit)
	if !ok {
		badCursor(w, cursor)
		return
	}
	out := apitype.RunList{Runs: []apitype.Run{}, NextCursor: next}
	for _, run := range runs {
		out.Runs = append(out.Runs, s.withActivity(run))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) createRun(w http.ResponseWriter, r *http.Request) {
	key, ok := idempotencyKey(w, r)
	if !ok {
		return
	}
	var req apitype.CreateRunRequest
	if !decode(w, r, MaxRunBody, &req) {
		return
	}
	if r.PathValue("id") != "" {
		id, ok := pathID(w, r, ids.Session)
		if !ok {
			return
		}
		req.Session = id
	} else if req.Session != "" {
		if err := ids.Check(ids.Session, req.Session); err != nil {
			writeErrorCode(w, http.StatusBadRequest, apitype.CodeInvalid, err.Error(), nil)
			return
		}
	}
	if req.Session == "" && req.Provider == "" {
		writeErrorCode(w, http.StatusBadRequest, apitype.CodeInvalid, "a run needs a session or a provider", nil)
		return
	}
	if req.Deadline < 0 {
		writeErrorCode(w, http.StatusBadRequest, apitype.CodeInvalid, "deadline must not be negative", nil)
		return
	}
	run, err := s.rt.Submit(r.Context(), runtime.SubmitRequest{
		Session: req.Session, Provider: req.Provider, Model: req.Model, Prompt: req.Prompt,
		Script: req.Script, Options: req.Options, Policy: req.Policy, Priority: req.Priority,
		Deadline: time.Duration(req.Deadline), IdempotencyKey: key, Labels: req.Labels,
		Tags: req.Tags, Meta: req.Meta,
	})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, s.withActivity(run))
}

func (s *Server) getRun(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, ids.Run)
	if !ok {
		return
	}
	run, err := s.st.Run(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s.withActivity(run))
}

// waitRun long-polls until the run ends or the wait (at most a minute)
// passes; then it answers with the run as it is: a timeout is not an error.
func (s *Server) waitRun(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, ids.Run)
	if !ok {
		return
	}
	d, ok := waitFor(w, r, "timeout")
	if !ok {
		return
	}
	if d > 0 {
		release, ok := s.acquireWatcher(w)
		if !ok {
			return
		}
		defer release()
	}
	ctx, cancel := context.WithTimeout(r.Context(), d)
	defer cancel()
	run, err := s.rt.Wait(ctx, id)
	if err != nil && !errors.Is(err, belay.ErrStillRunning) {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s.withActivity(run))
}

func (s *Server) cancelRun(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, ids.Run)
	if !ok {
		return
	}
	var body struct {
		Reason string `json:"reason,omitempty"`
	}
	if r.ContentLength != 0 && !decode(w, r, MaxBody, &body) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	run, err := s.rt.Cancel(ctx, id, body.Reason)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s.withActivity(run))
}

// retryRun creates a new run with the input of a finished one (belay runs
// retry), refused when side effects settled unless allowed.
func (s *Server) retryRun(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, ids.Run)
	if !ok {
		return
	}
	key, ok := idempotencyKey(w, r)
	if !ok {
		return
	}
	var req apitype.RetryRequest
	if r.ContentLength != 0 && !decode(w, r, MaxBody, &req) {
		return
	}
	if req.Policy != "" && !req.Policy.Valid() {
		writeErrorCode(w, http.StatusBadRequest, apitype.CodeInvalid, "policy must be enqueue, reject, interrupt or replace", map[string]any{"field": "policy"})
		return
	}
	if req.Deadline < 0 {
		writeErrorCode(w, http.StatusBadRequest, apitype.CodeInvalid, "deadline must not be negative", map[string]any{"field": "deadline"})
		return
	}
	run, tools, err := s.rt.Retry(r.Context(), runtime.RetryRequest{Run: id, AllowSideEffects: req.AllowSideEffects, IdempotencyKey: key, Policy: req.Policy, Deadline: time.Duration(req.Deadline)})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, apitype.RetryResponse{Run: s.withActivity(run), MayRepeat: tools})
}
