package lock

import (
	"errors"
	"fmt"
	"io"
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
	// ReasonExpired: the holder did not heartbeat before expiresAt.
	ReasonExpired Reason = "expired"
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
	Reason Reason
	// Stale means the lock may be reclaimed now.
	Stale bool
	// Local means the holder is on this host, so its PID was probed.
	Local bool
	// Alive means the holder process was verified running: local, PID
	// present and start time equal (or unknown on this platform). It is
	// false for holders on other hosts, whose processes cannot be probed.
	Alive bool
	// Detail explains the verdict for people.
	Detail string
}

// Status is what Inspect finds at a lock path.
type Status struct {
	Path string
	// Holder is the decoded record; nil when free or unreadable.
	Holder *Owner
	// ModTime is the lock file's modification time; zero when free.
	ModTime time.Time
	// Now is the clock reading the verdict was made at.
	Now time.Time
	Verdict

	info fs.FileInfo // identity of the file judged, for reclaim
}

// Free reports whether no lock file exists.
func (s Status) Free() bool { return s.Reason == ReasonFree }

// heldError describes a held status as an error.
func (s Status) heldError() *HeldError {
	return &HeldError{Path: s.Path, Holder: s.Holder, Reason: s.Reason, Age: s.Now.Sub(s.ModTime), Now: s.Now}
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
	data, info, err := readFile(path)
	now := opts.Clock()
	if errors.Is(err, fs.ErrNotExist) {
		return Status{Path: path, Now: now, Verdict: Verdict{Reason: ReasonFree, Detail: "no lock file"}}, nil
	}
	if err != nil {
		return Status{}, fmt.Errorf("lock: inspect %s: %w", path, err)
	}
	st := Status{Path: path, ModTime: info.ModTime(), Now: now, info: info}
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
	if now.After(o.ExpiresAt) {
		v.Reason, v.Stale = ReasonExpired, true
		v.Detail = fmt.Sprintf("no heartbeat since %s; expired %s ago", o.HeartbeatAt.UTC().Format(time.RFC3339), roundDuration(now.Sub(o.ExpiresAt)))
		return v
	}
	v.Detail = fmt.Sprintf("held by pid %d on host %s, expires in %s", o.PID, o.Host, roundDuration(o.ExpiresAt.Sub(now)))
	return v
}

// readFile reads at most maxRecordSize bytes of path and stats the same open
// file, so that the content and the identity belong together.
func readFile(path string) ([]byte, fs.FileInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, maxRecordSize))
	if err != nil {
		return nil, nil, err
	}
	return data, info, nil
}
