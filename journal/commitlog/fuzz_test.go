package commitlog

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzScanSegment feeds arbitrary bytes to the segment scanner: it never
// panics, never hands on a record that does not lie inside the input,
// and a clean scan of a log it wrote gives back what was written.
func FuzzScanSegment(f *testing.F) {
	seal := func(recs ...func([]byte) []byte) []byte {
		b := make([]byte, headerSize)
		for _, r := range recs {
			b = r(b)
		}
		return sealBatch(b, 7, len(recs))
	}
	one := seal(func(b []byte) []byte { return appendWrite(b, "ses_a", 0, []byte("line\n")) })
	two := seal(
		func(b []byte) []byte { return appendWrite(b, "ses_a", 5, []byte("more\n")) },
		func(b []byte) []byte { return appendCut(b, "ses_a", 5) },
	)
	f.Add(append(append([]byte{}, one...), two...))
	f.Add(one[:100])
	f.Add(append(make([]byte, blockSize), one...))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, seg []byte) {
		var n int
		res, err := scanSegment(bytes.NewReader(seg), "seg", 7, int64(len(seg)), func(r record) error {
			n++
			if r.name == "" || len(r.name) > maxName || r.off < 0 {
				t.Fatalf("bad record %+v", r)
			}
			if r.kind != kindWrite && r.kind != kindCut && r.kind != kindDrop {
				t.Fatalf("bad kind %d", r.kind)
			}
			return nil
		})
		var de *DamageError
		if err != nil && !errors.As(err, &de) {
			t.Fatalf("scan of bytes in memory failed with %v", err)
		}
		if res.end < 0 || res.end > int64(len(seg))+blockSize || res.records != n && err == nil {
			t.Fatalf("bad result %+v (%d records seen)", res, n)
		}
	})
}

// TestScanRoundTrip: what a log writes, a scan reads back in order.
func TestScanRoundTrip(t *testing.T) {
	var seg []byte
	for i := range 5 {
		b := appendWrite(make([]byte, headerSize), "ses_x", int64(i*3), []byte{'a' + byte(i), 'b', '\n'})
		b = appendCut(b, "ses_y", int64(i))
		seg = append(seg, sealBatch(b, 3, 2)...)
	}
	seg = append(seg, make([]byte, 3*blockSize)...)
	var got []record
	res, err := scanSegment(bytes.NewReader(seg), "seg", 3, int64(len(seg)), func(r record) error {
		r.data = append([]byte(nil), r.data...)
		got = append(got, r)
		return nil
	})
	if err != nil || res.batches != 5 || len(got) != 10 || res.torn != "" {
		t.Fatalf("scan: %v %+v %d", err, res, len(got))
	}
	for i := range 5 {
		w, c := got[2*i], got[2*i+1]
		if w.kind != kindWrite || w.name != "ses_x" || w.off != int64(i*3) || string(w.data) != string([]byte{'a' + byte(i), 'b', '\n'}) {
			t.Fatalf("record %d: %+v", 2*i, w)
		}
		if c.kind != kindCut || c.name != "ses_y" || c.off != int64(i) {
			t.Fatalf("record %d: %+v", 2*i+1, c)
		}
	}
	// The same bytes under another segment's number are not valid.
	if _, err := scanSegment(bytes.NewReader(seg), "seg", 4, int64(len(seg)), func(record) error {
		t.Fatal("a batch of segment 3 validated as segment 4")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
