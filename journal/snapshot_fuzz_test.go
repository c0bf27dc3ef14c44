package journal

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/belayhq/belay/internal/vfs"
)

// snapFixture is a journal of a few hundred KB (several index entries, so
// that seeks bisect between the entries of a thinned snapshot index) and a
// snapshot of it written by the journal itself.
type snapFixture struct {
	journal []byte
	snap    []byte // snapshot.json as written
	events  []Event
	ids     map[string]uint64
}

func newSnapFixture(tb testing.TB) *snapFixture {
	dir := tb.TempDir()
	j, err := Open(dir, Options{FS: vfs.NoSync(vfs.OS), Now: fixedClock()})
	if err != nil {
		tb.Fatal(err)
	}
	pad := strings.Repeat("x", 1500)
	for i := 1; i <= 300; i++ {
		e := Event{Type: "fuzz.snap", Data: json.RawMessage(fmt.Sprintf(`{"i":%d,"pad":%q}`, i, pad))}
		if i%7 == 0 {
			e.ID = fmt.Sprintf("id-%d", i)
		}
		if _, err := j.Append(context.Background(), Sync, e); err != nil {
			tb.Fatal(err)
		}
	}
	j.snapIndexMax = 2 // thin the snapshot's index: seeks bisect
	if err := j.WriteSnapshot([]byte(`{"folded":true}`), 250); err != nil {
		tb.Fatal(err)
	}
	fx := &snapFixture{ids: map[string]uint64{}}
	if fx.events, err = j.Read(0, 0); err != nil {
		tb.Fatal(err)
	}
	for _, e := range fx.events {
		if e.ID != "" {
			fx.ids[e.ID] = e.Seq
		}
	}
	if err := j.Close(); err != nil {
		tb.Fatal(err)
	}
	if fx.journal, err = os.ReadFile(filepath.Join(dir, FileName)); err != nil {
		tb.Fatal(err)
	}
	if fx.snap, err = os.ReadFile(filepath.Join(dir, SnapshotName)); err != nil {
		tb.Fatal(err)
	}
	return fx
}

// sealSnapshot gives a snapshot body a valid checksum trailer, as
// WriteSnapshot does: body is the JSON object without its closing brace.
func sealSnapshot(body []byte) []byte {
	body = bytes.TrimSuffix(bytes.TrimRight(body, " \n"), []byte("}"))
	out := bytes.Clone(body)
	out = append(out, `,"crc":"`...)
	out = appendHex32(out, crc32.Checksum(body, castagnoli))
	return append(out, "\"}\n"...)
}

// unsealSnapshot returns a written snapshot's body without its trailer,
// closed again as a JSON object.
func unsealSnapshot(snap []byte) []byte {
	i := bytes.LastIndex(snap, []byte(`,"crc":"`))
	return append(bytes.Clone(snap[:i]), '}')
}

