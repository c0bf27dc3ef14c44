package mcpserver

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/client"
)

// ToolError is how a tool fails: a tool result with isError set whose text
// is this JSON, so that the agent sees the class of the failure and what
// to do next, never a protocol failure.
type ToolError struct {
	// Code is the API error code, or "out_of_scope", "unreachable".
	Code       string               `json:"code"`
	Message    string               `json:"message"`
	NextAction apitype.DoctorAction `json:"nextAction"`
	// Command is what to run (or call) next, "" for none.
	Command string `json:"command,omitempty"`
}

func (e *ToolError) Error() string {
	b, _ := json.Marshal(struct {
		Error *ToolError `json:"error"`
	}{e})
	return string(b)
}

// Codes of failures that are not API errors.
const (
	CodeOutOfScope  = "out_of_scope"
	CodeUnreachable = "unreachable"
)

// toolError turns any failure into a ToolError.
func toolError(err error) error {
	var te *ToolError
	if errors.As(err, &te) {
		return te
	}
	if client.IsUnreachable(err) {
		return &ToolError{Code: CodeUnreachable, Message: err.Error(), NextAction: apitype.ActionStartDaemon, Command: "belay daemon start"}
	}
	var ae *client.Error
	if !errors.As(err, &ae) {
		return &ToolError{Code: apitype.CodeInternal, Message: err.Error(), NextAction: apitype.ActionRetryLater}
	}
	te = &ToolError{Code: ae.Code, Message: ae.Message, NextAction: apitype.ActionResolveManually}
	switch ae.Code {
	case apitype.CodeNotFound:
		te.Command = "call runs_list to find the runs in scope"
	case apitype.CodeConversationBusy:
		te.NextAction, te.Command = apitype.ActionWait, "call send again with policy enqueue, or wait for the session's run"
	case apitype.CodeUnavailable, apitype.CodeTimeout:
		te.NextAction = apitype.ActionRetryLater
	case apitype.CodeReadOnly:
		te.NextAction, te.Command = apitype.ActionRepairJournal, "call doctor for the session"
	}
	return te
}

// invalid is a bad tool argument.
func invalid(format string, args ...any) error {
	return &ToolError{Code: apitype.CodeInvalid, Message: fmt.Sprintf(format, args...), NextAction: apitype.ActionResolveManually, Command: "fix the arguments and call again"}
}
