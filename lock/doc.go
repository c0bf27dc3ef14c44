// Package lock makes one process the only writer of a data directory: a
// kernel lock that lives exactly as long as its holder, an owner record
// that says who holds it (published atomically, kept alive by heartbeats,
// replaced at once when its holder is provably gone), and self-fencing for
// a holder that can no longer prove it owns the lock.
//
// # Owner record
//
// The lock file at a path holds one JSON [Owner] record:
//
//	{"version":1,"host":"h","pid":1234,"startTime":"<boot id>:<ticks>",
//	 "nonce":"<32 hex>","incarnation":"<id>","purpose":"daemon",
//	 "acquiredAt":"...","heartbeatAt":"...","expiresAt":"..."}
//
// The nonce is random per acquisition and is what "ours" means: a holder
// only renews or removes a file whose nonce is its own. startTime is the
// opaque token of internal/proc, so a reused PID is told apart from the
// holder. Readers accept any version >= 1 and read the fields above; a later
// version may add fields but must keep these meaning the same.
//
// # One writer: the kernel lock
//
// The authority is a kernel lock: the holder keeps the lock file open with
// an exclusive flock(2) for as long as it holds it, and the kernel drops
// that lock only when the holder closes the file or dies. So on one host a
// live process is never taken over, whatever its heartbeat says: a holder
// that is stopped (SIGSTOP), suspended, wedged or out of file descriptors
// still holds the kernel lock, and an acquirer gets a [*HeldError] with
// [ReasonHung], the holder's PID and the command that resolves it
// (`kill -CONT PID` for a stopped process, `kill PID` otherwise). The owner
// record is for display, diagnosis, and hosts where the kernel lock is not
// shared (see "Across hosts").
//
// # Publishing
//
// [Lock.TryAcquire] creates an absent lock file by writing the complete
// record to a unique temp file in the same directory, fsyncing it and
// link(2)ing it to the lock path (link fails with EEXIST when the path
// exists), so the path never exists without its record. It then opens the
// path, takes the flock without blocking, and checks that the path still
// names the inode it locked (a releaser unlinks the path while holding the
// lock, so a lock taken on an unlinked inode is retried). When the file
// already existed, the acquirer, now holding the kernel lock, judges the
// record: a record whose holder is gone (below) is overwritten in place
// with the acquirer's; a record naming a live local process that does not
// hold the kernel lock (an older belay) is never replaced.
//
// Records are padded to a fixed size so that [Lock.Heartbeat] rewrites
// heartbeatAt and expiresAt in place, with one write at offset 0 and an
// fdatasync on the descriptor it already holds: a heartbeat never needs a
// new file descriptor. A reader that finds a record torn by a concurrent
// rewrite reads it again.
//
// # Stale rules
//
// A record is stale, and replaced by the next acquirer that holds the
// kernel lock, if and only if one of:
//
//   - [ReasonProcessGone]: the holder is on this host and its PID does not
//     exist (or is a zombie);
//   - [ReasonPIDReused]: the holder is on this host, the PID exists, but its
//     start time differs from the record's (a new process, or a reboot);
//   - [ReasonExpired]: the holder is on another host and now is after
//     expiresAt;
//   - [ReasonMetadataMissing], [ReasonMetadataUnreadable]: the file is empty
//     or does not parse and its mtime is older than
//     Options.MissingMetaGrace. Younger such files are
//     [ReasonMetadataInGrace] and count as held.
//
// A local holder that is alive but past expiresAt is [ReasonHung]: held,
// never stale. Age alone never makes a record stale.
//
// # Self-fencing
//
// A writer must not write once it cannot prove that it still holds the
// lock. [Lock.Check] is that proof, made before every durable write (the
// journal calls it before each commit): it passes while the last confirmed
// heartbeat (one that read our nonce back from the record) is younger than
// TTL - FenceMargin, measured on a monotonic clock that keeps counting
// during suspend (CLOCK_BOOTTIME on Linux). Past that line Check proves
// ownership again, synchronously, by a heartbeat; if that fails (the
// record carries another nonce, the path names another file, or the write
// fails) the Lock is fenced for good and every later Check returns
// [ErrFenced]. A [Heartbeater] whose heartbeats keep failing fences the
// Lock the same way and reports it through OnLost.
//
// Reading CLOCK_BOOTTIME is a system call (microseconds on a virtual
// machine), too dear for every commit, so Check first reads time.Now,
// whose wall and monotonic readings come from the vDSO: Go's monotonic
// clock stops during suspend but the wall clock does not, so a suspend
// shows as wall time running ahead of monotonic time. Only when both are
// below the line, and the wall clock did not go back against the
// monotonic one, does Check pass without the exact clock.
//
// Why this is safe after SIGSTOP and suspend: on one host, a stopped or
// suspended holder keeps its kernel lock, so nobody else can have become
// the holder, and on waking it proves ownership again and goes on. Across
// hosts, another holder may only replace the record after expiresAt by its
// clock; the sleeper's suspend-aware clock says at least TTL - FenceMargin
// passed, so its first write after waking re-reads the record, finds
// another nonce and stops. The margin absorbs clock skew between hosts and
// the time between a heartbeat's start and its write.
//
// # Across hosts
//
// On a filesystem that shares flock between hosts (Linux NFS maps it to
// POSIX locks through the lock manager), the kernel lock holds across
// hosts too. Where it is not shared, the record is the only signal: an
// acquirer replaces a remote record only after it expired, and the old
// holder fences itself at its next write. One residual window remains
// there (a holder stopped between its Check and its write, for longer than
// the TTL), which is why many nodes share a PostgreSQL store, whose
// fencing is in the database, rather than a data directory.
//
// # Waiting
//
// [Lock.Acquire] retries [Lock.TryAcquire] with exponential backoff and
// jitter on a timer, selecting on ctx.Done: it never blocks other
// goroutines, never sleeps past the context deadline, and on giving up
// returns an error that wraps both the context's error and the [*HeldError]
// naming the holder.
//
// # Errors
//
// [*HeldError] (errors.Is [ErrHeld]) names the holder: "lock: /p is held by
// pid 1234 on host h (daemon, since 2026-...Z, heartbeat 3s ago)".
// [ErrLost] means the file on disk is no longer ours (removed or replaced).
// [ErrFenced] means the holder can no longer prove ownership and must not
// write.
// [ErrNotHeld] means the Lock does not hold the lock. [ErrMalformed] is a
// record that does not decode.
package lock
