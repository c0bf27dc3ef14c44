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
	"github.com/belayhq/belay/internal/ids"
	"github.com/belayhq/belay/internal/jsonx"
)

// subscribeRetry is how long a subscription waits for a daemon that does
// not answer.
const subscribeRetry = 15 * time.Second

// WakeType is the type of the inbox items that carry wake-ups: addressed to
// the subscriber, held back until the run ends.
const WakeType = "mcp.wake"

// wakeData is a wake-up item's payload.
type wakeData struct {
	Run string `json:"run"`
	URI string `json:"uri"`
}

// RunResource is what belay://runs/{id} reads as.
type RunResource struct {
	Run        RunInfo `json:"run"`
	Answer     string  `json:"answer"`
	TotalBytes int     `json:"totalBytes"`
	// Truncated is set when the answer is longer than a resource read
	// returns: page through it with the read tool.
	Truncated bool `json:"truncated,omitempty"`
}

// SessionResource is what belay://sessions/{id} reads as.
type SessionResource struct {
	Session  string        `json:"session"`
	Provider string        `json:"provider"`
	Model    string        `json:"model,omitempty"`
	State    string        `json:"state"`
	Runs     []RunResource `json:"runs"`
}

func (s *Server) addResources() {
	s.srv.AddResourceTemplate(&mcp.ResourceTemplate{
		Name: "run", Title: "A belay run", URITemplate: "belay://runs/{id}", MIMEType: "application/json",
		Description: "A run: status, error class, timing and its answer text. Subscribe to be woken (notifications/resources/updated) when it ends.",
	}, s.readResource)
	s.srv.AddResourceTemplate(&mcp.ResourceTemplate{
		Name: "session", Title: "A belay session", URITemplate: "belay://sessions/{id}", MIMEType: "application/json",
		Description: "A session: its provider, state and every run with its answer.",
	}, s.readResource)
}

// parseURI splits belay://runs/ID or belay://sessions/ID.
func parseURI(uri string) (kind, id string, err error) {
	rest, ok := strings.CutPrefix(uri, "belay://")
	kind, id, ok2 := strings.Cut(rest, "/")
	switch {
	case !ok || !ok2:
	case kind == "runs" && ids.Check(ids.Run, id) == nil, kind == "sessions" && ids.Check(ids.Session, id) == nil:
		return kind, id, nil
	}
	return "", "", fmt.Errorf("%w: %q is not belay://runs/run_... or belay://sessions/ses_...", belay.ErrInvalid, uri)
}

func (s *Server) readResource(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	kind, id, err := parseURI(uri)
	if err != nil {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	var v any
	if kind == "runs" {
		run, err := s.allowedRun(ctx, id)
		if err != nil {
			return nil, resourceError(uri, err)
		}
		rr, err := s.runResource(ctx, run, MaxResourceText)
		if err != nil {
			return nil, resourceError(uri, toolError(err))
		}
		v = rr
	} else {
		if err := s.allowSession(ctx, id); err != nil {
			return nil, resourceError(uri, err)
		}
		sess, err := s.c.Session(ctx, id)
		if err != nil {
			return nil, resourceError(uri, toolError(err))
		}
		runs, err := s.c.Runs(ctx, id)
		if err != nil {
			return nil, resourceError(uri, toolError(err))
		}
		out := SessionResource{Session: sess.ID, Provider: sess.Provider, Model: sess.Model, State: string(sess.State), Runs: []RunResource{}}
		budget := MaxResourceText
		for _, r := range runs {
			rr, err := s.runResource(ctx, r, budget)
			if err != nil {
				return nil, resourceError(uri, toolError(err))
			}
			budget -= len(rr.Answer)
			out.Runs = append(out.Runs, rr)
		}
		v = out
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "application/json", Text: string(b)}}}, nil
}

func (s *Server) runResource(ctx context.Context, run apitype.Run, budget int) (RunResource, error) {
	text, total, err := s.answerPage(ctx, run.Run, 0, max(budget, 0))
	if err != nil {
		return RunResource{}, err
	}
	return RunResource{Run: runInfo(run), Answer: text, TotalBytes: total, Truncated: len(text) < total}, nil
}

// resourceError maps a not-found onto the protocol's resource-not-found.
func resourceError(uri string, err error) error {
	var te *ToolError
	if errors.As(err, &te) && te.Code == apitype.CodeNotFound {
		return mcp.ResourceNotFoundError(uri)
	}
	return err
}

// subscribe records a durable wake-up in the daemon: an inbox item of the
// run's session addressed to this server's subscriber and held back until
// the run ends. It is keyed by subscriber and run, so subscribing again,
// from this process or a later one, never makes a second wake-up.
func (s *Server) subscribe(ctx context.Context, req *mcp.SubscribeRequest) error {
	uri := req.Params.URI
	kind, id, err := parseURI(uri)
	if err != nil {
		return err
	}
	if kind != "runs" {
		return fmt.Errorf("%w: only runs can be subscribed to (belay://runs/run_...): a session's runs each have their own", belay.ErrInvalid)
	}
	run, err := s.allowedRun(ctx, id)
	if err != nil {
		return err
	}
	// A daemon restarting is waited for a little: the subscription must be
	// recorded in the daemon, or refused.
	req2 := apitype.PostRequest{
		Type: WakeType, Key: s.sub + "/" + run.ID, To: s.sub, AfterRun: run.ID,
		Data: jsonx.Must(wakeData{Run: run.ID, URI: uri}),
	}
	deadline := time.Now().Add(subscribeRetry)
	for backoff := 100 * time.Millisecond; ; backoff = min(backoff*2, 2*time.Second) {
		_, err := s.c.Post(ctx, run.Session, req2)
		if err == nil {
			break
		}
		if !client.IsUnreachable(err) || time.Now().Add(backoff).After(deadline) {
			return toolError(err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
	}
	s.mu.Lock()
	if s.subs[uri] == nil {
		s.subs[uri] = map[*mcp.ServerSession]bool{}
	}
	s.subs[uri][req.Session] = true
	s.mu.Unlock()
	s.log.Info("subscribed", "run", run.ID, "subscriber", s.sub)
	s.kick()
	return nil
}

func (s *Server) unsubscribe(_ context.Context, req *mcp.UnsubscribeRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.subs[req.Params.URI], req.Session)
	return nil
}
