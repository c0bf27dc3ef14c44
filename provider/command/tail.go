package command

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"strconv"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/provider"
)

// maxLine caps one output line: a longer one fails the run rather than
// growing the buffer without bound.
const maxLine = 32 << 20

// chunk is how much output is read at once.
const chunk = 64 << 10

// tailer follows one agent's output file.
type tailer struct {
	p    *Provider
	h    handle
	f    *os.File
	dec  decoder
	emit func(provider.Event) error

	off    int64  // bytes consumed: the cursor
	buf    []byte // bytes read past off: an incomplete line
	lines  int    // lines consumed since the last ref
	refOff int64  // the cursor of the last ref
	rbuf   []byte
}

// open opens h's output at cursor off. Before it, the output is decoded
// again without emitting, so the decoder knows what it knew then.
func (p *Provider) open(h handle, dec decoder, emit func(provider.Event) error, off int64) (*tailer, error) {
	f, err := os.Open(h.path(fileStdout))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, provider.Errorf(belay.ClassTargetLost, "command: the agent's output %s is gone", h.path(fileStdout))
		}
		return nil, internal(err, "open output")
	}
	t := &tailer{p: p, h: h, f: f, dec: dec, emit: emit, off: off, refOff: off, rbuf: make([]byte, chunk)}
	if err := t.replay(off); err != nil {
		f.Close()
		return nil, err
	}
	return t, nil
}

func (t *tailer) close() { t.f.Close() }

// replay decodes the output before off, discarding the events.
func (t *tailer) replay(off int64) error {
	if off == 0 {
		return nil
	}
	fi, err := t.f.Stat()
	if err != nil {
		return internal(err, "stat output")
	}
	if fi.Size() < off {
		return provider.Errorf(belay.ClassTargetLost, "command: cursor %d is past the end of the agent's output (%d bytes)", off, fi.Size())
	}
	r := io.NewSectionReader(t.f, 0, off)
	var line []byte
	for {
		n, err := r.Read(t.rbuf)
		line = append(line, t.rbuf[:n]...)
		for {
			i := bytes.IndexByte(line, '\n')
			if i < 0 {
				break
			}
			t.dec.decode(line[:i+1])
			line = line[i+1:]
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return internal(err, "read output")
		}
	}
	if len(line) > 0 {
		// The cursor is after the final line of a finished agent.
		t.dec.decode(line)
	}
	if _, err := t.f.Seek(off, io.SeekStart); err != nil {
		return internal(err, "seek output")
	}
	return nil
}

// follow emits the agent's events until it exits or ctx is done.
func (t *tailer) follow(ctx context.Context) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		if ctx.Err() != nil {
			return t.stop(ctx)
		}
		got, err := t.read(false)
		if err != nil {
			return t.abort(err)
		}
		if got {
			continue
		}
		// The output is quiet: report how far it was consumed.
		if err := t.ref(); err != nil {
			return t.abort(err)
		}
		switch t.h.state() {
		case stateRunning:
		case stateForeign:
			if _, ok := t.h.exitStatus(); !ok {
				return provider.Errorf(belay.ClassTargetLost,
					"command: pid %d is another process now (its start time differs): the agent is gone and left no exit status", t.h.pid)
			}
			fallthrough
		default:
			// The wrapper exited after the agent: the output is complete.
			for {
				got, err := t.read(true)
				if err != nil {
					return t.abort(err)
				}
				if !got {
					break
				}
			}
			return t.finish()
		}
		timer.Reset(t.p.cfg.PollInterval)
		select {
		case <-ctx.Done():
			return t.stop(ctx)
		case <-timer.C:
		}
	}
}

