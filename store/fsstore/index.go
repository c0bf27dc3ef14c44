package fsstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/belayhq/belay/internal/clock"
)

// The store index lets a restart skip opening the journals of sessions
// that did not change. A clean Close writes it: for every healthy session,
// its folded state, last seq and last event's time, with the identity of
// its journal file as Close left it (device, inode, size, modification
// and change times). Open trusts an entry only while the journal's
// identity is exactly that: any write to the file since (an append, a cut,
// a replay of the commit log, a repair) changes its size or its change
// time, which no program can set back, and a replaced file has another
// inode. A session without a trusted entry is opened and folded from its
// journal as always. The journals stay the only truth: a missing, torn or
// unreadable index costs a slower start, never a state.
//
// The file is written to a temporary name, synced and renamed, under the
// data directory's lock (a store that lost it writes none): by Close when
// no journal failed to close, and while the store is open (liveIndex).
//
// Format: the 8-byte magic, then one record per session, then the
// CRC-32C of all that precedes it (4 bytes, little endian). A record is
// uvarint-prefixed: the session id, the five identity numbers, the last
// seq, the last event's time in unix nanoseconds, and the state's JSON
// (the encoding of snapshot.json's state).

// IndexName is the store index's file in the data directory.
const IndexName = "sessions.index"

// DefaultIndexEvery is how often an open store rewrites the store index
// (when a journal closed since the last time).
const DefaultIndexEvery = 5 * time.Minute

// liveIndex writes the store index while the store is open: every
// Options.IndexEvery, when a journal closed since the last write. Only
// sessions whose journals are closed are in it (idle beyond
// Options.MaxOpen): their files do not change while they stay closed, and
// the entry of one that reopens stops matching at its first write. Close
// writes the last index, of every session.
type liveIndex struct {
	mu      sync.Mutex // serializes index writes; guards timer, stopped, written
	timer   clock.Timer
	stopped bool
	wg      sync.WaitGroup // invalidations in flight
	invMu   sync.Mutex     // guards closing and wg.Add
	closing bool           // Close waits for invalidations: no more start
	written int64          // closed at the last write
	closed  atomic.Int64   // journals closed by eviction so far
}

// scheduleIndex arms the next live index write.
func (s *Store) scheduleIndex() {
	every := s.opts.IndexEvery
	if every == 0 {
		every = DefaultIndexEvery
	}
	if s.opts.ReadOnly || every < 0 {
		return
	}
	s.idx.mu.Lock()
	defer s.idx.mu.Unlock()
	if !s.idx.stopped {
		s.idx.timer = s.clock.AfterFunc(every, s.indexTick)
	}
}

// indexTick writes the live index if a journal closed since the last
// write. A failure is not the store's: the next tick or Close tries again,
// and without an index a restart only opens more journals.
func (s *Store) indexTick() {
	s.idx.mu.Lock()
	if n := s.idx.closed.Load(); !s.idx.stopped && n != s.idx.written && s.fence() == nil {
		if all, err := s.allSessions(); err == nil && s.writeIndexLocked(all) == nil {
			s.idx.written = n
		}
	}
	s.idx.mu.Unlock()
	s.scheduleIndex()
}

// invalidateIndex removes the store index: a session got a problem (a
// quarantine, a fold error) that an index written before would not bring
// back after a kill, since it need not change the journal. Writes after it
// leave the session out. It runs on its own goroutine, under s.idx.mu (so
// that no write in progress puts an index back after it): its callers may
// hold a session's locks, which index writes take after s.idx.mu.
func (s *Store) invalidateIndex() {
	if s.opts.ReadOnly {
		return
	}
	s.idx.invMu.Lock()
	defer s.idx.invMu.Unlock()
	if s.idx.closing {
		return // Close writes the last index, without the session
	}
	s.idx.wg.Add(1)
	go func() {
		defer s.idx.wg.Done()
		s.idx.mu.Lock()
		defer s.idx.mu.Unlock()
		if s.fence() != nil {
			return // the directory may be another process's now
		}
		// If it cannot be removed, the next write replaces it: the next
		// live write (due, since written is reset) or Close's.
		_ = s.fsys.Remove(s.indexPath())
		s.idx.written = -1
	}()
}

