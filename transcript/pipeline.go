package transcript

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
)

// lineChunk is a run of whole lines of a file, copied out of the reader.
type lineChunk struct {
	first int // index of its first line
	data  []byte
	recs  []lineRec
	// Filled by the work function, read by the consumer.
	scan   []scanLine
	light  lightLine
	parts  []lightPart
	partAt [][2]int32 // per line: its parts, parts[from:to]
	done   chan struct{}
}

// lineRec is one line of a chunk: its bytes data[start:end] (terminator
// excluded) and its span in the file, terminator included.
type lineRec struct {
	start, end int
	off, fend  int64
	tooLong    bool
}

func (c *lineChunk) line(i int) []byte { return c.data[c.recs[i].start:c.recs[i].end] }

// chunkBytes is the size of the chunks the pipeline hands out.
const chunkBytes = 256 << 10

// eachChunk reads the file's lines in chunks, runs work on the chunks in
// parallel (one goroutine per CPU) and consume on each in file order. The
// chunks in flight are bounded, so memory does not grow with the file.
// It returns when every goroutine it started has ended.
func (s *streamRepair) eachChunk(work func(*lineChunk), consume func(*lineChunk) error) error {
	workers := max(1, runtime.GOMAXPROCS(0))
	free := make(chan *lineChunk, 2*workers+2)
	for range cap(free) {
		free <- &lineChunk{}
	}
	todo := make(chan *lineChunk, cap(free))
	order := make(chan *lineChunk, cap(free))
	stop := make(chan struct{})
	var readErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // reader
		defer wg.Done()
		defer close(todo)
		defer close(order)
		ls := s.lines()
		idx := 0
		for done := false; !done; {
			var c *lineChunk
			select {
			case c = <-free:
			case <-stop:
				return
			}
			c.first, c.data, c.recs = idx, c.data[:0], c.recs[:0]
			c.done = make(chan struct{})
			for len(c.data) < chunkBytes {
				line, off, end, tooLong, err := ls.next()
				if errors.Is(err, io.EOF) {
					done = true
					break
				}
				if err != nil {
					readErr, done = fmt.Errorf("transcript: %w", err), true
					break
				}
				start := len(c.data)
				c.data = append(c.data, line...)
				c.recs = append(c.recs, lineRec{start: start, end: len(c.data), off: off, fend: end, tooLong: tooLong})
				idx++
			}
			todo <- c
			order <- c
		}
	}()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range todo {
				work(c)
				close(c.done)
			}
		}()
	}
	var err error
	for c := range order {
		<-c.done
		if err == nil {
			err = consume(c)
			if err != nil {
				close(stop)
			}
		}
		free <- c
	}
	wg.Wait()
	if err != nil {
		return err
	}
	return readErr
}

// sequentialLines is a lineScanner over the whole file.
func (s *streamRepair) lines() *lineScanner {
	return &lineScanner{r: bufio.NewReaderSize(io.NewSectionReader(s.f, 0, s.size), int(min(1<<20, max(4096, s.size))))}
}
