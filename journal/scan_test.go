package journal

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestScanMatchesRead(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Now: fixedClock()})
	evs := []Event{
		ev("run.text", `{"text":"a\nb <c> \u0026"}`),
		{Type: "run.updated", ID: `key "quoted"`, Run: "run_x", Epoch: 7, Data: json.RawMessage(`{"phase":"streaming"}`)},
		{Type: "note", ID: "ключ", Data: nil},
		{Type: "run.text", Run: "run_x", Epoch: 1, Data: json.RawMessage(`{"text":"` + string(bytes.Repeat([]byte("x"), 200<<10)) + `"}`)},
	}
	_, err := b.j.Append(context.Background(), Sync, evs...)
	require.NoError(t, err)
	want := readAll(t, b.j)
	for after := uint64(0); after <= uint64(len(want)); after++ {
		var got []Event
		require.NoError(t, b.j.Scan(after, func(e Event) bool {
			e.Data = append(json.RawMessage(nil), e.Data...) // valid only during the call
			got = append(got, e)
			return true
		}))
		require.Len(t, got, len(want)-int(after))
		for i, e := range got {
			w := want[int(after)+i]
			require.Equal(t, w.Seq, e.Seq)
			require.True(t, w.TS.Equal(e.TS))
			require.Equal(t, w.Type, e.Type)
			require.Equal(t, w.ID, e.ID)
			require.Equal(t, w.Run, e.Run)
			require.Equal(t, w.Epoch, e.Epoch)
			require.Equal(t, string(w.Data), string(e.Data))
		}
	}
	n := 0
	require.NoError(t, b.j.Scan(0, func(Event) bool { n++; return n < 2 }))
	require.Equal(t, 2, n, "Scan stops when fn returns false")
}

func TestScanFailsAtDamage(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Now: fixedClock()})
	appendN(t, b.j, 5)
	require.NoError(t, b.j.Close())
	path := filepath.Join(b.dir, FileName)
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	lines := bytes.SplitAfter(raw, []byte("\n"))
	lines[2] = bytes.Replace(lines[2], []byte(`"i":2`), []byte(`"i":9`), 1)
	require.NoError(t, os.WriteFile(path, bytes.Join(lines, nil), 0o600))
	j, err := Open(b.dir, Options{})
	var q *QuarantineError
	require.ErrorAs(t, err, &q)
	t.Cleanup(func() { _ = j.Close() })
	var seqs []uint64
	err = j.Scan(0, func(e Event) bool { seqs = append(seqs, e.Seq); return true })
	require.True(t, errors.As(err, &q), "a scan across damage fails: %v", err)
	require.Equal(t, []uint64{1, 2}, seqs)
}