// read reads what the agent wrote since the last read and decodes its
// complete lines; final also decodes an unterminated last line. It
// reports whether it read anything.
func (t *tailer) read(final bool) (bool, error) {
	n, err := t.f.Read(t.rbuf)
	if err != nil && err != io.EOF {
		return false, internal(err, "read output")
	}
	t.buf = append(t.buf, t.rbuf[:n]...)
	for {
		i := bytes.IndexByte(t.buf, '\n')
		if i < 0 {
			break
		}
		if err := t.line(t.buf[:i+1]); err != nil {
			return false, err
		}
		t.buf = t.buf[i+1:]
	}
	if len(t.buf) > maxLine {
		return false, provider.Errorf(belay.ClassInternal, "command: an output line is longer than %d bytes", maxLine)
	}
	if final && n == 0 && len(t.buf) > 0 {
		last := t.buf
		t.buf = nil
		if err := t.line(last); err != nil {
			return false, err
		}
	}
	if len(t.buf) == 0 {
		t.buf = nil // let a large line's buffer go
	}
	return n > 0, nil
}

// line decodes one line (with its newline) and emits its events.
// A ref follows every tool call or result at once: a reattach must never
// report them again (G9). Otherwise one follows every RefEvery lines.
func (t *tailer) line(b []byte) error {
	evs := t.dec.decode(b)
	t.off += int64(len(b))
	t.lines++
	tool := false
	for _, ev := range evs {
		if err := t.emit(ev); err != nil {
			return err
		}
		tool = tool || ev.Kind == provider.ToolCall || ev.Kind == provider.ToolResult
	}
	if tool || t.lines >= t.p.cfg.RefEvery {
		return t.ref()
	}
	return nil
}

// ref reports the process and the cursor, if the cursor moved.
func (t *tailer) ref() error {
	if t.off == t.refOff {
		return nil
	}
	ref := belay.ConversationRef{Kind: RefKind, ID: t.h.id(), Target: t.h.path(fileStdout), Cursor: strconv.FormatInt(t.off, 10)}
	if err := t.emit(provider.Event{Kind: provider.RefUpdate, Ref: &ref}); err != nil {
		return err
	}
	t.refOff, t.lines = t.off, 0
	return nil
}

// finish decides the run's outcome once the agent is gone and its output
// read: a failure the stream announced; else the recorded exit status (0
// is done); else, with no status recorded, done if the stream announced
// its end, target_lost if the provider killed the agent, transient
// otherwise.
func (t *tailer) finish() error {
	done, failure := t.dec.result()
	code, haveCode := t.h.exitStatus()
	switch {
	case failure != nil:
		return failure
	case haveCode && code == 0:
		if !done {
			return t.emit(provider.Event{Kind: provider.TurnEnd, StopReason: "end_turn"})
		}
		return nil
	case haveCode:
		return exitError(code, t.dec.hint(), t.stderrTail())
	case done:
		return nil
	}
	if _, err := os.Stat(t.h.path(fileCancelled)); err == nil {
		return provider.Errorf(belay.ClassTargetLost, "command: belay stopped the agent before it finished (its run was cancelled, timed out or stalled)")
	}
	return provider.Errorf(belay.ClassTransient, "command: the agent process ended without a result (no exit status recorded)")
}

// stderrTail returns the end of the agent's stderr.
func (t *tailer) stderrTail() string {
	f, err := os.Open(t.h.path(fileStderr))
	if err != nil {
		return ""
	}
	defer f.Close()
	const tail = 4 << 10
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(fi.Size()-tail, 0)
	b := make([]byte, fi.Size()-off)
	n, _ := f.ReadAt(b, off)
	return string(b[:n])
}

// stop handles ctx's end: kill the agent, or detach from it. A detach
// reports the cursor first, so a reattach after an orderly stop emits
// nothing twice.
func (t *tailer) stop(ctx context.Context) error {
	if errors.Is(context.Cause(ctx), ErrDetach) {
		_ = t.ref()
		return ctx.Err()
	}
	t.h.kill(t.p.cfg.KillGrace)
	return ctx.Err()
}

// abort handles an error that ends following: the agent is killed (nobody
// would watch it) unless the error says to detach.
func (t *tailer) abort(err error) error {
	if !errors.Is(err, ErrDetach) {
		t.h.kill(t.p.cfg.KillGrace)
	}
	return err
}
