package api

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/internal/ids"
	"github.com/belayhq/belay/runtime"
)

// Limits of POST /v1/runs:batch.
const (
	// MaxBatchRuns caps the submissions of one batch.
	MaxBatchRuns = 1000
	// MaxBatchBody caps its body: a batch of the largest runs is sent in
	// several requests.
	MaxBatchBody = 32 << 20
)

// createRuns is POST /v1/runs:batch: each submission is what POST
// /v1/runs with its own Idempotency-Key would do, and the answer lists
// each one's run or error in the order of the request. A batch too large
// for the limits is refused whole (413 for the body, 400 for the count),
// naming the limit; otherwise the answer is 200 and every submission has
// its own status. Submissions to the same session are made in the order
// given (so they queue in that order); those to existing sessions are
// written together (runtime.SubmitBatch). A retry of the whole batch with
// the same keys returns the same runs.
func (s *Server) createRuns(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength > MaxBatchBody {
		// Said before reading it; a body without a length is cut at the
		// limit as it is read.
		writeErrorCode(w, http.StatusRequestEntityTooLarge, apitype.CodeTooLarge, fmt.Sprintf("request body is larger than %d bytes", MaxBatchBody), map[string]any{"limit": MaxBatchBody})
		return
	}
	var req apitype.BatchRequest
	if !decode(w, r, MaxBatchBody, &req) {
		return
	}
	switch n := len(req.Runs); {
	case n == 0:
		writeErrorCode(w, http.StatusBadRequest, apitype.CodeInvalid, "a batch needs at least one run in \"runs\"", map[string]any{"field": "runs"})
		return
	case n > MaxBatchRuns:
		writeErrorCode(w, http.StatusBadRequest, apitype.CodeInvalid,
			fmt.Sprintf("a batch holds at most %d runs, got %d; send it in several batches", MaxBatchRuns, n),
			map[string]any{"field": "runs", "limit": MaxBatchRuns, "count": n})
		return
	}
	results := make([]apitype.BatchResult, len(req.Runs))
	fail := func(err error) apitype.BatchResult {
		status, body := errorBody(err)
		return apitype.BatchResult{Status: status, Error: &body}
	}
	// The submissions that pass the checks of POST /v1/runs go to the
	// runtime together: one store write for many runs where the store
	// can (runtime.SubmitBatch).
	var reqs []runtime.SubmitRequest
	var at []int
	for i, b := range req.Runs {
		if err := checkBatchRun(b); err != nil {
			results[i] = fail(err)
			continue
		}
		reqs = append(reqs, runtime.SubmitRequest{
			Session: b.Session, Provider: b.Provider, Model: b.Model, Prompt: b.Prompt,
			Script: b.Script, Options: b.Options, Policy: b.Policy, Priority: b.Priority,
			Deadline: time.Duration(b.Deadline), IdempotencyKey: b.IdempotencyKey, Labels: b.Labels,
			Tags: b.Tags, Meta: b.Meta,
		})
		at = append(at, i)
	}
	runs, errs := s.rt.SubmitBatch(r.Context(), reqs)
	for k, i := range at {
		if errs[k] != nil {
			results[i] = fail(errs[k])
			continue
		}
		out := s.withActivity(runs[k])
		results[i] = apitype.BatchResult{Status: http.StatusCreated, Run: &out}
	}
	writeJSON(w, http.StatusOK, apitype.BatchResponse{Results: results})
}

// checkBatchRun applies to a submission the checks POST /v1/runs makes
// before it submits.
func checkBatchRun(b apitype.BatchRun) error {
	switch {
	case len(b.IdempotencyKey) > 200 || strings.ContainsAny(b.IdempotencyKey, "\x00\r\n"):
		return fmt.Errorf("%w: idempotencyKey must be at most 200 printable bytes", belay.ErrInvalid)
	case b.Session != "" && ids.Check(ids.Session, b.Session) != nil:
		return fmt.Errorf("%w: %v", belay.ErrInvalid, ids.Check(ids.Session, b.Session))
	case b.Session == "" && b.Provider == "":
		return fmt.Errorf("%w: a run needs a session or a provider", belay.ErrInvalid)
	case b.Deadline < 0:
		return fmt.Errorf("%w: deadline must not be negative", belay.ErrInvalid)
	}
	return nil
}
