package journal

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// validJournal returns the bytes of a small journal with ids and runs.
func validJournal(f *testing.F) []byte {
	dir := f.TempDir()
	j, err := Open(dir, Options{Now: fixedClock()})
	if err != nil {
		f.Fatal(err)
	}
	for i := 0; i < 6; i++ {
		e := Event{Type: "fuzz.seed", Data: json.RawMessage(`{"i":1,"s":"a\nb"}`)}
		if i%2 == 0 {
			e.ID = "id-" + string(rune('a'+i))
			e.Run = "run_x"
			e.Epoch = uint64(i)
		}
		if _, err := j.Append(context.Background(), Sync, e); err != nil {
			f.Fatal(err)
		}
	}
	if err := j.Close(); err != nil {
		f.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, FileName))
	if err != nil {
		f.Fatal(err)
	}
	return raw
}

func FuzzDecodeLine(f *testing.F) {
	raw := validJournal(f)
	for _, line := range bytes.Split(raw, []byte("\n")) {
		f.Add(line)
	}
	f.Add([]byte(`{"seq":1,"crc":"00000000"}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		e, err := decodeLine(line)
		h, herr := decodeHeader(line)
		if (err == nil) != (herr == nil) && err == nil {
			t.Fatalf("decodeLine accepts what decodeHeader refuses: %v", herr)
		}
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		if h.Seq != e.Seq || h.ID != e.ID {
			t.Fatalf("header %+v disagrees with event %+v", h, e)
		}
		if !json.Valid(line) {
			t.Fatalf("accepted invalid JSON %q", line)
		}
	})
}

// FuzzRecover opens arbitrary journal bytes. Open must not panic; it either
// succeeds with gap-free events that all appear verbatim in the input, or
// quarantines and then serves only events before the damage offset.
func FuzzRecover(f *testing.F) {
	raw := validJournal(f)
	f.Add(raw)
	f.Add(raw[:len(raw)-7])
	flip := bytes.Clone(raw)
	flip[len(raw)/2] ^= 1
	f.Add(flip)
	f.Add(append(bytes.Clone(raw), make([]byte, 100)...))
	f.Add([]byte("\n\n\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, input []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, FileName)
		if err := os.WriteFile(path, input, 0o600); err != nil {
			t.Fatal(err)
		}
		j, err := Open(dir, Options{BufferedDelay: time.Millisecond})
		var q *QuarantineError
		if err != nil && !errors.As(err, &q) {
			t.Fatalf("open: %v", err)
		}
		defer j.Close()
		evs, rerr := j.Read(0, 0)
		if q != nil {
			if !errors.Is(rerr, ErrQuarantined) {
				t.Fatalf("quarantined journal read without error: %v", rerr)
			}
			after, _ := os.ReadFile(path)
			if !bytes.Equal(after, input) {
				t.Fatal("quarantined journal was rewritten")
			}
		} else if rerr != nil {
			t.Fatalf("read: %v", rerr)
		}
		limit := len(input)
		if q != nil {
			limit = int(q.Offset)
		}
		for i, e := range evs {
			if e.Seq != uint64(i+1) {
				t.Fatalf("event %d has seq %d", i, e.Seq)
			}
		}
		// Every event returned comes from a verified line before the limit.
		lr := newLineReader(bytes.NewReader(input), 0, int64(limit))
		n := 0
		for n < len(evs) {
			line, _, complete, err := lr.next()
			if err != nil || !complete {
				t.Fatalf("event %d is not backed by a complete line before offset %d", n+1, limit)
			}
			if _, err := checkLine(line); err != nil {
				t.Fatalf("event %d is backed by a bad line: %v", n+1, err)
			}
			n++
		}
		if q == nil {
			// A torn tail is cut only where nothing valid follows: the file
			// is a prefix of the input and the part cut holds no line that
			// passes its checksum.
			after, _ := os.ReadFile(path)
			if !bytes.HasPrefix(input, after) {
				t.Fatal("recovery rewrote the journal instead of truncating it")
			}
			cut := newLineReader(bytes.NewReader(input), int64(len(after)), int64(len(input)))
			for {
				line, _, complete, err := cut.next()
				if err != nil {
					break
				}
				if _, cerr := checkLine(line); complete && cerr == nil {
					t.Fatalf("truncation dropped a valid line: %q", line)
				}
			}
			cut.release()
			// Recovery left a journal that accepts appends.
			seqs, err := j.Append(context.Background(), Sync, Event{Type: "after"})
			if err != nil || seqs[0] != uint64(len(evs)+1) {
				t.Fatalf("append after recovery: %v %v", seqs, err)
			}
		}
	})
}

// FuzzDecodeLineView checks the streaming decoder against decodeLine: it
// decodes every line decodeLine does, the same way, and accepts no other
// line except one whose data (covered by the checksum) is not JSON, which
// callers of Scan find when they decode it.
func FuzzDecodeLineView(f *testing.F) {
	raw := validJournal(f)
	for _, line := range bytes.Split(raw, []byte("\n")) {
		f.Add(line)
	}
	f.Add(relined(`{"seq":3,"ts":"2026-11-22T00:37:34.123456789Z","type":"run.text","id":"a\"b","data":{"text":"x"}`))
	f.Add(relined(`{"seq":3,"ts":"2026-11-22T00:37:34.123456789Z","type":"run.text","run":"r","epoch":0,"data":null`))
	f.Add(relined(`{"seq":03,"ts":"2026-11-22T00:37:34.123456789Z","type":"t","data":1,"x":2`))
	f.Fuzz(func(t *testing.T, line []byte) {
		slow, serr := decodeLine(line)
		fast, ferr := decodeLineView(line)
		if serr == nil && ferr != nil {
			t.Fatalf("decodeLineView refuses a line decodeLine accepts: %v", ferr)
		}
		if ferr != nil {
			if !errors.Is(ferr, ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", ferr)
			}
			return
		}
		if fast.Data != nil && !json.Valid(fast.Data) {
			return // checksummed but not JSON: the caller's decode finds it
		}
		if serr != nil {
			t.Fatalf("decodeLineView accepts a line decodeLine refuses (%v): %+v", serr, fast)
		}
		if slow.Seq != fast.Seq || !slow.TS.Equal(fast.TS) || slow.Type != fast.Type || slow.ID != fast.ID ||
			slow.Run != fast.Run || slow.Epoch != fast.Epoch || !bytes.Equal(compact(slow.Data), compact(fast.Data)) {
			t.Fatalf("decoders disagree:\nslow %+v\nfast %+v", slow, fast)
		}
	})
}

// relined returns body with a valid checksum trailer.
func relined(body string) []byte {
	return []byte(body + `,"crc":"` + string(appendHex32(nil, crc32.Checksum([]byte(body), castagnoli))) + `"}`)
}

func compact(b []byte) []byte {
	var out bytes.Buffer
	if json.Compact(&out, b) != nil {
		return b
	}
	return out.Bytes()
}
