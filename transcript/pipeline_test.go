package transcript

import (
	"bytes"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

type splitLine struct {
	line      string
	off, fend int64
	tooLong   bool
}

func (l splitLine) String() string {
	return fmt.Sprintf("%d-%d long=%v %.20q", l.off, l.fend, l.tooLong, l.line)
}

// openRepair opens path for a streamRepair that reads it (closed when
// the test ends).
func openRepair(t *testing.T, path string) *streamRepair {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	fi, err := f.Stat()
	require.NoError(t, err)
	return &streamRepair{f: f, size: fi.Size(), seed: maphash.MakeSeed()}
}

// pipelineLines returns the lines eachChunk hands to its consumer, and
// checks that the work function saw the same ones.
func pipelineLines(t *testing.T, path string) []splitLine {
	t.Helper()
	s := openRepair(t, path)
	var mu sync.Mutex
	worked := 0
	var got []splitLine
	err := s.eachChunk(func(c *lineChunk) {
		mu.Lock()
		worked += len(c.recs)
		mu.Unlock()
	}, func(c *lineChunk) error {
		require.Equal(t, len(got), c.first)
		for i, rec := range c.recs {
			got = append(got, splitLine{string(c.line(i)), rec.off, rec.fend, rec.tooLong})
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, len(got), worked)
	return got
}

// scannerLines returns the lines of the sequential lineScanner.
func scannerLines(t *testing.T, path string) []splitLine {
	t.Helper()
	ls := openRepair(t, path).lines()
	var out []splitLine
	for {
		line, off, end, tooLong, err := ls.next()
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err)
		out = append(out, splitLine{string(line), off, end, tooLong})
	}
}

// TestChunkReaderMatchesScanner holds the parallel pipeline's line split
// (whole chunks read from the file, lines split by the workers) to the
// sequential line scanner on random files: lines of every length from
// empty to well past the longest line held (which are handed on as too
// long, with their outlines, not their bytes), across chunk boundaries,
// with LF, CRLF and no terminator at the end.
func TestChunkReaderMatchesScanner(t *testing.T) {
	defer func(m int) { maxLineSize = m }(maxLineSize)
	maxLineSize = 3 * chunkBytes / 2
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(3, 4))
	for round := range 24 {
		var b bytes.Buffer
		for b.Len() < 3*chunkBytes+r.IntN(3*chunkBytes) {
			n := r.IntN(200)
			switch r.IntN(12) {
			case 0:
				n = 0
			case 1:
				n = chunkBytes - 2 + r.IntN(4)
			case 2:
				n = maxLineSize - 2 + r.IntN(4)
			case 3:
				n = maxLineSize + r.IntN(3*chunkBytes)
			}
			if n >= 8 && r.IntN(2) == 0 {
				// A JSON line, whose outline a long one is handed on as.
				b.WriteString(`{"a":"`)
				b.Write(bytes.Repeat([]byte{'a' + byte(round%26)}, n-8))
				b.WriteString(`"}`)
			} else {
				b.Write(bytes.Repeat([]byte{'a' + byte(round%26)}, n))
			}
			switch r.IntN(5) {
			case 0:
				b.WriteString("\r\n")
			case 1:
				b.WriteString("\r")
			default:
				b.WriteString("\n")
			}
		}
		data := b.Bytes()
		if round%3 == 1 {
			data = data[:len(data)-1-r.IntN(min(len(data)-1, 50))] // no terminator at the end
		}
		path := filepath.Join(dir, fmt.Sprintf("f%d", round))
		require.NoError(t, os.WriteFile(path, data, 0o600))
		want, got := scannerLines(t, path), pipelineLines(t, path)
		require.Equal(t, len(want), len(got), "round %d", round)
		for i := range want {
			require.Equal(t, want[i].String(), got[i].String(), "round %d line %d", round, i)
			require.Equal(t, want[i], got[i], "round %d line %d", round, i)
		}
	}
}

// TestChunkReaderEmpty: an empty file has no lines, a lone newline one.
func TestChunkReaderEmpty(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		data string
		want int
	}{{"", 0}, {"\n", 1}, {"x", 1}, {"\n\n", 2}} {
		path := filepath.Join(dir, "f")
		require.NoError(t, os.WriteFile(path, []byte(c.data), 0o600))
		require.Len(t, pipelineLines(t, path), c.want, "%q", c.data)
		require.Equal(t, scannerLines(t, path), pipelineLines(t, path), "%q", c.data)
	}
}

// TestChunkReaderFileShrank: a file cut shorter while it is read is an
// error that says so, not a short read taken for the end.
func TestChunkReaderFileShrank(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(path, bytes.Repeat([]byte("line\n"), 1000), 0o600))
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	s := &streamRepair{f: f, size: 5000 + 3*chunkBytes} // as it was when the repair began
	err = s.eachChunk(func(*lineChunk) {}, func(*lineChunk) error { return nil })
	require.ErrorContains(t, err, "is shorter than the")
	require.ErrorContains(t, err, "nothing was written")
}
