package fsstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/belayhq/belay"
)

// doneRuns holds a session's finished runs where the garbage collector
// does not look. A finished run takes no more changes (state.run refuses
// them), so it is kept as the JSON a snapshot writes of it, in one byte
// buffer, with a pointer-free entry per run for what is asked of every run
// without reading it: its id, status and times. A session's history of
// runs then costs the collector nothing to mark, where a *belay.Run per
// run, with its strings, times and maps, cost it a walk of each at every
// cycle; and the memory is about half.
//
// Runs are never removed from a session one by one (retention removes
// whole sessions), so the buffers only grow: in chunks, so that growing
// never copies what is kept (one growing slice allocated about four times
// its final size as it grew, most of it garbage at once).
type doneRuns struct {
	chunks [][]byte    // the runs' JSON, in the order they finished; each run's within one chunk
	ents   []doneEntry // one per run, in InputSeq (creation) order
	// byHash finds a run's entry by the hash of its id: the value is the
	// run's InputSeq. clash holds the ids whose hash an earlier id took
	// (never seen in practice; checked first, so lookups stay exact).
	byHash map[uint64]uint64
	clash  map[string]uint64
	failed int // runs that failed or were stranded, for retention
	// session is the Session of the first run kept; others, by InputSeq,
	// that of any run with another (a session directory renamed or copied
	// keeps its runs' own), so that a key is exact.
	session string
	others  map[uint64]string
}

// doneEntry is a finished run's pointer-free summary. Its id is in its
// JSON, which starts {"id":"<id>".
type doneEntry struct {
	seq              uint64 // InputSeq
	created, updated int64  // unix nanos
	chunk, off, n    uint32 // its JSON: chunks[chunk][off:off+n]
	idLen            uint8
	status           uint8 // index in doneStatuses
}

// doneChunkMax bounds the chunks of a session's finished runs: a new
// chunk is as large as what the session keeps already, up to it, so that
// a session holds at most about twice what its runs take (a session of
// one run exactly its size); a run larger than that has a chunk of its own
// size.
const doneChunkMax = 64 << 10

// room returns the chunk that takes n more bytes: the last one if it has
// room, else a new one.
func (d *doneRuns) room(n int) int {
	k := len(d.chunks)
	if k > 0 && cap(d.chunks[k-1])-len(d.chunks[k-1]) >= n {
		return k - 1
	}
	kept := 0
	for i := k - 1; i >= 0 && kept < doneChunkMax; i-- {
		kept += len(d.chunks[i])
	}
	d.chunks = append(d.chunks, make([]byte, 0, max(min(kept, doneChunkMax), n)))
	return k
}

// doneWriter places what one Write gives (an encoder's whole value) in a
// chunk with room for it.
type doneWriter struct {
	d          *doneRuns
	chunk, off int
}

func (w *doneWriter) Write(p []byte) (int, error) {
	n := len(p)
	p = bytes.TrimSuffix(p, []byte{'\n'}) // an encoder's newline
	w.chunk = w.d.room(len(p))
	c := &w.d.chunks[w.chunk]
	w.off = len(*c)
	*c = append(*c, p...)
	return n, nil
}

// idPrefix starts the JSON of every record the store writes from a struct
// whose first field is its id: a run, a delivery event's payload.
const idPrefix = `{"id":"`

// idAt is where a run's id starts in its JSON.
const idAt = len(idPrefix)

// doneStatuses are the terminal statuses, by doneEntry.status.
var doneStatuses = [...]belay.RunStatus{belay.RunComplete, belay.RunFailed, belay.RunCancelled, belay.RunStranded}

var doneSeed = maphash.MakeSeed()

// errNotKept is add's answer for a finished run it cannot keep as JSON
// with a summary: one with a time that JSON or unix nanos cannot hold, or
// an id JSON escapes. Such a run stays a *belay.Run in state.Runs.
var errNotKept = errors.New("fsstore: finished run not kept encoded")

func (d *doneRuns) len() int { return len(d.ents) }

