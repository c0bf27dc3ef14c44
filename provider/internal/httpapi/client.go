package httpapi

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Timeouts bound the phases of one HTTP exchange. Zero disables one.
type Timeouts struct {
	// Connect bounds the TCP connect and the TLS handshake.
	Connect time.Duration
	// FirstByte bounds the wait for the response headers after the
	// request was sent.
	FirstByte time.Duration
	// Idle bounds the silence between two reads of a streaming body;
	// keepalive comments count as data.
	Idle time.Duration
}

// Client is an HTTP client with Timeouts.
type Client struct {
	http *http.Client
	tr   *http.Transport
	idle time.Duration
}

// NewClient returns a client; each provider owns one.
func NewClient(t Timeouts) *Client {
	dialer := &net.Dialer{Timeout: t.Connect, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dialer.DialContext,
		TLSHandshakeTimeout:   t.Connect,
		ResponseHeaderTimeout: t.FirstByte,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConnsPerHost:   8,
		ForceAttemptHTTP2:     true,
	}
	return &Client{
		http: &http.Client{Transport: tr},
		tr:   tr,
		idle: t.Idle,
	}
}

// CloseIdleConnections closes the client's idle keep-alive connections.
func (c *Client) CloseIdleConnections() { c.tr.CloseIdleConnections() }

// Do sends req under ctx. The response body, if any, fails with ErrIdle
// when no data arrives for the idle timeout; closing it releases
// everything.
func (c *Client) Do(ctx context.Context, req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	resp, err := c.http.Do(req.WithContext(ctx))
	if err != nil {
		cancel(nil)
		return nil, err
	}
	b := &idleBody{rc: resp.Body, ctx: ctx, cancel: cancel}
	if c.idle > 0 {
		b.idle = c.idle
		b.timer = time.AfterFunc(c.idle, func() { cancel(ErrIdle) })
	}
	resp.Body = b
	return resp, nil
}

// idleBody cancels its request when no data arrives for idle.
type idleBody struct {
	rc     io.ReadCloser
	ctx    context.Context
	cancel context.CancelCauseFunc
	idle   time.Duration
	timer  *time.Timer
	once   sync.Once
}

func (b *idleBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 && b.timer != nil {
		b.timer.Reset(b.idle)
	}
	if err != nil && !errors.Is(err, io.EOF) {
		if cause := context.Cause(b.ctx); errors.Is(cause, ErrIdle) {
			err = ErrIdle
		}
	}
	return n, err
}

func (b *idleBody) Close() error {
	err := b.rc.Close()
	b.once.Do(func() {
		if b.timer != nil {
			b.timer.Stop()
		}
		b.cancel(nil)
	})
	return err
}

// ValidHeaderName reports whether s is an HTTP header field name (RFC
// 9110 token).
func ValidHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// ValidHeaderValue reports whether s can be sent as an HTTP header field
// value: no control characters other than tab (RFC 9110 field-value).
func ValidHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
