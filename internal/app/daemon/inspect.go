package daemon

import (
	"context"
	"errors"
	"fmt"
	"github.com/belayhq/belay/transcript"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/lock"
	"github.com/belayhq/belay/store"
	"github.com/belayhq/belay/store/fsstore"
	"github.com/belayhq/belay/store/pgstore"
)

// Report is `belay doctor`: the daemon, the store and the locks.
type Report struct {
	DataDir string `json:"dataDir"`
	// Store is "file" or the PostgreSQL URL (password redacted).
	Store    string         `json:"store,omitempty"`
	Daemon   DaemonState    `json:"daemon"`
	Lock     *lock.Status   `json:"lock,omitempty"`
	Socket   FileState      `json:"socket"`
	Token    *FileState     `json:"token,omitempty"`
	Config   FileState      `json:"config"`
	Sessions map[string]int `json:"sessions"`
	// SessionsUnknown says the sessions could not be counted (the store
	// did not answer): Sessions is empty, not zero.
	SessionsUnknown bool `json:"sessionsUnknown,omitempty"`
	// Nodes are the store's runtime owners (on PostgreSQL: the daemons
	// serving the database), live or not, by the store's clock.
	Nodes       []store.Owner        `json:"nodes,omitempty"`
	Quarantined []QuarantinedSession `json:"quarantined"`
	Problems    []string             `json:"problems"`
	NextAction  string               `json:"nextAction"`
	Command     string               `json:"command"`
}

// DaemonState says whether a daemon answers.
type DaemonState struct {
	Running bool `json:"running"`
	// Offline: this report was made from the files.
	Offline bool `json:"offline"`
}

// FileState describes a file of the data directory.
type FileState struct {
	Path   string `json:"path"`
	Exists bool   `json:"exists"`
	Mode   string `json:"mode,omitempty"`
	OK     bool   `json:"ok"`
}

// QuarantinedSession is a session whose journal is damaged.
type QuarantinedSession struct {
	Session string `json:"session"`
	Journal string `json:"journal"`
	Offset  int64  `json:"offset"`
	Problem string `json:"problem"`
	// Repairable says belay repair can rebuild the journal: its bytes
	// are damaged after a good first event (not missing, empty or
	// unreadable).
	Repairable bool `json:"repairable"`
}

func fileState(path string, maxPerm fs.FileMode) FileState {
	st := FileState{Path: path}
	fi, err := os.Lstat(path)
	if err != nil {
		st.OK = errors.Is(err, fs.ErrNotExist)
		return st
	}
	// Octal, as chmod takes it ("0600"); FileMode.String of a permission
	// reads "-rw-------", a regular file, whatever the file is.
	st.Exists, st.Mode = true, fmt.Sprintf("%04o", fi.Mode().Perm())
	st.OK = fi.Mode().Perm()&^maxPerm == 0
	return st
}

// Inspect reports on a data directory. It changes nothing. st may be nil
// (offline and no readable store).
func Inspect(ctx context.Context, dir string, st store.Store, running bool) (Report, error) {
	rep := Report{DataDir: dir, Daemon: DaemonState{Running: running, Offline: !running}, Sessions: map[string]int{},
		Quarantined: []QuarantinedSession{}, Problems: []string{}}
	if ls, err := lock.Inspect(filepath.Join(dir, fsstore.LockName), lock.Options{}); err == nil {
		rep.Lock = &ls
	}
	rep.Socket = fileState(filepath.Join(dir, SocketName), 0o600)
	if t := fileState(filepath.Join(dir, TokenName), 0o600); t.Exists {
		rep.Token = &t
		if !t.OK {
			rep.Problems = append(rep.Problems, "the TCP token file is readable by others: chmod 600 "+t.Path)
		}
	}
	rep.Config = fileState(filepath.Join(dir, ConfigName), 0o600)
	configErr := CheckConfig(dir)
	if configErr != nil {
		rep.Config.OK = false
		rep.Problems = append(rep.Problems, configErr.Error())
	}
	if fi, err := os.Stat(dir); err == nil && fi.Mode().Perm()&0o077 != 0 {
		rep.Problems = append(rep.Problems, "the data directory is open to others: chmod 700 "+dir)
	}
	if !rep.Socket.OK {
		rep.Problems = append(rep.Problems, "the socket is open to others")
	}
	if ps, ok := st.(*pgstore.Store); ok {
		rep.Store = ps.URL()
	} else if st != nil {
		rep.Store = "file"
	}
	degraded := false
	if sh, ok := st.(interface{ Health(context.Context) error }); ok {
		if err := sh.Health(ctx); err != nil {
			degraded = true
			rep.Problems = append(rep.Problems, "degraded: "+strings.TrimPrefix(err.Error(), "belay: "))
		}
	}
	if st != nil {
		sessions, err := st.Sessions(ctx, belay.SessionFilter{})
		if errors.Is(err, belay.ErrStoreUnreachable) {
			if !degraded {
				degraded = true
				rep.Problems = append(rep.Problems, "degraded: "+strings.TrimPrefix(err.Error(), "belay: "))
			}
			sessions, err = nil, nil
			rep.SessionsUnknown = true
		}
		if err != nil {
			return rep, err
		}
		if !degraded {
			if rep.Nodes, err = st.Owners(ctx); errors.Is(err, belay.ErrStoreUnreachable) {
				rep.Nodes, err = nil, nil
			}
			if err != nil {
				return rep, err
			}
		}
		for _, s := range sessions {
			rep.Sessions[string(s.State)]++
			if s.State == belay.SessionQuarantined {
				q := QuarantinedSession{Session: s.ID, Problem: s.Problem}
				if ji, ok := st.(store.JournalInspector); ok {
					if info, err := ji.JournalInfo(s.ID); err == nil {
						q.Journal, q.Offset = info.Path, info.QuarantineOffset
						q.Repairable = info.Repairable()
					}
				}
				rep.Quarantined = append(rep.Quarantined, q)
			}
		}
	}
	switch {
	case configErr != nil && !running:
		// No daemon can start until the config is fixed: the problem says how.
		rep.NextAction = "resolve_manually"
	case len(rep.Quarantined) > 0:
		// The session's doctor names the step (a repair, or what to do
		// when a repair cannot work).
		rep.NextAction, rep.Command = "resolve_manually", "belay sessions doctor "+rep.Quarantined[0].Session
		if rep.Quarantined[0].Repairable {
			rep.NextAction = "repair_journal"
		}
	case !running && rep.Lock != nil && rep.Lock.Stale:
		rep.NextAction, rep.Command = "release_stale_lock", "belay daemon start"
	case !running:
		rep.NextAction, rep.Command = "start_daemon", "belay daemon start"
	case degraded:
		// The daemon resumes by itself when its store answers.
		rep.NextAction, rep.Command = "retry_later", "belay daemon status"
	case len(rep.Problems) > 0:
		rep.NextAction = "resolve_manually"
	default:
		rep.NextAction = "none"
	}
	return rep, nil
}

// exporter returns the transcript export of the API (ExportEvents).
func exporter(st store.Store) func(ctx context.Context, w io.Writer, session, format string) (transcript.ExportSummary, error) {
	return func(ctx context.Context, w io.Writer, session, format string) (transcript.ExportSummary, error) {
		return ExportEvents(ctx, st, w, session, format)
	}
}
