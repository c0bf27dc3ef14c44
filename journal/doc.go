// Package journal is belay's per-session append-only log.
//
// # On-disk format
//
// A session directory holds journal.jsonl and, optionally, snapshot.json.
// The journal is JSON Lines: one event per line, each line a JSON object
// terminated by a single '\n', so that jq and grep read it as they are.
// Every line has exactly this layout, with fields in this order:
//
//		{"seq":7,"ts":"2026-11-22T00:37:34.123456789Z","type":"run.created","id":"k1","run":"run_...","epoch":3,"data":{...},"crc":"1c2d3e4f"}\n
//		|<------------------------------ body ------------------------------------------------------------>|<------ trailer ------>|
//
//	  - seq: the event's sequence number, a decimal integer, gap-free from 1.
//	  - ts: the append time in UTC, RFC 3339 with exactly nine fractional digits.
//	  - type: the event type, 1-64 characters of [a-z0-9._-] starting with a letter.
//	  - id: optional idempotency id (1-256 bytes of UTF-8); omitted when empty.
//	  - run: optional run id; omitted when empty.
//	  - epoch: optional lease epoch (fencing token); omitted when zero.
//	  - data: the event payload, compact JSON (null when absent).
//	  - crc: CRC-32C (Castagnoli) of the body bytes, as 8 lowercase hex digits.
//
// The body is every byte of the line before the trailer `,"crc":"XXXXXXXX"}`.
// Because encoding/json escapes control characters, a '\n' byte appears
// only as a line terminator. A line, terminator included, is at most
// MaxRecordSize bytes; longer lines are refused on append and treated as
// damage on read, before anything is allocated for them.
//
// # Durability
//
// Appends are group-committed: concurrent appenders share one write(2) and
// one fdatasync(2). A Sync append returns after the fdatasync that covers
// it; a Buffered append returns at once and is written and synced by the next
// commit, at most Options.BufferedDelay later. Readers only ever see events
// that are synced, so a reader never observes an event that a crash could
// take back. After a failed write or fdatasync the journal turns read-only
// until it is reopened: an fsync is never retried on the same descriptor.
//
// With Options.Log the sync is not the journal file's own: a commit writes
// its batch to the file and hands the same bytes to a store-wide commit
// log (package commitlog), which makes many journals' commits durable with
// one fdatasync of its own file and puts them back into the journal files
// after a power cut. A rollback (Journal.Rollback) records its cut in the
// log first.
//
// # Recovery
//
// Open scans the journal (or, with a trusted snapshot, only the part after
// it). A damaged region that runs to the end of the file with no valid line
// after it - a partial last line, a bad checksum at EOF, zeroed sectors - is
// a torn tail: the file is copied to journal.jsonl.broken-<UTC time>, then
// truncated to the last good line. Damage followed by any valid line is
// corruption: Open returns a *QuarantineError carrying the offset, together
// with a read-only Journal that serves the events before the damage. A
// damaged journal is never read as empty and never rewritten.
//
// # Snapshot
//
// snapshot.json caches, for a prefix of the journal, the caller's folded
// state, the sparse seek index and the idempotency ids, plus the lastSeq and
// byte size of that prefix. It is trusted only when the journal's line that
// ends at that size has that seq; otherwise it is ignored and everything is
// rebuilt from the journal, which is canonical. It is replaced atomically
// (temp file, fsync, rename, fsync dir) and carries its own checksum.
package journal
