package commitlog

import (
	"errors"
	"fmt"
	"io"

	"github.com/belayhq/belay"
)

// DamageError reports a batch that does not validate with a valid batch
// after it: bytes that were acknowledged are damaged, so the log cannot be
// trusted to hold what the journals may lack.
type DamageError struct {
	Path   string
	Offset int64
	Reason string
}

func (e *DamageError) Error() string {
	return fmt.Sprintf("commit log %s: damaged batch at byte %d (%s) with valid batches after it", e.Path, e.Offset, e.Reason)
}

// Unwrap makes a DamageError match belay.ErrCorruptRecord.
func (e *DamageError) Unwrap() error { return belay.ErrCorruptRecord }

// scanResult is what scanning a segment found.
type scanResult struct {
	end     int64  // where the valid batches end (the next batch goes here)
	torn    string // why the batch at end is not valid, if it is a torn tail
	batches int
	records int
}

// scanSegment reads the batches of segment seg from r (size bytes) and
// calls fn for each record, in order, a batch at a time: a batch's records
// are all decoded before the first is passed on, so a damaged batch passes
// none. The first batch that is not valid ends the scan: if a valid batch
// follows it, the log is damaged (*DamageError); otherwise it is the torn
// end of the last write, which was never acknowledged.
func scanSegment(r io.ReaderAt, path string, seg uint64, size int64, fn func(record) error) (scanResult, error) {
	var res scanResult
	var h [headerSize]byte
	var body []byte
	var recs []record
	off := int64(0)
	for off < size {
		n := min(int64(headerSize), size-off)
		if _, err := r.ReadAt(h[:n], off); err != nil && !errors.Is(err, io.EOF) {
			return res, fmt.Errorf("commit log: read %s: %w", path, err)
		}
		bodyLen, count, err := header(seg, h[:n])
		if errors.Is(err, errEnd) {
			return res, checkRest(r, path, seg, off, size, "")
		}
		if err == nil && off+headerSize+int64(bodyLen) > size {
			err = errors.New("batch runs past the end of the segment")
		}
		if err == nil {
			if cap(body) < bodyLen {
				body = make([]byte, bodyLen)
			}
			body = body[:bodyLen]
			if _, rerr := r.ReadAt(body, off+headerSize); rerr != nil && !errors.Is(rerr, io.EOF) {
				return res, fmt.Errorf("commit log: read %s: %w", path, rerr)
			}
			recs = recs[:0]
			err = decodeBody(seg, h[:], body, count, func(rec record) error {
				recs = append(recs, rec)
				return nil
			})
		}
		if err != nil {
			res.end, res.torn = off, err.Error()
			return res, checkRest(r, path, seg, off, size, err.Error())
		}
		for _, rec := range recs {
			if err := fn(rec); err != nil {
				return res, err
			}
		}
		res.batches++
		res.records += len(recs)
		off += int64(padded(headerSize + bodyLen))
		res.end = off
	}
	res.end = off
	return res, nil
}

// checkRest fails with a *DamageError if a valid batch starts at any block
// after off: the batch at off (invalid for why, or a header of zeros) was
// then followed by acknowledged writes.
func checkRest(r io.ReaderAt, path string, seg uint64, off, size int64, why string) error {
	// Read a chunk at a time: the rest of a preallocated or reused
	// segment is most of it.
	const chunk = 1 << 20
	buf := make([]byte, chunk)
	for base := off + blockSize; base+headerSize <= size; base += chunk {
		n := min(int64(chunk), size-base)
		if _, err := r.ReadAt(buf[:n], base); err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("commit log: read %s: %w", path, err)
		}
		for i := int64(0); i+headerSize <= n; i += blockSize {
			o := base + i
			bodyLen, count, err := header(seg, buf[i:i+headerSize])
			if err != nil || o+headerSize+int64(bodyLen) > size {
				continue
			}
			body := make([]byte, bodyLen)
			if _, err := r.ReadAt(body, o+headerSize); err != nil && !errors.Is(err, io.EOF) {
				return fmt.Errorf("commit log: read %s: %w", path, err)
			}
			if decodeBody(seg, buf[i:i+headerSize], body, count, func(record) error { return nil }) == nil {
				if why == "" {
					why = "zeroed header"
				}
				return &DamageError{Path: path, Offset: off, Reason: why}
			}
		}
	}
	return nil
}
