// Package proc identifies local processes across PID reuse. It answers two
// questions that owner records (package lock) and leases ask about a process
// on this host:
//
//   - [Alive]: does a process with this PID exist? kill(pid, 0) semantics:
//     EPERM (exists, owned by someone else) counts as alive. On Linux a zombie
//     (exited, not yet reaped) counts as dead: it can never heartbeat again.
//   - [StartTime]: an opaque token naming one incarnation of a PID. Two calls
//     for the same running process return the same token; a different process
//     that later reuses the PID gets a different one. On Linux the token is
//     the boot id (/proc/sys/kernel/random/boot_id) joined with field 22 of
//     /proc/<pid>/stat (start time in clock ticks since boot), so a token
//     recorded before a reboot never matches a process after it. On darwin it
//     is the kern.proc.pid start time (wall clock, microseconds). Elsewhere
//     StartTime returns [ErrUnsupported] and callers fall back to PID
//     existence alone.
//
// [Members] lists the live processes of a process group or session (Linux):
// the command provider waits for an agent's whole group, the browser
// provider measures a browser's processes.
//
// Tokens are only comparable for equality, and only on the host that made
// them. StartTime returns an error wrapping [ErrNoProcess] only when the
// process is known not to exist; any other error (for example /proc mounted
// with hidepid) means "unknown", never "dead".
//
// The package is internal: a seam, not a promise.
package proc