// waitInvalidations waits for the index removals in flight and starts no
// more; Close calls it before it writes the last index.
func (s *Store) waitInvalidations() {
	s.idx.invMu.Lock()
	s.idx.closing = true
	s.idx.invMu.Unlock()
	s.idx.wg.Wait()
}

// stopIndex stops the live index writes; Close calls it first.
func (s *Store) stopIndex() {
	s.idx.mu.Lock()
	defer s.idx.mu.Unlock()
	s.idx.stopped = true
	if s.idx.timer != nil {
		s.idx.timer.Stop()
	}
}

var indexMagic = []byte("belayix1")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// fileStamp identifies a file's content without reading it.
type fileStamp struct {
	Dev, Ino     uint64
	Size         int64
	Mtime, Ctime int64 // unix nanoseconds
}

// indexEntry is a session as the index holds it.
type indexEntry struct {
	stamp     fileStamp
	lastSeq   uint64
	lastEvent int64
	state     []byte // JSON; a slice of the index file read
}

// IndexStats says how a store's Open loaded its sessions.
type IndexStats struct {
	// FromIndex sessions were restored from the store index without
	// opening their journals; Opened sessions were opened and folded.
	FromIndex, Opened int
	// Err is why the index could not be used at all (torn, of another
	// version), if it existed.
	Err error
	// Took is how long loading the sessions took.
	Took time.Duration
}

// Loaded reports how Open loaded the sessions.
func (s *Store) Loaded() IndexStats { return s.loadStats }

// indexPath is the store index's path.
func (s *Store) indexPath() string { return filepath.Join(s.dir, IndexName) }

