package journal

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/belayhq/belay/internal/atomicfile"
)

// maxSnapshotSize caps how much of snapshot.json Open reads.
const maxSnapshotSize = 256 << 20

// snapshotVersion is the current snapshot.json layout.
const snapshotVersion = 1

// snapshotFile is snapshot.json. Like a journal line, it ends in a
// `,"crc":"XXXXXXXX"}` trailer over the bytes before it.
type snapshotFile struct {
	Version int               `json:"version"`
	LastSeq uint64            `json:"lastSeq"`
	Size    int64             `json:"size"`
	LastCRC string            `json:"lastCrc"` // the checksum of the line holding LastSeq
	Index   []indexEntry      `json:"index"`
	IDs     map[string]uint64 `json:"ids"`
	State   json.RawMessage   `json:"state"`
}

// Snapshot returns the caller's folded state from a trusted snapshot and
// the seq it covers. ok is false when there is none; the caller then folds
// from seq 0. Either way, the caller folds Read(seq, ...) on top.
func (j *Journal) Snapshot() (state []byte, seq uint64, ok bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.snapState == nil {
		return nil, 0, false
	}
	return j.snapState, j.snapSeq, true
}

// WriteSnapshot atomically saves state as the folded state of the journal
// through seq, which must be synced.
func (j *Journal) WriteSnapshot(state []byte, seq uint64) error {
	if len(state) == 0 || !json.Valid(state) {
		return fmt.Errorf("journal: snapshot state must be valid JSON")
	}
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return ErrClosed
	}
	if j.readOnly || j.quarantine != nil {
		j.mu.Unlock()
		return fmt.Errorf("%w: not writing a snapshot for %s", ErrReadOnly, j.path)
	}
	if seq > j.durable.lastSeq {
		j.mu.Unlock()
		return fmt.Errorf("journal: snapshot at seq %d is past the synced seq %d", seq, j.durable.lastSeq)
	}
	snap := snapshotFile{Version: snapshotVersion, LastSeq: seq, State: state, IDs: make(map[string]uint64)}
	for id, s := range j.ids {
		if s <= seq {
			snap.IDs[id] = s
		}
	}
	n := countUpTo(j.durable.index, seq)
	index := j.durable.index[:n]
	j.mu.Unlock()

	if seq > 0 {
		start, end, crc, err := j.lineOf(seq)
		if err != nil {
			return err
		}
		snap.Size, snap.LastCRC = end, crc
		// Keep a bounded index so that Open reads a constant amount; seeks
		// bisect between its entries. The last entry is the line at seq, so
		// Open verifies the snapshot by reading that one line.
		snap.Index = thinIndex(index, j.snapIndexMax)
		if last := snap.Index[len(snap.Index)-1]; last.Seq != seq {
			snap.Index = append(snap.Index, indexEntry{Seq: seq, Off: start})
		}
	}
	body, err := json.Marshal(snap)
	if err != nil {
		return fmt.Errorf("journal: encode snapshot: %w", err)
	}
	body = body[:len(body)-1] // drop '}': the trailer closes the object
	sum := crc32.Checksum(body, castagnoli)
	body = append(body, `,"crc":"`...)
	body = appendHex32(body, sum)
	body = append(body, "\"}\n"...)
	if err := j.checkFence(); err != nil {
		return err
	}
	if err := atomicfile.WriteFile(j.fsys, filepath.Join(j.dir, SnapshotName), body, 0o600); err != nil {
		return fmt.Errorf("journal: write snapshot: %w", err)
	}
	j.mu.Lock()
	j.snapState, j.snapSeq = state, seq
	j.mu.Unlock()
	return nil
}

