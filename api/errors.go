package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/provider"
	"github.com/belayhq/belay/runtime"
)

// Error codes: the stable "code" of error responses.
const (
	CodeInvalid          = "invalid_argument"
	CodeNotFound         = "not_found"
	CodeExists           = "already_exists"
	CodeStaleEpoch       = "stale_epoch"
	CodeLeaseExpired     = "lease_expired"
	CodeLeaseHeld        = "lease_held"
	CodeNotLeased        = "not_leased"
	CodeTerminal         = "already_finished"
	CodeConversationBusy = "conversation_busy"
	CodeReadOnly         = "read_only"
	CodeUnavailable      = "unavailable"
	// CodeStoreUnreachable: the daemon is up but cannot reach its store
	// (a database); nothing was written. Retry once /healthz says ok.
	CodeStoreUnreachable = "store_unreachable"
	CodeUnauthenticated  = "unauthenticated"
	CodeTooLarge         = "too_large"
	CodeOverloaded       = "overloaded"
	CodeMethod           = "method_not_allowed"
	CodeTimeout          = "timeout"
	CodeSideEffects      = "side_effects_settled"
	CodeDiskFull         = "disk_full"
	CodeInternal         = "internal"
)

// statusOf maps an error onto an HTTP status and code.
func statusOf(err error) (int, string) {
	var stale *belay.StaleEpochError
	switch {
	case errors.Is(err, belay.ErrLeaseExpired):
		return http.StatusConflict, CodeLeaseExpired
	case errors.As(err, &stale), errors.Is(err, belay.ErrStaleEpoch):
		return http.StatusConflict, CodeStaleEpoch
	case errors.Is(err, runtime.ErrSideEffects):
		return http.StatusConflict, CodeSideEffects
	case errors.Is(err, runtime.ErrConversationBusy):
		return http.StatusConflict, CodeConversationBusy
	case errors.Is(err, belay.ErrTooLarge):
		return http.StatusRequestEntityTooLarge, CodeTooLarge
	case errors.Is(err, belay.ErrInvalid):
		return http.StatusBadRequest, CodeInvalid
	case errors.Is(err, belay.ErrNotFound):
		return http.StatusNotFound, CodeNotFound
	case errors.Is(err, belay.ErrExists):
		return http.StatusConflict, CodeExists
	case errors.Is(err, belay.ErrLeaseHeld):
		return http.StatusConflict, CodeLeaseHeld
	case errors.Is(err, belay.ErrNotLeased):
		return http.StatusConflict, CodeNotLeased
	case errors.Is(err, belay.ErrTerminal):
		return http.StatusConflict, CodeTerminal
	case errors.Is(err, belay.ErrActive):
		return http.StatusConflict, CodeConversationBusy
	case errors.Is(err, belay.ErrDiskFull):
		return http.StatusInsufficientStorage, CodeDiskFull
	case errors.Is(err, belay.ErrReadOnly):
		return http.StatusServiceUnavailable, CodeReadOnly
	case errors.Is(err, belay.ErrStoreUnreachable):
		return http.StatusServiceUnavailable, CodeStoreUnreachable
	case errors.Is(err, belay.ErrStoreClosed):
		return http.StatusServiceUnavailable, CodeUnavailable
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout, CodeTimeout
	}
	return http.StatusInternalServerError, CodeInternal
}

// writeError writes err as an API error.
func writeError(w http.ResponseWriter, err error) {
	status, body := errorBody(err)
	writeErrorCode(w, status, body.Code, body.Message, body.Details)
}

// errorBody is err as an API error and its HTTP status.
func errorBody(err error) (int, ErrorBody) {
	status, code := statusOf(err)
	var details map[string]any
	var stale *belay.StaleEpochError
	var field *provider.FieldError
	var unknown *provider.UnknownError
	var conflict *runtime.IdempotencyConflictError
	var effects *runtime.SideEffectsError
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
	return status, ErrorBody{Code: code, Message: err.Error(), Details: details}
}

func writeErrorCode(w http.ResponseWriter, status int, code, msg string, details map[string]any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(Error{Error: ErrorBody{Code: code, Message: msg, Details: details}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
