package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/provider"
	"github.com/belayhq/belay/runtime"
)

// statusOf maps an error onto an HTTP status and code.
func statusOf(err error) (int, string) {
	var stale *belay.StaleEpochError
	switch {
	case errors.Is(err, belay.ErrLeaseExpired):
		return http.StatusConflict, apitype.CodeLeaseExpired
	case errors.As(err, &stale), errors.Is(err, belay.ErrStaleEpoch):
		return http.StatusConflict, apitype.CodeStaleEpoch
	case errors.Is(err, belay.ErrSideEffects):
		return http.StatusConflict, apitype.CodeSideEffects
	case errors.Is(err, runtime.ErrConversationBusy):
		return http.StatusConflict, apitype.CodeConversationBusy
	case errors.Is(err, belay.ErrTooLarge):
		return http.StatusRequestEntityTooLarge, apitype.CodeTooLarge
	case errors.Is(err, belay.ErrInvalid):
		return http.StatusBadRequest, apitype.CodeInvalid
	case errors.Is(err, belay.ErrNotFound):
		return http.StatusNotFound, apitype.CodeNotFound
	case errors.Is(err, belay.ErrExists):
		return http.StatusConflict, apitype.CodeExists
	case errors.Is(err, belay.ErrLeaseHeld):
		return http.StatusConflict, apitype.CodeLeaseHeld
	case errors.Is(err, belay.ErrNotLeased):
		return http.StatusConflict, apitype.CodeNotLeased
	case errors.Is(err, belay.ErrTerminal):
		return http.StatusConflict, apitype.CodeTerminal
	case errors.Is(err, belay.ErrActive):
		return http.StatusConflict, apitype.CodeConversationBusy
	case errors.Is(err, belay.ErrDiskFull):
		return http.StatusInsufficientStorage, apitype.CodeDiskFull
	case errors.Is(err, belay.ErrReadOnly):
		return http.StatusServiceUnavailable, apitype.CodeReadOnly
	case errors.Is(err, belay.ErrStoreUnreachable):
		return http.StatusServiceUnavailable, apitype.CodeStoreUnreachable
	case errors.Is(err, belay.ErrStoreClosed):
		return http.StatusServiceUnavailable, apitype.CodeUnavailable
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout, apitype.CodeTimeout
	}
	return http.StatusInternalServerError, apitype.CodeInternal
}

// writeError writes err as an API error.
func writeError(w http.ResponseWriter, err error) {
	status, body := errorBody(err)
	writeErrorCode(w, status, body.Code, body.Message, body.Details)
}

// errorBody is err as an API error and its HTTP status.
func errorBody(err error) (int, apitype.ErrorBody) {
	status, code := statusOf(err)
	var details map[string]any
	var stale *belay.StaleEpochError
	var field *provider.FieldError
	var unknown *provider.UnknownError
	var conflict *runtime.IdempotencyConflictError
	var effects *belay.SideEffectsError
	var large *belay.TooLargeError
	var full *belay.DiskFullError
	switch {
	case errors.As(err, &stale):
		details = map[string]any{"kind": stale.Kind, "id": stale.ID, "epoch": stale.Got, "currentEpoch": stale.Current}
	case errors.As(err, &large):
		details = map[string]any{"size": large.Size, "limit": large.Limit}
	case errors.As(err, &full) && full.Free >= 0:
		details = map[string]any{"freeBytes": full.Free}
	case errors.As(err, &field):
		details = map[string]any{"field": field.Field}
	case errors.As(err, &unknown):
		details = map[string]any{"provider": unknown.Name, "known": unknown.Known}
	case errors.As(err, &conflict):
		details = map[string]any{"run": conflict.Run, "differs": conflict.What}
	case errors.As(err, &effects):
		details = map[string]any{"run": effects.Run, "tools": effects.Tools}
	}
	return status, apitype.ErrorBody{Code: code, Message: errorMessage(err), Details: details}
}

// errorMessage is err's text for a response body: without the "belay: "
// that the Go errors of the module begin with, which says nothing to an
// API client (the CLI adds its own prefix once).
func errorMessage(err error) string {
	return strings.TrimPrefix(err.Error(), "belay: ")
}

func writeErrorCode(w http.ResponseWriter, status int, code, msg string, details map[string]any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(apitype.Error{Error: apitype.ErrorBody{Code: code, Message: msg, Details: details}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