// add keeps a finished run; raw is its JSON (nil: encode it). It refuses a
// run whose id or InputSeq another finished run has: only a damaged
// snapshot holds such, and it is then not trusted. It returns errNotKept
// for a run to keep as it is.
func (d *doneRuns) add(r *belay.Run, raw []byte) error {
	code := slices.Index(doneStatuses[:], r.Status)
	if code < 0 {
		return fmt.Errorf("run %s is %q, not finished", r.ID, r.Status)
	}
	if d.find(r.ID) >= 0 {
		return fmt.Errorf("two runs have id %q", r.ID)
	}
	i, found := d.search(r.InputSeq)
	if found {
		return fmt.Errorf("runs %s and %s have input seq %d", d.id(i), r.ID, r.InputSeq)
	}
	created, ok1 := unixNanos(r.CreatedAt)
	updated, ok2 := unixNanos(r.UpdatedAt)
	if !ok1 || !ok2 || r.ID == "" || len(r.ID) > math.MaxUint8 {
		return errNotKept
	}
	w := doneWriter{d: d, chunk: -1}
	if raw != nil && hasID(raw, r.ID) {
		_, _ = w.Write(raw)
	} else if err := json.NewEncoder(&w).Encode(r); err != nil || w.chunk < 0 {
		return errNotKept // (Encode writes nothing when it fails)
	}
	c := &d.chunks[w.chunk]
	if !hasID((*c)[w.off:], r.ID) || len(*c) > math.MaxUint32 || len(d.chunks) > math.MaxUint32 {
		*c = (*c)[:w.off]
		if w.off == 0 && w.chunk == len(d.chunks)-1 {
			d.chunks = d.chunks[:w.chunk] // made for this run alone
		}
		return errNotKept
	}
	e := doneEntry{
		seq: r.InputSeq, created: created, updated: updated,
		chunk: uint32(w.chunk), off: uint32(w.off), n: uint32(len(*c) - w.off), idLen: uint8(len(r.ID)), status: uint8(code),
	}
	d.ents = slices.Insert(d.ents, i, e)
	if len(d.ents) == 1 {
		d.session = r.Session
	} else if r.Session != d.session {
		if d.others == nil {
			d.others = map[uint64]string{}
		}
		d.others[r.InputSeq] = r.Session
	}
	h := maphash.String(doneSeed, r.ID)
	if d.byHash == nil {
		d.byHash = map[uint64]uint64{}
	}
	if _, taken := d.byHash[h]; taken {
		if d.clash == nil {
			d.clash = map[string]uint64{}
		}
		d.clash[r.ID] = r.InputSeq
	} else {
		d.byHash[h] = r.InputSeq
	}
	if r.Status == belay.RunFailed || r.Status == belay.RunStranded {
		d.failed++
	}
	return nil
}

// hasID reports whether a run's JSON starts with its id, unescaped.
func hasID(raw []byte, id string) bool {
	return len(raw) > idAt+len(id) && string(raw[:idAt]) == idPrefix &&
		string(raw[idAt:idAt+len(id)]) == id && raw[idAt+len(id)] == '"'
}

// unixNanos returns t in unix nanos if they hold it.
func unixNanos(t time.Time) (int64, bool) {
	ns := t.UnixNano()
	return ns, time.Unix(0, ns).Equal(t)
}

// search returns where seq's entry is or would go.
func (d *doneRuns) search(seq uint64) (int, bool) {
	// Runs mostly finish in the order they were created: look at the end
	// first.
	if n := len(d.ents); n == 0 || d.ents[n-1].seq < seq {
		return n, false
	}
	i := sort.Search(len(d.ents), func(i int) bool { return d.ents[i].seq >= seq })
	return i, i < len(d.ents) && d.ents[i].seq == seq
}

// find returns the index of the entry of run id, or -1.
func (d *doneRuns) find(id string) int {
	if len(d.ents) == 0 {
		return -1
	}
	seq, ok := d.clash[id]
	if !ok {
		if seq, ok = d.byHash[maphash.String(doneSeed, id)]; !ok {
			return -1
		}
	}
	i, found := d.search(seq)
	if !found {
		return -1
	}
	if string(d.idBytes(i)) != id {
		return -1
	}
	return i
}

// idBytes returns entry i's run id, in its JSON.
func (d *doneRuns) idBytes(i int) []byte {
	e := &d.ents[i]
	return d.chunks[e.chunk][int(e.off)+idAt : int(e.off)+idAt+int(e.idLen)]
}

// id returns entry i's run id.
func (d *doneRuns) id(i int) string { return string(d.idBytes(i)) }

// has reports whether run id is among the finished runs.
func (d *doneRuns) has(id string) bool { return d.find(id) >= 0 }

// status returns entry i's status.
func (d *doneRuns) status(i int) belay.RunStatus { return doneStatuses[d.ents[i].status] }

// run decodes entry i.
func (d *doneRuns) run(i int) (*belay.Run, error) {
	r := new(belay.Run)
	if err := json.Unmarshal(d.raw(i), r); err != nil {
		return nil, fmt.Errorf("fsstore: finished run %s does not decode: %w", d.id(i), err)
	}
	return r, nil
}

// raw returns entry i's JSON.
func (d *doneRuns) raw(i int) []byte {
	e := &d.ents[i]
	return d.chunks[e.chunk][e.off : e.off+e.n : e.off+e.n]
}

// key returns a run holding only entry i's id, session, status, input seq
// and times: what ListRuns orders and pre-filters by.
func (d *doneRuns) key(i int) *belay.Run {
	k := new(belay.Run)
	d.keyInto(i, k)
	k.ID = d.id(i)
	return k
}

// keyInto sets k to entry i's key but its id, which a filter does not
// ask, so that filtering allocates nothing.
func (d *doneRuns) keyInto(i int, k *belay.Run) {
	e := &d.ents[i]
	session := d.session
	if s, ok := d.others[e.seq]; ok {
		session = s
	}
	*k = belay.Run{
		Session: session, Status: doneStatuses[e.status], InputSeq: e.seq,
		CreatedAt: time.Unix(0, e.created).UTC(), UpdatedAt: time.Unix(0, e.updated).UTC(),
	}
}