// countUpTo returns how many index entries have Seq <= seq.
func countUpTo(index []indexEntry, seq uint64) int {
	lo, hi := 0, len(index)
	for lo < hi {
		m := (lo + hi) / 2
		if index[m].Seq <= seq {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// lineOf returns the start and end offsets of the line holding seq, and
// the line's checksum digits.
func (j *Journal) lineOf(seq uint64) (start, end int64, crc string, err error) {
	j.mu.Lock()
	index, size := j.durable.index, j.durable.size
	j.mu.Unlock()
	off, err := j.seek(index, size, seq)
	if err != nil {
		return 0, 0, "", err
	}
	lr := newLineReader(j.f, off, size)
	defer lr.release()
	for {
		line, loff, complete, err := lr.next()
		if err != nil || !complete {
			return 0, 0, "", fmt.Errorf("journal: seq %d not found in %s: %v", seq, j.path, err)
		}
		h, err := decodeHeader(line)
		if err != nil {
			return 0, 0, "", j.corruptAt(loff, 0, err.Error())
		}
		if h.Seq == seq {
			return loff, lr.off, lineCRC(line), nil
		}
	}
}

// maxSnapshotIndex bounds the index entries a snapshot keeps.
const maxSnapshotIndex = 256

// thinIndex keeps at most about n evenly spread entries, the first included.
func thinIndex(index []indexEntry, n int) []indexEntry {
	if len(index) <= n {
		return append([]indexEntry(nil), index...)
	}
	step := (len(index) + n - 1) / n
	out := make([]indexEntry, 0, n+1)
	for i := 0; i < len(index); i += step {
		out = append(out, index[i])
	}
	return out
}

// loadSnapshot reads snapshot.json and checks it against the journal of
// size end. It returns the scan state to resume from (empty if the snapshot
// is not trusted), the snapshot if trusted, and a word on why.
func (j *Journal) loadSnapshot(end int64) (scanState, *snapshotFile, string) {
	empty := scanState{ids: make(map[string]uint64)}
	path := filepath.Join(j.dir, SnapshotName)
	f, err := j.fsys.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return empty, nil, "absent"
	}
	if err != nil {
		return empty, nil, "unreadable: " + err.Error()
	}
	raw, err := io.ReadAll(io.LimitReader(f, maxSnapshotSize+1))
	_ = f.Close()
	if err != nil {
		return empty, nil, "unreadable: " + err.Error()
	}
	if len(raw) > maxSnapshotSize {
		return empty, nil, "too large"
	}
	raw = bytes.TrimSuffix(raw, []byte("\n"))
	if _, err := checkLine(raw); err != nil {
		return empty, nil, "corrupt: " + err.Error()
	}
	var snap snapshotFile
	if err := json.Unmarshal(raw, &snap); err != nil {
		return empty, nil, "corrupt: " + err.Error()
	}
	if snap.Version != snapshotVersion {
		return empty, nil, fmt.Sprintf("version %d is not %d", snap.Version, snapshotVersion)
	}
	if snap.LastSeq == 0 {
		return empty, nil, "covers nothing"
	}
	if snap.Size > end {
		return empty, nil, fmt.Sprintf("covers %d bytes but the journal has %d", snap.Size, end)
	}
	if len(snap.Index) == 0 || snap.Index[0].Off != 0 || snap.Index[0].Seq != 1 {
		return empty, nil, "index does not start at seq 1"
	}
	if why := j.checkSnapshot(&snap); why != "" {
		return empty, nil, why
	}
	// Verify the journal from the last index entry to the snapshot's end:
	// the line ending at Size must hold LastSeq.
	last := snap.Index[len(snap.Index)-1]
	probe := scanState{lastSeq: last.Seq - 1, size: last.Off, ids: make(map[string]uint64)}
	d, err := scan(j.f, &probe, snap.Size)
	if err == nil && d == nil && probe.lastSeq == snap.LastSeq && probe.size == snap.Size {
		// Same seq at the same size: is it the same line?
		if string(probe.lastCRC[:]) != snap.LastCRC {
			return empty, nil, "belongs to another journal (last line differs)"
		}
	} else {
		return empty, nil, fmt.Sprintf("does not match the journal (seq %d at %d bytes)", snap.LastSeq, snap.Size)
	}
	if snap.IDs == nil {
		snap.IDs = make(map[string]uint64)
	}
	st := scanState{lastSeq: snap.LastSeq, size: snap.Size, index: snap.Index, ids: snap.IDs, lastIdx: last.Off, lastTS: probe.lastTS}
	return st, &snap, "trusted"
}

// checkSnapshot checks what a snapshot says beyond its last line, which
// the caller verifies: the ids it maps lie within it, and each index entry
// names the start of the line holding its seq (reads seek by them). It
// returns why the snapshot is not to be trusted, or "".
func (j *Journal) checkSnapshot(snap *snapshotFile) string {
	for id, seq := range snap.IDs {
		if seq == 0 || seq > snap.LastSeq {
			return fmt.Sprintf("id %q at seq %d is outside the seqs it covers", id, seq)
		}
	}
	var buf [1 + len(`{"seq":`) + 21]byte
	for i, e := range snap.Index {
		if e.Seq > snap.LastSeq || e.Off >= snap.Size {
			return "index points past what it covers"
		}
		if i == 0 {
			continue
		}
		if prev := snap.Index[i-1]; e.Seq <= prev.Seq || e.Off <= prev.Off {
			return "index is not in order"
		}
		// The line before ends at Off and the line at Off holds Seq.
		n, err := j.f.ReadAt(buf[:], e.Off-1)
		if n < 2 || err != nil && err != io.EOF {
			return fmt.Sprintf("index entry for seq %d is unreadable", e.Seq)
		}
		if seq, ok := peekSeq(buf[1:n]); buf[0] != '\n' || !ok || seq != e.Seq {
			return fmt.Sprintf("index entry for seq %d does not match the journal", e.Seq)
		}
	}
	return ""
}

// lineCRC returns the checksum digits of a verified line (without '\n').
func lineCRC(line []byte) string { return string(line[len(line)-10 : len(line)-2]) }
