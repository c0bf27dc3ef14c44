package transcript

import (
	"fmt"
	"io"
	"io/fs"

	"github.com/belayhq/belay/internal/vfs"
	"github.com/belayhq/belay/journal"
)

// Encode writes msgs in format f from scratch: a JSON array for openai and
// anthropic, a session file (with a header) for pi, session lines for
// claude, and a journal for belay (see encodeBelay). Ids the format needs
// (pi entry ids, Claude Code uuids) are derived from the content, so the
// same messages always give the same bytes.
func Encode(w io.Writer, f Format, msgs []Message) error {
	c, err := codecFor(f)
	if err != nil {
		return err
	}
	d := &Document{Format: f, codec: c, term: "\n"}
	work := cloneMessages(msgs)
	for i := range work {
		work[i].src, work[i].fp = nil, 0
		for j := range work[i].Blocks {
			work[i].Blocks[j].raw, work[i].Blocks[j].fp = nil, 0
		}
		d.items = append(d.items, &work[i])
	}
	switch f {
	case FormatOpenAI, FormatAnthropic:
		d.array = true
		d.prefix, d.sep, d.suffix = []byte("[\n"), []byte(",\n"), []byte("\n]\n")
		if len(work) == 0 {
			d.prefix, d.suffix = []byte("["), []byte("]\n")
		}
	case FormatPi:
		d.tree, d.parentK, d.version = true, "parentId", 3
		ts := "1970-01-01T00:00:00.000Z"
		if len(work) > 0 && !work[0].Meta.Time.IsZero() {
			ts = work[0].Meta.Time.UTC().Format("2006-01-02T15:04:05.000Z")
		}
		id := newUUID(map[string]bool{}, "belay/session/"+ts)
		d.header = &entry{line: 1, raw: []byte(`{"type":"session","version":3,"id":"` + id + `","timestamp":"` + ts + `","cwd":""}`), term: "\n"}
		d.entries = []*entry{d.header}
	case FormatClaude:
		d.tree, d.parentK = true, "parentUuid"
	}
	b, err := d.Bytes()
	if err != nil {
		return err
	}
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("transcript: %w", err)
	}
	return nil
}

// Export writes the conversation of a session's journal events in format
// f, repaired (RepairMessages) so that it is valid for the format. It is
// `belay sessions export ID --format F`.
func Export(w io.Writer, events []journal.Event, f Format) error {
	msgs, err := FromJournal(events)
	if err != nil {
		return err
	}
	if f != FormatBelay {
		msgs, _ = RepairMessages(msgs)
	}
	return Encode(w, f, msgs)
}

// noSync skips fsync for scratch journals that are read back at once.
type noSync struct{}

func (noSync) OpenFile(name string, flag int, perm fs.FileMode) (vfs.File, error) {
	f, err := vfs.OS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return noSyncFile{f}, nil
}
func (noSync) Rename(o, n string) error                { return vfs.OS.Rename(o, n) }
func (noSync) Remove(n string) error                   { return vfs.OS.Remove(n) }
func (noSync) RemoveAll(p string) error                { return vfs.OS.RemoveAll(p) }
func (noSync) Stat(n string) (fs.FileInfo, error)      { return vfs.OS.Stat(n) }
func (noSync) MkdirAll(p string, m fs.FileMode) error  { return vfs.OS.MkdirAll(p, m) }
func (noSync) ReadDir(n string) ([]fs.DirEntry, error) { return vfs.OS.ReadDir(n) }
func (noSync) SyncDir(string) error                    { return nil }

type noSyncFile struct{ vfs.File }

func (noSyncFile) Sync() error { return nil }
