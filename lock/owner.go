package lock

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"
	"unicode/utf8"
)

// Version is the owner record format version this package writes.
const Version = 1

// maxRecordSize caps how much of a lock file is read before decoding.
const maxRecordSize = 64 << 10

// Owner is an owner record: who holds a lock, and until when.
type Owner struct {
	Host string `json:"host"` // hostname of the holder
	PID  int    `json:"pid"`  // process id of the holder on Host
	// StartTime is the holder process's start-time token (internal/proc),
	// empty when the platform cannot tell.
	StartTime string `json:"startTime,omitempty"`
	// Nonce is random per acquisition: the identity of this hold.
	Nonce string `json:"nonce"`
	// Incarnation is the holder process incarnation id, chosen by the
	// caller (Options.Incarnation) or random per process.
	Incarnation string `json:"incarnation,omitempty"`
	// Purpose says what the holder uses the lock for ("daemon"); optional.
	Purpose string `json:"purpose,omitempty"`

	AcquiredAt  time.Time `json:"acquiredAt"`
	HeartbeatAt time.Time `json:"heartbeatAt"`
	ExpiresAt   time.Time `json:"expiresAt"`
}

// ownerJSON is the on-disk form of Owner.
type ownerJSON struct {
	Version     int       `json:"version"`
	Host        string    `json:"host"`
	PID         int       `json:"pid"`
	StartTime   string    `json:"startTime,omitempty"`
	Nonce       string    `json:"nonce"`
	Incarnation string    `json:"incarnation,omitempty"`
	Purpose     string    `json:"purpose,omitempty"`
	AcquiredAt  time.Time `json:"acquiredAt"`
	HeartbeatAt time.Time `json:"heartbeatAt"`
	ExpiresAt   time.Time `json:"expiresAt"`
}

// Encode returns the on-disk JSON form of o, newline-terminated, with times
// in UTC. It refuses records that [DecodeOwner] would not return unchanged.
func (o Owner) Encode() ([]byte, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(ownerJSON{
		Version:     Version,
		Host:        o.Host,
		PID:         o.PID,
		StartTime:   o.StartTime,
		Nonce:       o.Nonce,
		Incarnation: o.Incarnation,
		Purpose:     o.Purpose,
		AcquiredAt:  o.AcquiredAt.UTC(),
		HeartbeatAt: o.HeartbeatAt.UTC(),
		ExpiresAt:   o.ExpiresAt.UTC(),
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if len(b) >= maxRecordSize {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrMalformed, len(b), maxRecordSize)
	}
	return append(b, '\n'), nil
}

// DecodeOwner parses an owner record. Any failure wraps [ErrMalformed].
// Unknown fields are ignored (see the format note in the package doc).
func DecodeOwner(data []byte) (Owner, error) {
	if len(data) >= maxRecordSize {
		return Owner{}, fmt.Errorf("%w: %d bytes, limit %d", ErrMalformed, len(data), maxRecordSize)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return Owner{}, fmt.Errorf("%w: empty", ErrMalformed)
	}
	var j ownerJSON
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&j); err != nil {
		return Owner{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if dec.More() {
		return Owner{}, fmt.Errorf("%w: trailing data", ErrMalformed)
	}
	if j.Version < 1 {
		return Owner{}, fmt.Errorf("%w: version %d", ErrMalformed, j.Version)
	}
	o := Owner{
		Host:        j.Host,
		PID:         j.PID,
		StartTime:   j.StartTime,
		Nonce:       j.Nonce,
		Incarnation: j.Incarnation,
		Purpose:     j.Purpose,
		AcquiredAt:  j.AcquiredAt,
		HeartbeatAt: j.HeartbeatAt,
		ExpiresAt:   j.ExpiresAt,
	}
	if err := o.validate(); err != nil {
		return Owner{}, err
	}
	return o, nil
}

// validate checks what every record must have: enough to name and judge
// the holder, and strings that survive JSON unchanged.
func (o Owner) validate() error {
	switch {
	case o.Host == "":
		return fmt.Errorf("%w: no host", ErrMalformed)
	case o.PID <= 0:
		return fmt.Errorf("%w: pid %d", ErrMalformed, o.PID)
	case o.Nonce == "":
		return fmt.Errorf("%w: no nonce", ErrMalformed)
	case o.ExpiresAt.IsZero():
		return fmt.Errorf("%w: no expiresAt", ErrMalformed)
	}
	for _, t := range []time.Time{o.AcquiredAt, o.HeartbeatAt, o.ExpiresAt} {
		if y := t.UTC().Year(); y < 0 || y > 9999 {
			return fmt.Errorf("%w: time %s out of range", ErrMalformed, t)
		}
	}
	for _, s := range []string{o.Host, o.StartTime, o.Nonce, o.Incarnation, o.Purpose} {
		if !utf8.ValidString(s) {
			return fmt.Errorf("%w: invalid UTF-8 %q", ErrMalformed, s)
		}
	}
	return nil
}

// newNonce returns 16 random bytes in hex.
func newNonce() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// processIncarnation is the default incarnation id: random, once per
// process.
var processIncarnation = sync.OnceValue(func() string { return "inc_" + newNonce() })

// hostname is this host's name as recorded in owner records.
var hostname = sync.OnceValue(func() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "unknown-host"
	}
	return h
})
