// Package transcript is belay's toolkit for agent conversations: a message
// model (system, user, assistant and tool messages made of text, thinking,
// tool call, tool result and image/file blocks, with stop reason, model,
// usage and time), adapters that read and write the formats agents keep on
// disk (belay's own journal, pi and Claude Code sessions, OpenAI Chat
// Completions and Anthropic Messages), and repair at two levels:
//
//   - file level ([RepairFile]): drop lines that are not valid JSON or not
//     valid entries of the format and lines written twice, keep the whole
//     entries written onto a torn line (glued.go) and drop its fragment,
//     remove a byte-order mark, relink entries of pi and Claude Code trees
//     whose parent is missing, refuse an invalid header, keep a backup and
//     replace the file atomically; pi and Claude Code sessions are
//     repaired streaming (stream.go), line and message level, in memory
//     that does not grow with the file; a line too long to hold is read
//     in pieces, checked on its outline and kept (outline.go);
//   - message level ([RepairMessages]): pair tool calls with results per
//     turn frame, make up marked synthetic results for missing ones, drop
//     malformed calls, duplicates and orphans, never delete a delivered
//     reply; idempotent.
//
// [ExportStream] writes a session's conversation in any of the formats
// from its journal, a turn at a time, in memory that does not grow with
// the session (export_stream.go).
//
// A [Document] keeps every entry's bytes, so a file that needs no change is
// written back byte for byte, and a repaired one changes only the entries
// repair touched. docs/transcripts.md describes the formats, detection and
// the rules.
package transcript
