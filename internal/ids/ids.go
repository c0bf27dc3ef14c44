// Package ids makes and checks belay's identifiers: a prefix such as "ses_"
// or "run_" followed by 26 characters of lowercase Crockford base32 that
// encode a 48-bit millisecond timestamp and 80 random bits, so ids sort by
// creation time. The grammar is strict: anything else is rejected before it
// can reach a file path.
package ids

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Prefixes of the kinds of id belay makes.
const (
	Session  = "ses_"
	Run      = "run_"
	Delivery = "dlv_"
	Lease    = "lse_"
)

// BodyLen is the length of an id after its prefix.
const BodyLen = 26

// ErrInvalid is returned for an id that does not follow the grammar.
var ErrInvalid = errors.New("ids: invalid id")

const alphabet = "0123456789abcdefghjkmnpqrstvwxyz"

var decodeTab = func() (t [256]int8) {
	for i := range t {
		t[i] = -1
	}
	for i := 0; i < len(alphabet); i++ {
		t[alphabet[i]] = int8(i)
	}
	return t
}()

// Generator makes ids that are strictly increasing within one process, even
// within one millisecond.
type Generator struct {
	mu     sync.Mutex
	lastMS uint64
	last   [10]byte // random part of the last id
	now    func() time.Time
}

// NewGenerator returns a Generator reading time from now (time.Now if nil).
func NewGenerator(now func() time.Time) *Generator {
	if now == nil {
		now = time.Now
	}
	return &Generator{now: now}
}

var std = NewGenerator(nil)

// New returns a new id with the given prefix from the process generator.
func New(prefix string) string { return std.New(prefix) }

// New returns a new id with the given prefix.
func (g *Generator) New(prefix string) string {
	g.mu.Lock()
	ms := uint64(g.now().UnixMilli())
	if ms <= g.lastMS {
		ms = g.lastMS
		// Same (or earlier) millisecond: increment the random part so the
		// new id still sorts after the last one.
		for i := len(g.last) - 1; i >= 0; i-- {
			g.last[i]++
			if g.last[i] != 0 {
				break
			}
		}
	} else {
		_, _ = rand.Read(g.last[:])
		g.last[0] &= 0x7f // leave room to increment without overflow
	}
	g.lastMS = ms
	var raw [16]byte
	binary.BigEndian.PutUint64(raw[:8], ms<<16)
	copy(raw[6:], g.last[:])
	g.mu.Unlock()
	return prefix + encode(raw)
}

// encode writes 128 bits as 26 base32 characters (the first holds 3 bits).
func encode(raw [16]byte) string {
	hi := binary.BigEndian.Uint64(raw[:8])
	lo := binary.BigEndian.Uint64(raw[8:])
	var out [BodyLen]byte
	for i := BodyLen - 1; i >= 0; i-- {
		out[i] = alphabet[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
}

// Check reports whether id is prefix followed by a valid 26-character body.
func Check(prefix, id string) error {
	if len(id) != len(prefix)+BodyLen || id[:len(prefix)] != prefix {
		return fmt.Errorf("%w: %q is not %s followed by %d base32 characters", ErrInvalid, truncate(id), prefix, BodyLen)
	}
	body := id[len(prefix):]
	if body[0] > '7' {
		return fmt.Errorf("%w: %q overflows 128 bits", ErrInvalid, id)
	}
	for i := 0; i < len(body); i++ {
		if decodeTab[body[i]] < 0 {
			return fmt.Errorf("%w: %q has %q at position %d", ErrInvalid, truncate(id), body[i], len(prefix)+i)
		}
	}
	return nil
}

// Time returns the creation time encoded in a valid id.
func Time(prefix, id string) (time.Time, error) {
	if err := Check(prefix, id); err != nil {
		return time.Time{}, err
	}
	var ms uint64
	for _, c := range []byte(id[len(prefix) : len(prefix)+10]) {
		ms = ms<<5 | uint64(decodeTab[c])
	}
	return time.UnixMilli(int64(ms)).UTC(), nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
