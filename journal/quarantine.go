package journal

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/belayhq/belay/internal/atomicfile"
)

// QuarantineName is the marker a read leaves in the session directory when
// it finds damage that Open did not (Open trusted a snapshot and skipped
// the range). The next Open honours it while the journal is the same size,
// so a quarantine is never forgotten by a restart; a repair, which rewrites
// the journal, makes it stale, and Open removes it.
const QuarantineName = "quarantine.json"

// quarantineMarker is the content of QuarantineName.
type quarantineMarker struct {
	Offset  int64  `json:"offset"`
	LastSeq uint64 `json:"lastSeq"`
	Reason  string `json:"reason"`
	// Size is the journal's byte size when the damage was found.
	Size int64 `json:"size"`
}

// writeQuarantine records q durably beside the journal.
func (j *Journal) writeQuarantine(q *QuarantineError, size int64) error {
	if err := j.checkFence(); err != nil {
		return err
	}
	body, err := json.Marshal(quarantineMarker{Offset: q.Offset, LastSeq: q.LastSeq, Reason: q.Reason, Size: size})
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(j.fsys, filepath.Join(j.dir, QuarantineName), append(body, '\n'), 0o600); err != nil {
		return fmt.Errorf("journal: record quarantine of %s: %w", j.path, err)
	}
	return nil
}

// loadQuarantine returns the recorded quarantine of a journal of size
// bytes, or nil. A marker written for another size (the journal was
// repaired since) is removed unless the journal is opened read-only.
func (j *Journal) loadQuarantine(size int64) (*QuarantineError, error) {
	name := filepath.Join(j.dir, QuarantineName)
	f, err := j.fsys.OpenFile(name, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("journal: read %s: %w", name, err)
	}
	raw, err := io.ReadAll(io.LimitReader(f, 64<<10))
	_ = f.Close() // read-only
	if err != nil {
		return nil, fmt.Errorf("journal: read %s: %w", name, err)
	}
	var m quarantineMarker
	if err := json.Unmarshal(raw, &m); err != nil || m.Size != size {
		if j.readOnly {
			return nil, nil
		}
		if err := j.fsys.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("journal: remove stale %s: %w", name, err)
		}
		return nil, nil
	}
	return &QuarantineError{Path: j.path, Offset: m.Offset, LastSeq: m.LastSeq, Reason: m.Reason + " (found by an earlier read)"}, nil
}
