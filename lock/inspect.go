package lock

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/belayhq/belay/internal/proc"
)

// Reason says why a lock is judged held, free or stale. The values are a
// stable enum for doctor output.
type Reason string

const (
	// ReasonFree: no lock file.
	ReasonFree Reason = "free"
	// ReasonHeld: a valid record whose holder is alive (or, on another
	// host, not expired).
	ReasonHeld Reason = "held"
	// ReasonProcessGone: the holder is on this host and its PID is gone.
	ReasonProcessGone Reason = "holder_process_gone"
	// ReasonPIDReused: the holder's PID now names another process (the
	// start time differs), for example after a reboot.
	ReasonPIDReused Reason = "pid_reused"
	// ReasonExpired: a holder on another host did not heartbeat before
	// expiresAt (its process cannot be probed from here).
	ReasonExpired Reason = "expired"
	// ReasonHung: the holder process is alive on this host but did not
	// heartbeat before expiresAt: it is stopped (SIGSTOP, a debugger),
	// suspended, or wedged. It is never replaced: the person ends it.
	ReasonHung Reason = "hung"
	// ReasonMetadataMissing: an empty lock file older than the grace period.
	ReasonMetadataMissing Reason = "metadata_missing"
	// ReasonMetadataUnreadable: a lock file that does not parse, older than
	// the grace period.
	ReasonMetadataUnreadable Reason = "metadata_unreadable"
	// ReasonMetadataInGrace: an empty or unparseable lock file younger than
	// the grace period; it counts as held.
	ReasonMetadataInGrace Reason = "metadata_unreadable_in_grace"
	// ReasonContended: TryAcquire saw the lock change hands on every one of
	// its attempts. Only in HeldError.
	ReasonContended Reason = "contended"
)

// Verdict is the judgement of one owner record.
type Verdict struct {
	Reason Reason `json:"reason"`
	// Stale means the record's holder is gone (or, on another host,
	// expired): the next acquirer replaces it.
	Stale bool `json:"stale"`
	// Local means the holder is on this host, so its PID was probed.
	Local bool `json:"local"`
	// Alive means the holder process was verified running: local, PID
	// present and start time equal (or unknown on this platform). It is
	// false for holders on other hosts, whose processes cannot be probed.
	Alive bool `json:"alive"`
	// Stopped means the live local holder is stopped by a signal (it
	// will not run until SIGCONT); only with ReasonHung, where the
	// platform can tell.
	Stopped bool `json:"stopped,omitempty"`
	// Detail explains the verdict for people.
	Detail string `json:"detail"`
	// Action is the command that resolves a hung holder; empty otherwise.
	Action string `json:"action,omitempty"`
}

// Status is what Inspect finds at a lock path.
type Status struct {
	Path string `json:"path"`
	// Holder is the decoded record; nil when free or unreadable.
	Holder *Owner `json:"holder,omitempty"`
	// ModTime is the lock file's modification time; zero when free.
	ModTime time.Time `json:"modTime,omitzero"`
	// Now is the clock reading the verdict was made at.
	Now time.Time `json:"now"`
	Verdict
}

// Free reports whether no lock file exists.
func (s Status) Free() bool { return s.Reason == ReasonFree }

// replaceable reports whether the holder this record names does not hold
// the lock: it is gone, expired on another host, or this very process
// without a Lock holding that nonce (a record an earlier attempt of ours
// left behind). An acquirer that holds the kernel lock overwrites such a
// record; one that does not waits for whoever does.
func (s Status) replaceable() bool {
	if s.Reason == ReasonMetadataInGrace {
		return false
	}
	if s.Holder == nil || s.Stale {
		return true
	}
	o := s.Holder
	if !s.Local || o.PID != os.Getpid() || o.StartTime != selfStartTime() {
		return false
	}
	_, ours := heldHere.Load(o.Nonce)
	return !ours
}

// heldError describes a held status as an error.
func (s Status) heldError() *HeldError {
	return &HeldError{Path: s.Path, Holder: s.Holder, Reason: s.Reason, Stopped: s.Stopped, Age: s.Now.Sub(s.ModTime), Now: s.Now}
}

// Inspect reads and judges the lock at path without changing anything. It
// uses opts.Clock and opts.MissingMetaGrace; other options are ignored. An
// error means the file could not be read (not that it is malformed, which is
// a Reason).
func Inspect(path string, opts Options) (Status, error) {
	opts = opts.withDefaults()
	return inspect(path, opts)
}

func inspect(path string, opts Options) (Status, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Status{Path: path, Now: opts.Clock(), Verdict: Verdict{Reason: ReasonFree, Detail: "no lock file"}}, nil
	}
	if err != nil {
		return Status{}, fmt.Errorf("lock: inspect %s: %w", path, err)
	}
	defer f.Close()
	return judgeOpen(f, path, opts)
}

