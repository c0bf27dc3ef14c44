package mcpserver

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/apitype"
	"github.com/belayhq/belay/internal/ids"
)

// outOfScope says how to grant what the agent asked for.
func (s *Server) outOfScope(what, session string) error {
	return &ToolError{
		Code:       CodeOutOfScope,
		Message:    fmt.Sprintf("%s is outside this server's scope (%s): an agent may act only on the sessions it created here or was granted", what, s.scope),
		NextAction: apitype.ActionResolveManually,
		Command:    "start belay mcp with --session " + session + " (or --tag, or --all) to grant it",
	}
}

// allowSession checks that the agent may act on a session.
func (s *Server) allowSession(ctx context.Context, id string) error {
	if err := ids.Check(ids.Session, id); err != nil {
		return invalid("session: %v", err)
	}
	if s.scope.All || slices.Contains(s.scope.Sessions, id) {
		return nil
	}
	for _, tag := range s.scope.Tags {
		page, err := s.c.ListRuns(ctx, apitype.RunQuery{RunFilter: belay.RunFilter{Session: id, Tag: tag}, Limit: 1})
		if err != nil {
			return toolError(err)
		}
		if len(page.Runs) > 0 {
			return nil
		}
	}
	if _, err := s.c.Session(ctx, id); err != nil {
		return toolError(err)
	}
	return s.outOfScope("session "+id, id)
}

// allowedRun returns a run the agent may act on.
func (s *Server) allowedRun(ctx context.Context, id string) (apitype.Run, error) {
	if err := ids.Check(ids.Run, id); err != nil {
		return apitype.Run{}, invalid("run: %v", err)
	}
	run, err := s.c.Run(ctx, id)
	if err != nil {
		return apitype.Run{}, toolError(err)
	}
	for _, t := range run.Tags {
		if slices.Contains(s.scope.Tags, t) {
			return run, nil
		}
	}
	if err := s.allowSession(ctx, run.Session); err != nil {
		if te, ok := err.(*ToolError); ok && te.Code == CodeOutOfScope {
			return apitype.Run{}, s.outOfScope("run "+id, run.Session)
		}
		return apitype.Run{}, err
	}
	return run, nil
}

// scopeFilter narrows a runs query to the scope: a tag or session of the
// scope, the first one if the agent named none.
func (s *Server) scopeFilter(f *belay.RunFilter) error {
	if s.scope.All {
		return nil
	}
	switch {
	case f.Session != "" && slices.Contains(s.scope.Sessions, f.Session):
		return nil
	case f.Tag != "" && slices.Contains(s.scope.Tags, f.Tag):
		return nil
	case f.Tag == "" && f.Session == "" && len(s.scope.Tags) > 0:
		f.Tag = s.scope.Tags[0]
		return nil
	case f.Tag == "" && f.Session == "":
		f.Session = s.scope.Sessions[0]
		return nil
	case f.Session != "" && f.Tag == "" && len(s.scope.Tags) > 0:
		// A session reached through a scope tag: list its runs that carry
		// one (the first tag; the others are other pages of the scope).
		f.Tag = s.scope.Tags[0]
		return nil
	}
	return invalid("runs_list covers one scope entry at a time: give tag (one of %s) or session (one of %s)",
		strings.Join(s.scope.Tags, ", "), strings.Join(s.scope.Sessions, ", "))
}
