package fsstore

import (
	"errors"
	"io/fs"
	"path/filepath"
	"sort"

	"github.com/belayhq/belay"

	"github.com/belayhq/belay/journal"
	"github.com/belayhq/belay/store"
)

var _ store.JournalInspector = (*Store)(nil)

// JournalInfo inspects a session's journal files. It changes nothing.
func (s *Store) JournalInfo(id string) (store.JournalInfo, error) {
	ss, err := s.session(id)
	if err != nil {
		return store.JournalInfo{}, err
	}
	info := store.JournalInfo{Path: filepath.Join(ss.dir, journal.FileName)}
	// The damage found when the session was opened, or later by a read
	// of the open journal.
	if err := ss.fault(); err != nil {
		var q *journal.QuarantineError
		if errors.As(err, &q) {
			info.Quarantined, info.QuarantineOffset, info.LastGoodSeq = true, q.Offset, q.LastSeq
		} else if !errors.Is(err, fs.ErrNotExist) {
			info.OpenError = err.Error()
		}
	}
	if err := ss.writeFailure(); err != nil {
		info.WriteError = err.Error()
		var df *belay.DiskFullError
		if errors.As(err, &df) {
			info.DiskFull, info.FreeBytes = true, df.Free
		}
	}
	switch fi, err := s.fsys.Stat(info.Path); {
	case errors.Is(err, fs.ErrNotExist):
		info.Missing = true
	case err == nil && fi.Size() == 0:
		info.Empty = true
	}
	broken, _ := filepath.Glob(info.Path + ".broken-*")
	sort.Strings(broken)
	info.BrokenCopies = broken
	return info, nil
}
