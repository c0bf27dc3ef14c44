// Package fsstore is belay's embedded default store: one journal per session
// in a data directory owned through a lock owner record.
//
// Layout:
//
//	<dir>/belay.lock                       owner record of the process holding the store
//	<dir>/sessions/<ses_id>/journal.jsonl  the session's events (canonical)
//	<dir>/sessions/<ses_id>/snapshot.json  folded state cache (see package journal)
//	<dir>/commitlog/                       the store-wide commit log (sync mode "log")
//	<dir>/sessions.index                   the store index: states as the last clean Close left them
//
// In the default sync mode ("log") a journal's commits are made durable in
// the store-wide commit log (package journal/commitlog), one fdatasync for
// every session committing at that moment; Open replays it into the
// journals before it loads any session, and deleting a session records a
// drop in it so that a session created later under the same id is never
// written with the deleted one's records.
//
// Every state change is a journal event applied to the session's in-memory
// state only after it is durable: a Sync event, or, for a phase change a
// crash may take back (belay.RunUpdate.Buffered), a Buffered one folded
// once the next commit made it durable. On open each session's state is
// rebuilt from its snapshot (when trusted) plus the journal after it. A
// session whose journal is damaged before its tail is loaded read-only and
// reported as quarantined; it is never read as empty or rewritten.
//
// Sessions are created in <dir>/sessions/.new-<id> and renamed into place,
// so a crash never leaves a half-created session; prune renames a session to
// .trash-<id> before deleting it. Open finishes or discards both.
//
// A clean Close writes the store index (index.go): every healthy session's
// state with its journal's identity (device, inode, size, modification and
// change times). Open restores each session whose journal still has that
// identity without opening it, and opens and folds the others, so a
// restart after a clean stop costs a stat and a decode per session. An
// open store also rewrites it every Options.IndexEvery, with the sessions
// whose journals are closed, so that a restart after a kill opens only the
// journals used since.
//
// Journals are opened on demand and closed when idle, beyond
// Options.MaxOpen (handle.go): an idle session costs its folded state, not
// a file descriptor.
package fsstore
