// Package command is the provider that runs a local agent CLI (claude -p
// with stream-json output, codex exec --json, any JSONL or plain text
// emitter) as a detached process, and reattaches to it after a restart.
//
// A run starts the configured argv in its own session and process group,
// through a small /bin/sh wrapper that records the agent's exit status in
// the run's directory. The wrapper is double-forked: it is not the
// daemon's child, so it outlives a daemon crash, is never left a zombie by
// a daemon that stopped watching it, and a restarted daemon sees it exactly
// as the daemon that started it did. Its stdout and stderr are files in the
// run directory, never pipes.
//
// The provider tails the stdout file, decodes it line by line in the
// configured format into provider events, and reports the process in
// RefUpdate events:
//
//	Kind   "command"
//	ID     "<pid>:<pgid>:<start time token>"  (package internal/proc)
//	Target the stdout file's path
//	Cursor the byte offset of the output consumed (complete lines only)
//
// A request with Resume and such a ref reattaches: the wrapper is adopted
// only if its PID still names the same process (same start time), the
// decoder state is rebuilt from the output before the cursor without
// emitting it, and tailing goes on from the cursor, so every event is
// emitted exactly once across the restart.
//
// Cancelling the context kills the process group (SIGTERM, a grace period,
// SIGKILL), unless the context's cause is [ErrDetach]: then the process is
// left running for a later Resume. docs/providers.md gives the
// configuration, the formats and the error mapping.
package command
