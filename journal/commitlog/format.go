package commitlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Segment layout. A segment is a sequence of batches, each starting at a
// multiple of blockSize (a sector) and padded to the next one, followed
// by zeros up to the segment's preallocated size, or by the stale bytes of
// the retired segment whose file it reuses:
//
//	header (16 bytes, little-endian):
//	  [0:4]   CRC-32C of bytes [4:16] and of the segment's number (8 bytes)
//	  [4:8]   body length in bytes
//	  [8:12]  CRC-32C of the body and of the segment's number
//	  [12:16] record count
//	body: records, one after another:
//	  kind      1 byte: 1 write, 2 cut, 3 drop
//	  name len  1 byte, then the name (a journal's name, 1-255 bytes)
//	  offset    8 bytes: where the data was written (write), the size the
//	            file was cut to (cut), 0 (drop: the journal was deleted;
//	            the records of the name before it are not replayed)
//	  data len  4 bytes, then the data (write only)
//
// A header of zeros ends the segment. Both checksums cover the segment's
// number, so a batch copied into another segment, or left in a reused
// file by the segment it held before, never validates.
const (
	headerSize = 16
	blockSize  = 512

	kindWrite = 1
	kindCut   = 2
	kindDrop  = 3

	maxName = 255
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var zeroBlock [blockSize]byte

// record is one decoded record.
type record struct {
	kind byte
	name string
	off  int64
	data []byte
}

// recordSize is how many body bytes a record takes.
func recordSize(name string, dataLen int) int {
	n := 1 + 1 + len(name) + 8
	if dataLen >= 0 {
		n += 4 + dataLen
	}
	return n
}

func appendWrite(b []byte, name string, off int64, data []byte) []byte {
	b = append(b, kindWrite, byte(len(name)))
	b = append(b, name...)
	b = binary.LittleEndian.AppendUint64(b, uint64(off))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(data)))
	return append(b, data...)
}

func appendDrop(b []byte, name string) []byte {
	b = append(b, kindDrop, byte(len(name)))
	b = append(b, name...)
	return binary.LittleEndian.AppendUint64(b, 0)
}

func appendCut(b []byte, name string, size int64) []byte {
	b = append(b, kindCut, byte(len(name)))
	b = append(b, name...)
	return binary.LittleEndian.AppendUint64(b, uint64(size))
}

// sealBatch fills in the header of a batch whose body follows it in b
// (b[:headerSize] reserved) and pads b to a whole block.
func sealBatch(b []byte, seg uint64, count int) []byte {
	body := b[headerSize:]
	binary.LittleEndian.PutUint32(b[4:8], uint32(len(body)))
	binary.LittleEndian.PutUint32(b[8:12], segSum(seg, body))
	binary.LittleEndian.PutUint32(b[12:16], uint32(count))
	binary.LittleEndian.PutUint32(b[0:4], segSum(seg, b[4:16]))
	if r := len(b) % blockSize; r != 0 {
		b = append(b, zeroBlock[:blockSize-r]...)
	}
	return b
}

func segSum(seg uint64, p []byte) uint32 {
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], seg)
	return crc32.Update(crc32.Checksum(n[:], castagnoli), castagnoli, p)
}

var errEnd = errors.New("end of segment")

// header reads the batch header at the start of p: the body length and
// record count, errEnd for a header of zeros, or an error saying why the
// header is not valid.
func header(seg uint64, p []byte) (bodyLen int, count int, err error) {
	if len(p) < headerSize {
		if allZero(p) {
			return 0, 0, errEnd
		}
		return 0, 0, errors.New("short header")
	}
	h := p[:headerSize]
	if allZero(h) {
		return 0, 0, errEnd
	}
	if binary.LittleEndian.Uint32(h[0:4]) != segSum(seg, h[4:16]) {
		return 0, 0, errors.New("header checksum mismatch")
	}
	return int(binary.LittleEndian.Uint32(h[4:8])), int(binary.LittleEndian.Uint32(h[12:16])), nil
}

// decodeBody checks a batch body against its header and calls fn for each
// record. The records' data alias body.
func decodeBody(seg uint64, h, body []byte, count int, fn func(record) error) error {
	if binary.LittleEndian.Uint32(h[8:12]) != segSum(seg, body) {
		return errors.New("body checksum mismatch")
	}
	p := body
	for i := 0; i < count; i++ {
		var r record
		if len(p) < 2 {
			return fmt.Errorf("record %d: truncated", i)
		}
		r.kind = p[0]
		nl := int(p[1])
		p = p[2:]
		if r.kind != kindWrite && r.kind != kindCut && r.kind != kindDrop {
			return fmt.Errorf("record %d: unknown kind %d", i, r.kind)
		}
		if nl == 0 || len(p) < nl+8 {
			return fmt.Errorf("record %d: truncated", i)
		}
		r.name = string(p[:nl])
		r.off = int64(binary.LittleEndian.Uint64(p[nl : nl+8]))
		p = p[nl+8:]
		if r.off < 0 {
			return fmt.Errorf("record %d: negative offset", i)
		}
		if r.kind == kindWrite {
			if len(p) < 4 {
				return fmt.Errorf("record %d: truncated", i)
			}
			dl := int(binary.LittleEndian.Uint32(p[:4]))
			p = p[4:]
			if dl > len(p) {
				return fmt.Errorf("record %d: data runs past the batch", i)
			}
			r.data = p[:dl]
			p = p[dl:]
		}
		if err := fn(r); err != nil {
			return err
		}
	}
	if len(p) != 0 {
		return fmt.Errorf("%d bytes after the last record", len(p))
	}
	return nil
}

func allZero(p []byte) bool {
	for _, c := range p {
		if c != 0 {
			return false
		}
	}
	return true
}

// padded rounds n up to a whole block.
func padded(n int) int { return (n + blockSize - 1) / blockSize * blockSize }
