// Package fake is a scripted provider for tests, demos and chaos runs.
//
// What a run does is a [Script]: the reply text (by default an echo of the
// prompt), how many tokens it streams and how fast, the delay before the
// first token, and steps placed in the stream: stalls, error classes at
// chosen attempts, tool calls with or without side effects, hangs and
// crashes. A script comes from the run input's "script" field, from a model
// string in a compact mini-language ("script:reply=hi;rate=20;crash@3#1"),
// from the session options, or from a JSON file read with [LoadScript].
// docs/providers.md specifies both forms.
//
// Every delay goes through the injected clock, so tests drive a
// [clock.Fake] and never sleep. Side-effecting tool calls that run append a
// record to a file in Options.EffectsDir, which [ReadEffects] reads back, so
// a test can prove that a side effect never ran twice. With Options.Resume
// the provider reports a cursor in RefUpdate events and a resumed request
// continues from it, never emitting a tool call again.
package fake