// FuzzSnapshot opens an intact journal beside an arbitrary snapshot.json.
// With sealed set the fuzzed body gets a valid checksum, so the fuzzer
// reaches the checks behind it. The journal is canonical and the snapshot
// a cache: whatever the snapshot holds, Open must not panic or fail, every
// event a read returns must be the journal's event at that seq, and the
// idempotency ids must be the journal's. A snapshot the checksum does not
// cover must change nothing at all.
func FuzzSnapshot(f *testing.F) {
	fx := newSnapFixture(f)
	body := unsealSnapshot(fx.snap)
	f.Add(fx.snap, false)
	f.Add(body, true)
	f.Add([]byte{}, false)
	f.Add([]byte("{}"), true)
	f.Add([]byte(`{"version":1,"lastSeq":1,"size":10,"index":[{"s":1,"o":0}],"state":null}`), true)
	var snap snapshotFile
	if err := json.Unmarshal(body, &snap); err != nil {
		f.Fatal(err)
	}
	mutate := func(change func(s *snapshotFile)) {
		c := snap
		c.Index = append([]indexEntry(nil), snap.Index...)
		c.IDs = map[string]uint64{}
		for k, v := range snap.IDs {
			c.IDs[k] = v
		}
		change(&c)
		b, err := json.Marshal(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, true)
	}
	// Regression seeds: a snapshot whose checksum holds but whose index or
	// ids do not fit the journal it sits beside.
	mutate(func(s *snapshotFile) { s.IDs["id-forged"] = 9999 })                     // an id past the snapshot
	mutate(func(s *snapshotFile) { s.Index = append(s.Index[:1], s.Index[2:]...) }) // drop an entry: still fine
	mutate(func(s *snapshotFile) { s.Index[1].Off += 5 })                           // an entry mid-line
	mutate(func(s *snapshotFile) { s.Index[1].Seq += 3 })                           // an entry at the wrong seq
	mutate(func(s *snapshotFile) { s.Index[0], s.Index[1] = s.Index[1], s.Index[0] })
	mutate(func(s *snapshotFile) { s.Index = append(s.Index, indexEntry{Seq: 0, Off: 0}) })
	mutate(func(s *snapshotFile) { s.Index[len(s.Index)-1].Off = -1 })
	mutate(func(s *snapshotFile) { s.Size = -1 })
	mutate(func(s *snapshotFile) { s.State = json.RawMessage(`null`) })
	// One directory serves every run: the journal is written once and cut
	// back after each run's append, so a run costs no file creation.
	dir := f.TempDir()
	journalPath := filepath.Join(dir, FileName)
	if err := os.WriteFile(journalPath, fx.journal, 0o600); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, snapBytes []byte, sealed bool) {
		if sealed {
			snapBytes = sealSnapshot(snapBytes)
		}
		defer func() {
			if err := os.Truncate(journalPath, int64(len(fx.journal))); err != nil {
				t.Fatal(err)
			}
		}()
		if err := os.WriteFile(filepath.Join(dir, SnapshotName), snapBytes, 0o600); err != nil {
			t.Fatal(err)
		}
		j, err := Open(dir, Options{FS: vfs.NoSync(vfs.OS), Now: fixedClock(), BufferedDelay: time.Millisecond})
		if err != nil {
			t.Fatalf("open of an intact journal failed because of its snapshot: %v", err)
		}
		defer j.Close()
		trusted := j.Recovery().Snapshot == "trusted"
		if !sealed && trusted && !bytes.Equal(snapBytes, fx.snap) {
			t.Fatalf("trusted a snapshot the checksum does not cover: %q", snapBytes)
		}
		if j.LastSeq() != uint64(len(fx.events)) {
			t.Fatalf("last seq %d, want %d", j.LastSeq(), len(fx.events))
		}
		if state, seq, ok := j.Snapshot(); ok && (seq == 0 || seq > j.LastSeq() || !json.Valid(state)) {
			t.Fatalf("snapshot state at seq %d of %d: %q", seq, j.LastSeq(), state)
		}
		for id, seq := range j.ids {
			if seq == 0 || seq > j.LastSeq() {
				t.Fatalf("id %q maps to seq %d of %d", id, seq, j.LastSeq())
			}
			// Open cannot afford to look up every id of a trusted snapshot
			// in the journal: the ids of one that belay sealed are taken
			// as written. All others must be the journal's.
			if want, ok := fx.ids[id]; (!ok || want != seq) && !(sealed && trusted) {
				t.Fatalf("id %q maps to seq %d; the journal has it at %d (known: %v)", id, seq, want, ok)
			}
		}
		for id := range fx.ids {
			if _, ok := j.ids[id]; !ok && !(sealed && trusted) {
				t.Fatalf("id %q was forgotten", id)
			}
		}
		// Reads from anywhere return the journal's events, or fail loudly;
		// never another event.
		for _, after := range []uint64{0, 1, 6, 48, 49, 120, 199, 249, 250, 251, 299} {
			evs, err := j.Read(after, 3)
			if err != nil {
				t.Fatalf("read after %d of an intact journal: %v", after, err)
			}
			want := fx.events[after:min(int(after)+3, len(fx.events))]
			if len(evs) != len(want) {
				t.Fatalf("read after %d: %d events, want %d", after, len(evs), len(want))
			}
			for i := range evs {
				if evs[i].Seq != want[i].Seq || evs[i].ID != want[i].ID || !bytes.Equal(evs[i].Data, want[i].Data) {
					t.Fatalf("read after %d returned seq %d %q, want seq %d", after, evs[i].Seq, evs[i].Data, want[i].Seq)
				}
			}
		}
		// The journal takes appends, and a known id is still a duplicate.
		seqs, err := j.Append(context.Background(), Sync, Event{Type: "after", ID: "id-294"}, Event{Type: "after"})
		if err != nil || seqs[0] != 294 || seqs[1] != uint64(len(fx.events)+1) {
			t.Fatalf("append after open: %v, %v", seqs, err)
		}
		if err := j.Err(); err != nil && !errors.Is(err, ErrClosed) {
			t.Fatalf("journal failed: %v", err)
		}
	})
}
