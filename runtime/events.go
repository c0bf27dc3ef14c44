package runtime

import (
	"encoding/json"
	"time"

	"github.com/belayhq/belay"
)

// Event types the runtime journals about a run, besides the store's own
// state changes (run.updated carries the attempt start as its data
// {attempt, resume}, and the turn end as {stopReason} with phase
// finishing). Text, thinking and usage are Buffered; the rest are Sync.
const (
	EventText       = "run.text"        // answer text: {text}
	EventThinking   = "run.thinking"    // reasoning text: {text}
	EventToolCall   = "run.tool_call"   // a tool call's intent: provider.Call
	EventToolResult = "run.tool_result" // a tool call's settlement: provider.Result
	EventUsage      = "run.usage"       // token counts: provider.Tokens
	EventError      = "run.error"       // an attempt failed: {class, message, retryAfter}
	EventWatchdog   = "run.watchdog"    // an inactivity tier expired: {tier, idleSeconds}
	EventRecovery   = "run.recovery"    // what the runtime decided: {decision, reason, attempt}
	EventSuspended  = "run.suspended"   // the daemon stopped with the run in flight: {reason}
)

// Delivery types the runtime posts to a session's inbox when a run ends.
const (
	DeliveryRunCompleted = "run.completed"
	DeliveryRunFailed    = "run.failed"
	DeliveryRunStranded  = "run.stranded"
)

// Input is the JSON a run's input holds (the run.created event's input).
//
// An input is journaled whole in its run.created event, so it is at most
// MaxInput bytes as JSON.
type Input struct {
	Prompt string `json:"prompt"`
	// Script drives the fake provider; other providers ignore it.
	Script json.RawMessage `json:"script,omitempty"`
	// Options are per-run provider options.
	Options json.RawMessage `json:"options,omitempty"`
}

type attemptData struct {
	Attempt int  `json:"attempt"`
	Resume  bool `json:"resume,omitempty"`
}

type textData struct {
	Text string `json:"text"`
}

type errorData struct {
	Class      belay.ErrorClass `json:"class"`
	Message    string           `json:"message"`
	RetryAfter float64          `json:"retryAfterSeconds,omitempty"`
}

type watchdogData struct {
	Tier        Tier    `json:"tier"`
	IdleSeconds float64 `json:"idleSeconds"`
}

// Recovery decisions.
const (
	DecisionResume = "resume" // reattach through the provider from its cursor
	DecisionResend = "resend" // start the turn again: no side effect settled
	DecisionStrand = "strand" // stop: resending would repeat side effects
	DecisionFail   = "fail"   // stop: not recoverable, or attempts exhausted
	DecisionFinish = "finish" // the turn had ended: finish as complete
)

type recoveryData struct {
	Decision string `json:"decision"`
	Reason   string `json:"reason"`
	Attempt  int    `json:"attempt"`
}

type turnEndData struct {
	StopReason string `json:"stopReason,omitempty"`
}

type suspendedData struct {
	Reason string `json:"reason"`
}

// deliveryData is the payload of the deliveries the runtime posts.
type deliveryData struct {
	Run    string           `json:"run"`
	Status belay.RunStatus  `json:"status"`
	Class  belay.ErrorClass `json:"class,omitempty"`
	Reason string           `json:"reason,omitempty"`
	At     time.Time        `json:"at"`
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only for the plain structs above
	}
	return b
}
