// Package openai is the provider for OpenAI and OpenAI-compatible HTTP
// APIs (vLLM, llama.cpp's server, Ollama, gateways).
//
// It speaks two APIs, chosen by Config.API:
//
//   - "chat" (default): Chat Completions streaming. Text, reasoning
//     ("reasoning_content" / "reasoning" deltas of compatible servers) and
//     tool call deltas, assembled into calls reported as intent (the
//     provider never executes tools), usage and the finish reason.
//   - "responses": the Responses API in background mode. The response id
//     and the last applied sequence_number are reported as the run's
//     conversation ref (Kind "openai.response", Cursor the sequence
//     number), so that after a dropped connection or a daemon restart the
//     stream is resumed with starting_after, falling back to polling; a
//     cancelled run cancels the response on the server.
//
// Every failure is a *provider.Error in one of belay's classes, with
// secrets scrubbed (docs/providers.md has the table). The subpackage
// openaitest is a loopback server speaking both APIs, for tests.
package openai
