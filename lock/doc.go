// Package lock implements owner records: a file that says which process
// holds something (a data directory, a session), published atomically,
// kept alive by heartbeats, and reclaimed at once when its holder is
// provably gone.
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
// # Publishing
//
// [Lock.TryAcquire] writes the complete record to a unique temp file in the
// same directory, fsyncs it, then link(2)s it to the lock path. link fails
// with EEXIST when the path exists, so creation is exclusive, and the path
// never exists without its complete record. [Lock.Heartbeat] renews
// heartbeatAt and expiresAt by an atomic replace (temp, fsync, rename, fsync
// dir) after checking that the nonce on disk is still its own. The lock
// directory must support hard links (every local POSIX filesystem does).
//
// # Stale rules
//
// A record is stale, and may be reclaimed at once, if and only if one of:
//
//   - [ReasonProcessGone]: the holder is on this host and its PID does not
//     exist (or is a zombie);
//   - [ReasonPIDReused]: the holder is on this host, the PID exists, but its
//     start time differs from the record's (a new process, or a reboot);
//   - [ReasonExpired]: now is after expiresAt: the holder stopped
//     heartbeating. For a holder on another host this is the only rule,
//     since its PID cannot be probed;
//   - [ReasonMetadataMissing], [ReasonMetadataUnreadable]: the file is empty
//     or does not parse (for example left by an older or foreign tool) and
//     its mtime is older than Options.MissingMetaGrace. Younger such files
//     are [ReasonMetadataInGrace] and count as held.
//
// Age alone never makes a record stale: a live holder that keeps
// heartbeating holds the lock however long it runs. Holders must therefore
// heartbeat more often than the TTL; [Lock.StartHeartbeat] does it in the
// background and reports a lost lock through HeartbeatOptions.OnLost,
// [Heartbeater.Lost] and [Heartbeater.Err]: losing a lock is never silent. Expiry compares expiresAt, written by the holder's
// clock, with the reader's clock, so hosts sharing a lock need roughly
// synchronised clocks (skew well below the TTL); the grace period compares
// the file's mtime, set by the filesystem, with the reader's clock.
//
// # Reclaiming
//
// Every mutation of an existing lock file (reclaim of a stale record,
// heartbeat renewal, release) happens under a reclaim guard: an exclusive
// flock(2) on the companion file "<path>.reclaim", which is created on first
// use and never removed. Under the guard the mutator re-reads the lock file
// and acts only if it is still the file it means: for a reclaim, the very
// file it judged stale (same inode and nonce) and still stale; for a
// heartbeat or release, a file carrying its own nonce. The only unguarded mutation is the
// link of a new record, which succeeds only when the path is absent.
// Therefore, between the guarded re-read and the guarded remove, the file
// cannot change: nobody else may remove or replace it (that needs the
// guard), and nobody may create it (the path is occupied). Two racers that
// both saw the same stale record serialise on the guard; the second finds
// the file gone or replaced and never removes the winner's fresh lock. After
// the reclaim every racer retries link, and link picks exactly one winner.
//
// The guard is a kernel lock rather than a file whose presence means
// "held", because a presence guard left by a crashed reclaimer would itself
// need a staleness judgement, and breaking a stale guard races exactly like
// breaking a stale lock. The kernel drops a flock when its holder dies, so a
// crash never wedges the guard. It is held for a read and a rename or
// unlink; waiting for it polls with LOCK_NB and honours the context. On NFS,
// Linux implements flock with POSIX byte-range locks through the NFS lock
// manager. Do not delete "<path>.reclaim" while processes may use the lock.
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
// [ErrNotHeld] means the Lock does not hold the lock. [ErrMalformed] is a
// record that does not decode.
package lock