// readIndex reads the store index. A missing index is an empty one.
func (s *Store) readIndex() (map[string]indexEntry, error) {
	f, err := s.fsys.OpenFile(s.indexPath(), os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("fsstore: read the store index: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("fsstore: read the store index: %w", err)
	}
	raw := make([]byte, fi.Size())
	if _, err := io.ReadFull(f, raw); err != nil {
		return nil, fmt.Errorf("fsstore: read the store index: %w", err)
	}
	return decodeIndex(raw)
}

// decodeIndex decodes a store index file.
func decodeIndex(raw []byte) (map[string]indexEntry, error) {
	bad := func(why string) error {
		return fmt.Errorf("fsstore: the store index %s: %s", IndexName, why)
	}
	if len(raw) < len(indexMagic)+4 || !bytes.Equal(raw[:len(indexMagic)], indexMagic) {
		return nil, bad("is not an index of this version")
	}
	body := raw[:len(raw)-4]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(raw[len(raw)-4:]) {
		return nil, bad("fails its checksum (torn or damaged)")
	}
	out := map[string]indexEntry{}
	p := body[len(indexMagic):]
	uv := func() uint64 {
		v, n := binary.Uvarint(p)
		if n <= 0 {
			p = nil
			return 0
		}
		p = p[n:]
		return v
	}
	bytesField := func() ([]byte, bool) {
		n := uv()
		if p == nil || n > uint64(len(p)) {
			return nil, false
		}
		b := p[:n:n]
		p = p[n:]
		return b, true
	}
	for len(p) > 0 {
		id, ok := bytesField()
		if !ok {
			return nil, bad("has a truncated record")
		}
		var e indexEntry
		e.stamp.Dev, e.stamp.Ino = uv(), uv()
		e.stamp.Size, e.stamp.Mtime, e.stamp.Ctime = int64(uv()), int64(uv()), int64(uv())
		e.lastSeq, e.lastEvent = uv(), int64(uv())
		if e.state, ok = bytesField(); !ok {
			return nil, bad("has a truncated record")
		}
		out[string(id)] = e
	}
	return out, nil
}

// encodeIndex encodes a store index file.
func encodeIndex(entries map[string]indexEntry) []byte {
	ids := make([]string, 0, len(entries))
	size := len(indexMagic) + 4
	for id, e := range entries {
		ids = append(ids, id)
		size += len(id) + len(e.state) + 12*binary.MaxVarintLen64
	}
	sort.Strings(ids)
	b := make([]byte, 0, size)
	b = append(b, indexMagic...)
	for _, id := range ids {
		e := entries[id]
		b = binary.AppendUvarint(b, uint64(len(id)))
		b = append(b, id...)
		for _, v := range []uint64{e.stamp.Dev, e.stamp.Ino, uint64(e.stamp.Size), uint64(e.stamp.Mtime), uint64(e.stamp.Ctime), e.lastSeq, uint64(e.lastEvent)} {
			b = binary.AppendUvarint(b, v)
		}
		b = binary.AppendUvarint(b, uint64(len(e.state)))
		b = append(b, e.state...)
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// restore returns the session id as the index holds it, or nil when the
// entry cannot be trusted: the journal is not the file the index saw.
func (s *Store) restore(id string, e indexEntry) *session {
	fi, err := s.fsys.Stat(s.journalPath(id))
	if err != nil {
		return nil
	}
	if st, ok := stamp(fi); !ok || st != e.stamp {
		return nil
	}
	st, err := decodeState(e.state)
	if err != nil || st.Session.ID != id {
		return nil
	}
	ss := &session{id: id, dir: filepath.Join(s.dir, SessionsName, id), store: s, st: st}
	ss.lastSeq.Store(e.lastSeq)
	ss.lastEvent.Store(e.lastEvent)
	ss.lastTS.Store(e.lastEvent)
	return ss
}

// indexEntry returns the session's index entry, or false if it must be
// opened from its journal next time: it has a problem, a failed write or
// buffered changes not folded, or its journal is open (Close closed it).
func (ss *session) indexEntry() (indexEntry, bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	// The journal is closed, and stays closed from here to the stat: an
	// append between would open it and, once closed again, leave another
	// last seq (state changes also wait for ss.mu, held here).
	closedAt := func() (uint64, bool) {
		ss.jmu.Lock()
		defer ss.jmu.Unlock()
		return ss.lastSeq.Load(), ss.j == nil && len(ss.retired) == 0
	}
	seq, closed := closedAt()
	last := ss.lastTS.Load()
	if !closed || len(ss.pending) > 0 || ss.problem.Load() != nil || ss.lastWriteErr.Load() != nil ||
		ss.pruned.Load() || ss.unclean.Load() || seq == 0 || ss.st.Session.ID != ss.id {
		return indexEntry{}, false
	}
	fi, err := ss.store.fsys.Stat(ss.store.journalPath(ss.id))
	if err != nil {
		return indexEntry{}, false
	}
	st, ok := stamp(fi)
	if !ok {
		return indexEntry{}, false
	}
	if again, closed := closedAt(); !closed || again != seq || ss.lastTS.Load() != last {
		return indexEntry{}, false
	}
	raw, err := ss.st.MarshalJSON() // not json.Marshal: it would compact it again
	if err != nil {
		return indexEntry{}, false
	}
	return indexEntry{stamp: st, lastSeq: seq, lastEvent: last, state: raw}, true
}

// writeIndex writes the store index of sessions, replacing the last one:
// each whose journal is closed, cleanly.
func (s *Store) writeIndex(sessions []*session) error {
	s.idx.mu.Lock()
	defer s.idx.mu.Unlock()
	return s.writeIndexLocked(sessions)
}

// writeIndexLocked is writeIndex with s.idx.mu held.
func (s *Store) writeIndexLocked(sessions []*session) error {
	// A stat and an encoding per session: spread over the CPUs.
	found := make([]indexEntry, len(sessions))
	ok := make([]bool, len(sessions))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(len(sessions), runtime.GOMAXPROCS(0)) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(sessions); i = int(next.Add(1) - 1) {
				found[i], ok[i] = sessions[i].indexEntry()
			}
		})
	}
	wg.Wait()
	entries := make(map[string]indexEntry, len(sessions))
	for i, ss := range sessions {
		if ok[i] {
			entries[ss.id] = found[i]
		}
	}
	tmp := s.indexPath() + ".tmp"
	f, err := s.fsys.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("fsstore: write the store index: %w", err)
	}
	_, err = f.Write(encodeIndex(entries))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = s.fsys.Rename(tmp, s.indexPath())
	}
	if err != nil {
		_ = s.fsys.Remove(tmp)
		return fmt.Errorf("fsstore: write the store index: %w", err)
	}
	return nil
}

// RemoveIndex removes the store index of the data directory dir. An
// offline writer of a journal (belay repair) calls it, holding the
// directory's lock: the index's entries would not be trusted after its
// writes anyway (they change the journal's identity), but a journal
// rewritten to its old size in the same clock tick is not worth the risk.
func RemoveIndex(dir string) error {
	if err := os.Remove(filepath.Join(dir, IndexName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("fsstore: remove the store index: %w", err)
	}
	return nil
}
