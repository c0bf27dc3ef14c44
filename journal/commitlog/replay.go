package commitlog

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/belayhq/belay/internal/vfs"
)

// target is a journal file a replay writes to.
type target struct {
	f        vfs.File
	missing  bool
	repaired bool
}

// replay applies every segment in order to the journals' files and
// returns the segments, with the names each holds, for the checkpointer
// to retire (it syncs the files first; until then a crash replays them
// again, which is idempotent), and the highest segment number seen. Every
// segment is checked before anything is written, so a damaged log changes
// nothing.
func (l *Log) replay() (Replay, []*segment, uint64, error) {
	start := time.Now()
	var rep Replay
	nos, free, err := l.listDir()
	if err != nil {
		return rep, nil, 0, err
	}
	l.free = free
	var last uint64
	for _, name := range free {
		if no, ok := parseSegName(strings.TrimPrefix(filepath.Base(name), "free-")); ok {
			last = max(last, no)
		}
	}
	if len(nos) == 0 {
		return rep, nil, last, nil
	}
	last = max(last, nos[len(nos)-1])
	// First pass: validate, so that damage is reported before any change,
	// and find each name's last drop: what precedes it is not applied.
	idx, err := l.index(nos)
	if err != nil {
		return rep, nil, last, err
	}
	at := 0
	if l.opts.Fence != nil {
		if err := l.opts.Fence(); err != nil {
			return rep, nil, last, fmt.Errorf("commit log: not replaying: %w", err)
		}
	}
	targets := map[string]*target{}
	defer func() {
		for _, t := range targets {
			if t.f != nil {
				_ = t.f.Close()
			}
		}
	}()
	var cmp []byte
	var seg *segment
	apply := func(r record) error {
		at++
		if at <= idx.drops[r.name] {
			return nil // a deleted journal's (the drop itself included)
		}
		seg.names[r.name] = struct{}{}
		t := targets[r.name]
		if t == nil {
			t = &target{}
			targets[r.name] = t
			f, err := l.fsys.OpenFile(l.opts.Path(r.name), os.O_RDWR, 0)
			switch {
			case errors.Is(err, fs.ErrNotExist):
				t.missing = true
			case err != nil:
				return fmt.Errorf("commit log: replay into %s: %w", l.opts.Path(r.name), err)
			default:
				t.f = f
			}
		}
		if t.missing {
			return nil
		}
		switch r.kind {
		case kindWrite:
			if cap(cmp) < len(r.data) {
				cmp = make([]byte, len(r.data))
			}
			cmp = cmp[:len(r.data)]
			n, err := t.f.ReadAt(cmp, r.off)
			if err != nil && !errors.Is(err, io.EOF) {
				return fmt.Errorf("commit log: replay: read %s: %w", t.f.Name(), err)
			}
			if n != len(cmp) || !bytes.Equal(cmp, r.data) {
				t.repaired = true
			}
			// Written even when the file reads the same: what it reads may
			// be pages the kernel failed to write back (a checkpoint whose
			// fdatasync failed, in this boot), which a new descriptor's
			// fdatasync would then report clean. Writing them makes them
			// dirty again, so the checkpoint's sync writes them.
			if _, err := t.f.Seek(r.off, io.SeekStart); err != nil {
				return fmt.Errorf("commit log: replay: seek %s: %w", t.f.Name(), err)
			}
			if _, err := t.f.Write(r.data); err != nil {
				return fmt.Errorf("commit log: replay: write %s: %w", t.f.Name(), err)
			}
		case kindCut:
			fi, err := t.f.Stat()
			if err != nil {
				return fmt.Errorf("commit log: replay: stat %s: %w", t.f.Name(), err)
			}
			if fi.Size() > r.off {
				t.repaired = true
				if err := t.f.Truncate(r.off); err != nil {
					return fmt.Errorf("commit log: replay: cut %s: %w", t.f.Name(), err)
				}
			}
		}
		return nil
	}
	segs := make([]*segment, len(nos))
	for i, no := range nos {
		seg = &segment{no: no, path: filepath.Join(l.dir, segName(no)), names: map[string]struct{}{}}
		segs[i] = seg
		res, err := l.scanFile(no, apply)
		if err != nil {
			return rep, nil, last, err
		}
		rep.Segments++
		rep.Batches += res.batches
		rep.Records += res.records
		if res.torn != "" {
			rep.Torn = fmt.Sprintf("%s at byte %d: %s", segName(no), res.end, res.torn)
		}
	}
	for _, t := range targets {
		switch {
		case t.missing:
			rep.Missing++
		case t.repaired:
			rep.Repaired++
		}
	}
	rep.Took = time.Since(start)
	return rep, segs, last, nil
}

// logIndex is what a first pass over the segments finds: by name, the
// position (counting records from 1 across the segments) of the last drop
// and the cuts with their positions.
type logIndex struct {
	drops map[string]int
	cuts  map[string][]cutAt
}

