package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/client"
)

// Wake-up sending.
const (
	wakeLeaseWait = 25 * time.Second
	// maxWakeAttempts bounds the tries of a wake-up no connected client is
	// subscribed to (about an hour with the backoff); then it is settled
	// as an error, visible in doctor.
	maxWakeAttempts = 64
	metaWake        = "belay/wake"
)

// kick wakes the wake loop from a backoff.
func (s *Server) kick() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// wakeLoop leases the wake-ups addressed to this server's subscriber as
// their runs end and sends each to the connected clients subscribed to the
// run. The daemon keeps the items, their leases and their settlement, so
// nothing is lost if this process or the daemon dies:
//
//   - an item is posted once per (subscriber, run), when the agent
//     subscribes: subscribing again returns it;
//   - it is leased when the run has ended, sent, then settled "done" with
//     the clients it reached and the time (Delivery.Result, SettledAt);
//   - if the daemon is away when the settlement is due, it is retried
//     until it lands; if the lease ran out meanwhile, the item comes back
//     and is settled without a second send (this process remembers what it
//     sent);
//   - if this process dies after sending and before settling, the next
//     one sends it again: the one case of a repeat. If it dies before
//     sending, the item is sent when its lease expires.
func (s *Server) wakeLoop(ctx context.Context) {
	backoff := 250 * time.Millisecond
	for ctx.Err() == nil {
		ds, err := s.c.Lease(ctx, apitype.LeaseRequest{To: s.sub, Owner: s.owner, TTL: apitype.Duration(s.ttl), Max: 16, Wait: apitype.Duration(wakeLeaseWait)})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.log.Debug("lease wake-ups", "err", err)
			s.sleep(ctx, backoff)
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		backoff = 250 * time.Millisecond
		for _, d := range ds {
			s.deliver(ctx, d)
		}
	}
}

func (s *Server) sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	case <-s.wake:
	}
}

// deliver sends one leased wake-up and settles it.
func (s *Server) deliver(ctx context.Context, d belay.Delivery) {
	var w wakeData
	if err := json.Unmarshal(d.Data, &w); err != nil || w.URI == "" {
		s.settle(ctx, d, apitype.SettleRequest{Kind: belay.SettleError, Result: "not a wake-up this server can read"})
		return
	}
	s.mu.Lock()
	who, sent := s.sent[d.ID]
	s.mu.Unlock()
	if !sent {
		if !s.subscribed(w.URI) {
			if d.Attempts >= maxWakeAttempts {
				s.settle(ctx, d, apitype.SettleRequest{Kind: belay.SettleError, Result: fmt.Sprintf("missed: no client was subscribed to %s in %d attempts", w.URI, d.Attempts)})
				return
			}
			// No client of this server wants it now (the client has not
			// subscribed again since a restart, or it is another server's
			// of the same subscriber): hand it back, soon at first, so
			// that the server whose client subscribed gets it.
			delay := min(time.Second<<min(max(d.Attempts-1, 0), 6), time.Minute)
			s.settle(ctx, d, apitype.SettleRequest{Kind: belay.SettleRetry, Delay: apitype.Duration(delay), Result: "no client subscribed yet"})
			return
		}
		_ = s.srv.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: w.URI, Meta: mcp.Meta{metaWake: d.ID}})
		s.mu.Lock()
		who = s.sent[d.ID]
		s.mu.Unlock()
		if len(who) == 0 {
			s.settle(ctx, d, apitype.SettleRequest{Kind: belay.SettleRetry, Delay: apitype.Duration(5 * time.Second), Result: "sending failed"})
			return
		}
		s.log.Info("wake-up sent", "run", w.Run, "clients", len(who))
	}
	s.settle(ctx, d, apitype.SettleRequest{Kind: belay.SettleDone, Result: "notified " + strings.Join(who, ", ") + " at " + time.Now().UTC().Format(time.RFC3339Nano)})
}

// settle settles a wake-up, retrying while the daemon is away.
func (s *Server) settle(ctx context.Context, d belay.Delivery, req apitype.SettleRequest) {
	req.Epoch = d.Epoch
	backoff := 100 * time.Millisecond
	for {
		_, err := s.c.Settle(ctx, d.ID, req)
		switch {
		case err == nil, errors.Is(err, belay.ErrTerminal):
			s.mu.Lock()
			delete(s.sent, d.ID)
			s.mu.Unlock()
			return
		case client.IsUnreachable(err) || errors.Is(err, belay.ErrStoreClosed):
			if ctx.Err() != nil {
				return
			}
			s.sleep(ctx, backoff)
			backoff = min(backoff*2, 2*time.Second)
			continue
		}
		// The lease was lost (expired while the daemon was away, or taken
		// by another server): the item comes back, and what was sent is
		// remembered, so it is settled then without a second send.
		s.log.Warn("settle wake-up", "delivery", d.ID, "err", err)
		return
	}
}

// subscribed reports whether a connected client is subscribed to uri.
func (s *Server) subscribed(uri string) bool {
	live := map[*mcp.ServerSession]bool{}
	for ss := range s.srv.Sessions() {
		live[ss] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for ss := range s.subs[uri] {
		if live[ss] {
			return true
		}
		delete(s.subs[uri], ss)
	}
	return false
}

// recordSends notes which clients a wake-up reached: the SDK reports a
// failed send only to this middleware.
func (s *Server) recordSends(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if method != "notifications/resources/updated" || err != nil {
			return res, err
		}
		p, ok := req.GetParams().(*mcp.ResourceUpdatedNotificationParams)
		if !ok {
			return res, err
		}
		id, _ := p.Meta[metaWake].(string)
		ss, _ := req.GetSession().(*mcp.ServerSession)
		if id == "" || ss == nil {
			return res, err
		}
		name := "client"
		if ip := ss.InitializeParams(); ip != nil && ip.ClientInfo != nil {
			name = ip.ClientInfo.Name
		}
		s.mu.Lock()
		s.sent[id] = append(s.sent[id], name+"/"+ss.ID())
		s.mu.Unlock()
		return res, err
	}
}
