package lock

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// recordSlot is the size every record is padded to, so that an in-place
// heartbeat is one write of the same length at offset 0 and never leaves a
// longer record's tail behind.
const recordSlot = 1024

// tornRetries bounds how often a reader re-reads a record that does not
// decode: a heartbeat rewriting it in place may be mid-write.
const tornRetries = 3

// padRecord returns o's encoding padded with spaces to recordSlot bytes
// (or left as is when longer), ending in a newline.
func padRecord(o Owner) ([]byte, error) {
	data, err := o.Encode()
	if err != nil {
		return nil, err
	}
	if len(data) >= recordSlot {
		return data, nil
	}
	out := make([]byte, recordSlot)
	n := copy(out, data[:len(data)-1])
	for i := n; i < recordSlot-1; i++ {
		out[i] = ' '
	}
	out[recordSlot-1] = '\n'
	return out, nil
}

// writeRecord overwrites the record in the open lock file f in place and
// fdatasyncs it. It opens nothing, so it works when the process is out of
// file descriptors.
func writeRecord(f *os.File, o Owner) error {
	data, err := padRecord(o)
	if err != nil {
		return err
	}
	n, err := f.WriteAt(data, 0)
	if err == nil && n != len(data) {
		err = fmt.Errorf("short write (%d of %d bytes)", n, len(data))
	}
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() > int64(len(data)) {
		if err := f.Truncate(int64(len(data))); err != nil {
			return err
		}
	}
	return f.Sync()
}

// readRecordBytes reads the record bytes of the open lock file f without
// moving its offset. A record that does not decode is re-read a few times
// in case an in-place heartbeat was mid-write; the last bytes read are
// returned either way.
func readRecordBytes(f *os.File) ([]byte, error) {
	buf := make([]byte, maxRecordSize)
	var data []byte
	for try := 0; ; try++ {
		n, err := f.ReadAt(buf, 0)
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		data = buf[:n]
		if n == 0 || try == tornRetries {
			return data, nil
		}
		if _, err := DecodeOwner(data); err == nil {
			return data, nil
		}
		time.Sleep(time.Millisecond)
	}
}

// readRecord reads and decodes the record of the open lock file f.
func readRecord(f *os.File) (Owner, error) {
	data, err := readRecordBytes(f)
	if err != nil {
		return Owner{}, err
	}
	return DecodeOwner(data)
}