type cutAt struct {
	at   int
	size int64
}

// index reads every segment once, checking it (a damaged one fails).
func (l *Log) index(nos []uint64) (logIndex, error) {
	idx := logIndex{drops: map[string]int{}, cuts: map[string][]cutAt{}}
	at := 0
	for _, no := range nos {
		if _, err := l.scanFile(no, func(r record) error {
			at++
			switch r.kind {
			case kindCut:
				idx.cuts[r.name] = append(idx.cuts[r.name], cutAt{at, r.off})
			case kindDrop:
				idx.drops[r.name] = at
			}
			return nil
		}); err != nil {
			return idx, err
		}
	}
	return idx, nil
}

// cutBack reports whether a write of name at position at, ending at byte
// end, was taken back by a later cut.
func (idx logIndex) cutBack(name string, at int, end int64) bool {
	for _, c := range idx.cuts[name] {
		if c.at > at && c.size < end {
			return true
		}
	}
	return false
}

// listDir returns the segment numbers in the log's directory, oldest
// first, and the retired files kept for reuse (at most maxFree; others
// are removed).
func (l *Log) listDir() ([]uint64, []string, error) {
	nos, err := Segments(l.fsys, l.dir)
	if err != nil {
		return nil, nil, err
	}
	ents, err := l.fsys.ReadDir(l.dir)
	if err != nil {
		return nil, nil, fmt.Errorf("commit log: list %s: %w", l.dir, err)
	}
	var free []string
	for _, e := range ents {
		// Retired files kept for reuse, and spares the preparer filled:
		// neither is a segment, both can become one.
		rest, retired := strings.CutPrefix(e.Name(), "free-")
		_, seg := parseSegName(rest)
		spare := strings.HasPrefix(e.Name(), "spare-") && strings.HasSuffix(e.Name(), ".log")
		if !(retired && seg || spare) || !e.Type().IsRegular() {
			continue
		}
		path := filepath.Join(l.dir, e.Name())
		if len(free) < maxFree {
			free = append(free, path)
		} else if err := l.fsys.Remove(path); err != nil {
			return nil, nil, fmt.Errorf("commit log: remove %s: %w", path, err)
		}
	}
	return nos, free, nil
}

func (l *Log) scanFile(no uint64, fn func(record) error) (scanResult, error) {
	path := filepath.Join(l.dir, segName(no))
	f, err := l.fsys.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return scanResult{}, fmt.Errorf("commit log: open %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return scanResult{}, fmt.Errorf("commit log: stat %s: %w", path, err)
	}
	return scanSegment(f, path, no, fi.Size(), fn)
}

// Pending reports, without changing anything, whether the segments in dir
// hold bytes the journals' files lack (what a replay would repair): the
// names of those journals. Offline readers use it to say that a store
// needs to be opened for writing before its journals are whole.
func Pending(fsys vfs.FS, dir string, path func(name string) string) ([]string, error) {
	if fsys == nil {
		fsys = vfs.OS
	}
	nos, err := Segments(fsys, dir)
	if err != nil || len(nos) == 0 {
		return nil, err
	}
	l := &Log{fsys: fsys, dir: dir, opts: Options{Path: path}}
	idx, err := l.index(nos)
	if err != nil {
		return nil, err
	}
	lacking := map[string]bool{}
	files := map[string]vfs.File{}
	defer func() {
		for _, f := range files {
			if f != nil {
				_ = f.Close()
			}
		}
	}()
	var cmp []byte
	var names []string
	at := 0
	for _, no := range nos {
		_, err := l.scanFile(no, func(r record) error {
			at++
			if r.kind != kindWrite || lacking[r.name] || at <= idx.drops[r.name] || idx.cutBack(r.name, at, r.off+int64(len(r.data))) {
				return nil
			}
			f, seen := files[r.name]
			if !seen {
				f, err = fsys.OpenFile(path(r.name), os.O_RDONLY, 0)
				if errors.Is(err, fs.ErrNotExist) {
					f, err = nil, nil
				}
				if err != nil {
					return fmt.Errorf("commit log: open %s: %w", path(r.name), err)
				}
				files[r.name] = f
			}
			if f == nil {
				return nil
			}
			if cap(cmp) < len(r.data) {
				cmp = make([]byte, len(r.data))
			}
			cmp = cmp[:len(r.data)]
			n, rerr := f.ReadAt(cmp, r.off)
			if rerr != nil && !errors.Is(rerr, io.EOF) {
				return fmt.Errorf("commit log: read %s: %w", f.Name(), rerr)
			}
			if n != len(cmp) || !bytes.Equal(cmp, r.data) {
				lacking[r.name] = true
				names = append(names, r.name)
			}
			return nil
		})
		if err != nil {
			return names, err
		}
	}
	return names, nil
}