// judgeOpen reads and judges the record in the open lock file f.
func judgeOpen(f *os.File, path string, opts Options) (Status, error) {
	data, info, err := readFile(f)
	if err != nil {
		return Status{}, fmt.Errorf("lock: inspect %s: %w", path, err)
	}
	now := opts.Clock()
	st := Status{Path: path, ModTime: info.ModTime(), Now: now}
	o, derr := DecodeOwner(data)
	if derr != nil {
		age := now.Sub(st.ModTime)
		empty := len(data) == 0
		switch {
		case age <= opts.MissingMetaGrace:
			st.Verdict = Verdict{Reason: ReasonMetadataInGrace,
				Detail: fmt.Sprintf("lock file has no readable owner record yet (%s old, grace %s): %v", roundDuration(age), opts.MissingMetaGrace, derr)}
		case empty:
			st.Verdict = Verdict{Reason: ReasonMetadataMissing, Stale: true,
				Detail: fmt.Sprintf("lock file is empty and %s old (grace %s)", roundDuration(age), opts.MissingMetaGrace)}
		default:
			st.Verdict = Verdict{Reason: ReasonMetadataUnreadable, Stale: true,
				Detail: fmt.Sprintf("lock file is unreadable and %s old (grace %s): %v", roundDuration(age), opts.MissingMetaGrace, derr)}
		}
		return st, nil
	}
	st.Holder = &o
	st.Verdict = Judge(o, now)
	return st, nil
}

// Judge applies the stale rules (see the package doc) to an owner record at
// time now. It probes local processes and changes nothing.
func Judge(o Owner, now time.Time) Verdict {
	v := Verdict{Reason: ReasonHeld, Local: o.Host == hostname()}
	if v.Local {
		alive, err := proc.Alive(o.PID)
		switch {
		case err != nil:
			// Cannot probe (unsupported platform): expiry alone decides.
		case !alive:
			v.Reason, v.Stale = ReasonProcessGone, true
			v.Detail = fmt.Sprintf("holder pid %d is not running", o.PID)
			return v
		case o.StartTime == "":
			v.Alive = true // recorded where start times are unknown
		default:
			tok, err := proc.StartTime(o.PID)
			switch {
			case errors.Is(err, proc.ErrNoProcess):
				v.Reason, v.Stale = ReasonProcessGone, true
				v.Detail = fmt.Sprintf("holder pid %d is not running", o.PID)
				return v
			case err != nil:
				// Start time unknowable (unsupported, hidden /proc): PID
				// existence is all we know; expiry still applies.
				v.Alive = true
			case tok != o.StartTime:
				v.Reason, v.Stale = ReasonPIDReused, true
				v.Detail = fmt.Sprintf("pid %d now belongs to another process (start time %s, record says %s)", o.PID, tok, o.StartTime)
				return v
			default:
				v.Alive = true
			}
		}
	}
	if now.After(o.ExpiresAt) && v.Alive {
		// Alive here but silent: never replaced, reported with the way
		// out.
		v.Reason = ReasonHung
		v.Stopped = proc.ProcessState(o.PID) == proc.StateStopped
		silent := roundDuration(now.Sub(o.HeartbeatAt))
		if v.Stopped {
			v.Detail = fmt.Sprintf("holder pid %d is alive but stopped (SIGSTOP or suspended); no heartbeat for %s", o.PID, silent)
			v.Action = fmt.Sprintf("kill -CONT %d", o.PID)
		} else {
			v.Detail = fmt.Sprintf("holder pid %d is alive but has not heartbeaten for %s (hung?)", o.PID, silent)
			v.Action = fmt.Sprintf("kill %d", o.PID)
		}
		return v
	}
	if now.After(o.ExpiresAt) {
		v.Reason, v.Stale = ReasonExpired, true
		v.Detail = fmt.Sprintf("no heartbeat since %s; expired %s ago", o.HeartbeatAt.UTC().Format(time.RFC3339), roundDuration(now.Sub(o.ExpiresAt)))
		return v
	}
	v.Detail = fmt.Sprintf("held by pid %d on host %s, expires in %s", o.PID, o.Host, roundDuration(o.ExpiresAt.Sub(now)))
	return v
}

// readFile reads the record of the open lock file f (retrying a read torn
// by a concurrent in-place heartbeat) and stats it, so that the content and
// the identity belong together.
func readFile(f *os.File) ([]byte, fs.FileInfo, error) {
	info, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	data, err := readRecordBytes(f)
	if err != nil {
		return nil, nil, err
	}
	return data, info, nil
}
