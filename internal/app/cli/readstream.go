package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/internal/ids"
)

// readRun prints one run's answer, streamed: `belay read RUN`. With asJSON
// it prints readResult with the answer streamed into its string.
func readRun(ctx context.Context, stdio Stdio, src source, run belay.Run, asJSON bool) error {
	out := bufio.NewWriterSize(stdio.Out, 256<<10)
	var err error
	if asJSON {
		m := newMarkers()
		res := readResult{Run: run.ID, Session: run.Session, Status: run.Status, Prompt: m.mark("prompt", 0), Answer: m.mark("answer", 0)}
		err = m.writeJSON(out, res, func(kind string, _ int, w io.Writer) error {
			if kind == "prompt" {
				p, err := runPrompt(ctx, src, run)
				if err != nil {
					return err
				}
				_, err = io.WriteString(w, p)
				return err
			}
			return src.answer(ctx, run, w)
		})
	} else {
		tw := &tailWriter{w: out}
		err = src.answer(ctx, run, tw)
		if err == nil && tw.last != '\n' {
			_, err = io.WriteString(out, "\n")
		}
	}
	if ferr := out.Flush(); err == nil {
		err = ferr
	}
	return err
}

// readSession prints every run of a session with its prompt and answer,
// one run at a time, each answer streamed.
func readSession(ctx context.Context, stdio Stdio, src source, id string, runs []belay.Run, asJSON bool) error {
	out := bufio.NewWriterSize(stdio.Out, 256<<10)
	var err error
	if asJSON {
		m := newMarkers()
		res := []readResult{}
		for i, r := range runs {
			res = append(res, readResult{Run: r.ID, Session: id, Status: r.Status, Prompt: m.mark("prompt", i), Answer: m.mark("answer", i)})
		}
		err = m.writeJSON(out, map[string]any{"session": id, "runs": res}, func(kind string, i int, w io.Writer) error {
			if kind == "prompt" {
				p, err := runPrompt(ctx, src, runs[i])
				if err != nil {
					return err
				}
				_, err = io.WriteString(w, p)
				return err
			}
			return src.answer(ctx, runs[i], w)
		})
	} else {
		for _, r := range runs {
			var prompt string
			if prompt, err = runPrompt(ctx, src, r); err != nil {
				break
			}
			fmt.Fprintf(out, "## %s (%s)\n\n> %s\n\n", r.ID, r.Status, strings.ReplaceAll(strings.TrimSpace(prompt), "\n", "\n> "))
			if err = src.answer(ctx, r, &trimWriter{w: out}); err != nil {
				break
			}
			io.WriteString(out, "\n\n")
		}
	}
	if ferr := out.Flush(); err == nil {
		err = ferr
	}
	return err
}

// markers stand in for strings too long to hold in memory (answers) in a
// value printed as JSON: writeJSON streams each in its place.
type markers struct{ nonce string }

func newMarkers() markers { return markers{nonce: ids.New("m_")} }

func (m markers) mark(kind string, i int) string {
	return fmt.Sprintf("\x00belay:%s:%s:%d\x00", m.nonce, kind, i)
}

// writeJSON prints v as writeJSON does, with fill writing the text of each
// marker (as a JSON string, escaped as it goes).
func (m markers) writeJSON(out io.Writer, v any, fill func(kind string, i int, w io.Writer) error) error {
	var buf bytes.Buffer
	if err := writeJSON(&buf, v); err != nil {
		return err
	}
	doc := buf.Bytes()
	open := []byte(`"\u0000belay:` + m.nonce + ":")
	for {
		at := bytes.Index(doc, open)
		if at < 0 {
			_, err := out.Write(doc)
			return err
		}
		rest := doc[at+len(open):]
		end := bytes.Index(rest, []byte(`\u0000"`))
		kind, num, ok := strings.Cut(string(rest[:max(end, 0)]), ":")
		i, err := strconv.Atoi(num)
		if end < 0 || !ok || err != nil {
			return fmt.Errorf("read: bad marker in %q", rest[:min(len(rest), 80)])
		}
		if _, err := out.Write(doc[:at+1]); err != nil {
			return err
		}
		sw := &jsonStringWriter{w: out}
		if err := fill(kind, i, sw); err != nil {
			return err
		}
		if err := sw.flush(); err != nil {
			return err
		}
		doc = rest[end+len(`\u0000`):]
	}
}

// runPrompt returns a run's prompt from its run.created event (one journal
// record, so bounded).
func runPrompt(ctx context.Context, src source, run belay.Run) (string, error) {
	if run.InputSeq == 0 {
		return "", nil
	}
	evs, err := src.events(ctx, run.Session, run.InputSeq-1, 1)
	if err != nil {
		return "", err
	}
	return promptOf(evs, run.ID), nil
}

// tailWriter remembers the last byte written.
type tailWriter struct {
	w    io.Writer
	last byte
}

func (t *tailWriter) Write(p []byte) (int, error) {
	if len(p) > 0 {
		t.last = p[len(p)-1]
	}
	return t.w.Write(p)
}

// trimWriter writes what it is given without leading and trailing white
// space (strings.TrimSpace over a stream): white space is held back until
// something follows it, up to 1 MiB.
type trimWriter struct {
	w       io.Writer
	started bool
	held    []byte
}

func (t *trimWriter) Write(p []byte) (int, error) {
	n := len(p)
	if !t.started {
		p = []byte(strings.TrimLeftFunc(string(p), unicode.IsSpace))
		if len(p) == 0 {
			return n, nil
		}
		t.started = true
	}
	body := strings.TrimRightFunc(string(p), unicode.IsSpace)
	if body == "" {
		t.held = append(t.held, p...)
		if len(t.held) > 1<<20 {
			_, err := t.w.Write(t.held)
			t.held = t.held[:0]
			return n, err
		}
		return n, nil
	}
	if len(t.held) > 0 {
		if _, err := t.w.Write(t.held); err != nil {
			return 0, err
		}
		t.held = t.held[:0]
	}
	if _, err := io.WriteString(t.w, body); err != nil {
		return 0, err
	}
	t.held = append(t.held, p[len(body):]...)
	return n, nil
}

// jsonStringWriter writes what it is given as the body of a JSON string,
// escaped as encoding/json escapes it; a rune split between two writes is
// held until it is whole.
type jsonStringWriter struct {
	w       io.Writer
	pending []byte
}

func (j *jsonStringWriter) Write(p []byte) (int, error) {
	n := len(p)
	if len(j.pending) > 0 {
		p = append(j.pending, p...)
		j.pending = nil
	}
	// Hold back an incomplete rune at the end.
	cut := len(p)
	for i := len(p) - 1; i >= 0 && i >= len(p)-utf8.UTFMax; i-- {
		if utf8.RuneStart(p[i]) {
			if !utf8.FullRune(p[i:]) {
				cut = i
			}
			break
		}
	}
	j.pending = append(j.pending, p[cut:]...)
	if err := j.emit(p[:cut]); err != nil {
		return 0, err
	}
	return n, nil
}

func (j *jsonStringWriter) emit(p []byte) error {
	if len(p) == 0 {
		return nil
	}
	b, _ := json.Marshal(string(p))
	_, err := j.w.Write(b[1 : len(b)-1])
	return err
}

// flush writes a held incomplete rune (as encoding/json would: U+FFFD).
func (j *jsonStringWriter) flush() error {
	p := j.pending
	j.pending = nil
	return j.emit(p)
}
