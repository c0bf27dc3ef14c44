package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
)

// ErrStop, returned by a Follow callback, ends Follow without error.
var ErrStop = errors.New("client: stop following")

// Stream reads a session's events after seq after as Server-Sent Events and
// calls fn for each, in order, until the stream ends (the daemon stopped or
// the connection broke: it returns the error, or io.EOF), ctx is done, or
// fn returns an error.
func (c *Client) Stream(ctx context.Context, session string, after uint64, fn func(belay.Event) error) error {
	return c.streamEvents(ctx, session, after, nil, fn)
}

// streamEvents is Stream that calls opened (if not nil) once the daemon has
// answered with the stream.
func (c *Client) streamEvents(ctx context.Context, session string, after uint64, opened func(), fn func(belay.Event) error) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/v1/sessions/"+url.PathEscape(session)+"/events", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Last-Event-ID", strconv.FormatUint(after, 10))
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return c.unreachable(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return decodeError(resp)
	}
	if opened != nil {
		opened()
	}
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	var typ, data string
	for {
		line, err := readLine(br, maxStreamLine)
		if err != nil {
			if errors.Is(err, errLineTooLong) {
				return err
			}
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			if err == io.EOF {
				return io.EOF
			}
			return c.unreachable(err)
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if data != "" {
				if typ == "error" {
					var e apitype.ErrorBody
					if json.Unmarshal([]byte(data), &e) != nil || e.Code == "" {
						if len(data) > 200 {
							data = data[:200] + "…"
						}
						e = apitype.ErrorBody{Code: apitype.CodeInternal, Message: "the daemon ended the stream with an error it did not describe: " + data}
					}
					return &Error{Status: http.StatusOK, Code: e.Code, Message: e.Message}
				}
				var ev belay.Event
				if err := json.Unmarshal([]byte(data), &ev); err != nil {
					return fmt.Errorf("client: bad event in stream: %w", err)
				}
				if err := fn(ev); err != nil {
					return err
				}
			}
			typ, data = "", ""
		case strings.HasPrefix(line, ":"):
			// keepalive comment
		case strings.HasPrefix(line, "event:"):
			typ = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			if len(data)+len(line) > maxStreamLine {
				return fmt.Errorf("client: an event in the stream is larger than %d bytes", maxStreamLine)
			}
			data += strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " ")
		}
	}
}

// maxStreamLine bounds one event of a stream: twice the largest journal
// record, so that a daemon (or anything answering in its place) cannot
// make the client allocate without bound.
const maxStreamLine = 2 * belay.MaxRecordSize

// errLineTooLong is a stream line longer than the bound.
var errLineTooLong = fmt.Errorf("client: a line in the stream is longer than %d bytes", maxStreamLine)

// readLine reads one line (with its newline) of at most max bytes.
func readLine(br *bufio.Reader, max int) (string, error) {
	var buf []byte
	for {
		part, err := br.ReadSlice('\n')
		if len(buf)+len(part) > max {
			return "", errLineTooLong
		}
		buf = append(buf, part...)
		if err != bufio.ErrBufferFull {
			return string(buf), err
		}
	}
}

// FollowOptions tune Follow.
type FollowOptions struct {
	// OnDisconnect is told when the stream broke and Follow is about to
	// reconnect (from the last seq it delivered).
	OnDisconnect func(err error, lastSeq uint64)
	// MaxBackoff caps the wait between reconnects (default 2s).
	MaxBackoff time.Duration
	// MaxOutage, if positive, bounds how long Follow keeps reconnecting
	// while no daemon answers: once the daemon has been unreachable that
	// long without a stream opening, Follow returns an *UnreachableError.
	MaxOutage time.Duration
}

// Follow is Stream that reconnects, with backoff, whenever the connection
// breaks or the daemon restarts, resuming after the last event it
// delivered: fn sees every event exactly once, in order (G2). It returns
// when fn returns ErrStop (nil), another error, or ctx is done.
func (c *Client) Follow(ctx context.Context, session string, after uint64, opts FollowOptions, fn func(belay.Event) error) error {
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 2 * time.Second
	}
	backoff := 50 * time.Millisecond
	var downSince time.Time // when the current outage began
	for {
		err := c.streamEvents(ctx, session, after, func() { downSince = time.Time{} }, func(ev belay.Event) error {
			if ev.Seq <= after {
				return nil // never deliver an event twice
			}
			if err := fn(ev); err != nil {
				return err
			}
			after = ev.Seq
			backoff = 50 * time.Millisecond
			return nil
		})
		switch {
		case errors.Is(err, ErrStop):
			return nil
		case ctx.Err() != nil:
			return context.Cause(ctx)
		case err == io.EOF || IsUnreachable(err) || errors.Is(err, belay.ErrStoreClosed) || errors.Is(err, ErrOverloaded):
			// An overloaded daemon did not take the stream: try again after
			// the backoff, as after a disconnect.
			if downSince.IsZero() {
				downSince = time.Now()
			} else if opts.MaxOutage > 0 && time.Since(downSince) >= opts.MaxOutage {
				if IsUnreachable(err) {
					return err
				}
				return c.unreachable(err)
			}
			if opts.OnDisconnect != nil {
				opts.OnDisconnect(err, after)
			}
		default:
			return err
		}
		wait := backoff
		if e := (*Error)(nil); errors.As(err, &e) && e.RetryAfter > wait {
			wait = max(min(e.RetryAfter, opts.MaxBackoff), wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case <-t.C:
		}
		backoff = min(2*backoff, opts.MaxBackoff)
	}
}
