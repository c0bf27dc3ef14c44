package browser

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/belayhq/belay/internal/atomicfile"
	"github.com/belayhq/belay/internal/proc"
	"github.com/belayhq/belay/internal/vfs"
)

// A run's browser outlives the daemon on purpose (a restart reattaches to
// it). If the daemon never comes back, or the run ends while no daemon
// follows it, the browser must still be ended by someone. Each run
// directory records its browser and the process that follows it
// (recordName); Reap reads those records and ends the browsers nobody
// follows, after proving that each process is still the browser that was
// started (pid and start time, and still the leader of its own session),
// so an unrelated process that reused the pid is never signalled.

// recordName is the record of a run's browser in its run directory.
const recordName = "browser.json"

// record is what a run directory says about its browser.
type record struct {
	Browser chrome `json:"browser"`
	Owner   owner  `json:"owner"`
}

// owner is the process that follows a run's browser: the daemon (or
// library) that started it or last reattached to it.
type owner struct {
	Host  string `json:"host"`
	PID   int    `json:"pid"`
	Token string `json:"token"` // process start time
}

// self is this process as an owner.
func self() owner {
	host, _ := os.Hostname()
	tok, _ := proc.StartTime(os.Getpid())
	return owner{Host: host, PID: os.Getpid(), Token: tok}
}

// gone reports whether the owner is provably dead: its process is gone,
// or its pid now names a process started at another time. An owner on
// another host is never judged gone.
func (o owner) gone() bool {
	if host, _ := os.Hostname(); o.Host != host {
		return false
	}
	if o.PID <= 0 {
		return true
	}
	if ok, err := proc.Alive(o.PID); err == nil && !ok {
		return true
	}
	tok, err := proc.StartTime(o.PID)
	return errors.Is(err, proc.ErrNoProcess) || (err == nil && tok != o.Token)
}

// writeRecord records b as the run's browser, followed by this process.
func writeRecord(runDir string, b *chrome) error {
	data, err := json.Marshal(record{Browser: *b, Owner: self()})
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(vfs.OS, filepath.Join(runDir, recordName), data, 0o600)
}

// removeRecord deletes the run's browser record.
func removeRecord(runDir string) {
	_ = os.Remove(filepath.Join(runDir, recordName))
}

// Reaped is a browser Reap ended, or the stale record of one that was
// already gone.
type Reaped struct {
	Session string `json:"session"`
	Run     string `json:"run"`
	PID     int    `json:"pid"`
	// Ended: the browser was running and was ended; false for a stale
	// record (the browser had already exited) that was cleared.
	Ended bool   `json:"ended"`
	Why   string `json:"why"`
}

// ReapOptions configure Reap.
type ReapOptions struct {
	// Active, if set, reports whether a run may still resume: its browser
	// is kept even though its owner is gone, for the resume to reattach
	// to (a starting daemon reaps before it resumes its runs). Without
	// it, every browser whose owner is gone is ended; a run that resumes
	// later reopens its conversation in a fresh browser.
	Active func(session, run string) bool
}

// Reap ends the browsers of runs that no live process follows: the
// owner recorded with the browser is gone (and, with Active, the run will
// not resume). A browser whose owner lives is left alone, as is any
// process that is no longer provably the recorded browser. Profiles of
// ended browsers and records of exited ones are deleted.
func (p *Provider) Reap(o ReapOptions) ([]Reaped, error) {
	root := filepath.Join(p.cfg.Dir, "runs")
	recs, err := filepath.Glob(filepath.Join(root, "*", "*", recordName))
	if err != nil {
		return nil, err
	}
	var out []Reaped
	var errs []error
	for _, path := range recs {
		runDir := filepath.Dir(path)
		ses, run := filepath.Base(filepath.Dir(runDir)), filepath.Base(runDir)
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // its run just ended
		}
		var rec record
		if err == nil {
			err = json.Unmarshal(b, &rec)
		}
		if err != nil {
			// Never signal anything on the word of a record that cannot be read.
			errs = append(errs, fmt.Errorf("browser: %s: %w", path, err))
			continue
		}
		br := rec.Browser
		if !br.alive() {
			removeRecord(runDir)
			removeRunProfile(runDir, br.Profile)
			out = append(out, Reaped{Session: ses, Run: run, PID: br.PID, Why: "the browser had exited"})
			continue
		}
		if !rec.Owner.gone() || (o.Active != nil && o.Active(ses, run)) {
			continue
		}
		if sid, err := unix.Getsid(br.PID); err != nil || sid != br.PID {
			// Still the pid and start time, but no longer the leader of
			// its own session: not the process belay started.
			continue
		}
		br.kill()
		if br.alive() {
			errs = append(errs, fmt.Errorf("browser: pid %d of run %s did not end", br.PID, run))
			continue
		}
		removeRecord(runDir)
		removeRunProfile(runDir, br.Profile)
		out = append(out, Reaped{Session: ses, Run: run, PID: br.PID, Ended: true,
			Why: fmt.Sprintf("its owner (pid %d on %s) is gone", rec.Owner.PID, rec.Owner.Host)})
	}
	return out, errors.Join(errs...)
}

// removeRunProfile deletes a profile directory if it lies in the run's
// directory (a record never makes belay delete anything else).
func removeRunProfile(runDir, profile string) {
	if profile == "" || !strings.HasPrefix(filepath.Clean(profile), filepath.Clean(runDir)+string(filepath.Separator)) {
		return
	}
	_ = removeProfile(profile)
}

// reapEvery bounds how often Run reaps.
const reapEvery = time.Minute

// reapOrphans ends, at most once per reapEvery, the browsers of runs that
// ended while no daemon followed them (Reap with Config.RunActive). It
// needs RunActive; it runs from Run.
func (p *Provider) reapOrphans() {
	if p.cfg.RunActive == nil {
		return
	}
	p.reapMu.Lock()
	if time.Since(p.reapedAt) < reapEvery {
		p.reapMu.Unlock()
		return
	}
	p.reapedAt = time.Now()
	p.reapMu.Unlock()
	// Errors name records that cannot be read: they are left as they are
	// and reported by belay browser reap.
	_, _ = p.Reap(ReapOptions{Active: p.cfg.RunActive})
}
