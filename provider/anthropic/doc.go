// Package anthropic is the provider for Anthropic's Messages API.
//
// It streams a message (stream: true) and reports text, thinking and
// tool_use blocks (their input_json_delta fragments assembled into calls,
// reported as intent: the provider never executes tools), usage and the
// stop reason. Pings are keepalives. HTTP errors and in-stream error
// events map to belay's error classes: 429 rate_limited with retry-after,
// 529 overloaded, a "prompt is too long" 400 context_overflow
// (docs/providers.md has the table). The Messages API cannot be resumed,
// so the provider has no Resume capability: the runtime resends a broken
// run when no side-effecting tool call could repeat.
package anthropic
