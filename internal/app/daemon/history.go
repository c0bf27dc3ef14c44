package daemon

import (
	"context"
	"strings"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/provider"
	"github.com/belayhq/belay/provider/openai"
	"github.com/belayhq/belay/store"
	"github.com/belayhq/belay/transcript"
)

// sessionHistory gives API providers the session's conversation before the
// run: built from the session's journal, repaired at the message level
// (tool calls paired with their results, orphans and duplicates dropped,
// delivered replies kept) before it is replayed to the provider.
func sessionHistory(st store.Store) openai.History {
	return func(ctx context.Context, req provider.Request) ([]openai.Message, error) {
		run, err := st.Run(ctx, req.Run)
		if err != nil {
			return nil, err
		}
		// The conversation before this run: every run created before it,
		// with everything they journaled, even after this run was queued
		// (a follow-up queued behind a running run must see its answer).
		earlier := map[string]bool{}
		var evs []belay.Event
		var after uint64
		for {
			page, err := st.Events(ctx, req.Session, after, 4096)
			if err != nil {
				return nil, err
			}
			if len(page) == 0 {
				break
			}
			for _, e := range page {
				after = e.Seq
				if e.Type == belay.EventRunCreated && e.Seq < run.InputSeq {
					earlier[e.Run] = true
				}
				if e.Run != "" && earlier[e.Run] || e.Run == "" && e.Seq < run.InputSeq && !strings.HasPrefix(e.Type, "notify.") {
					evs = append(evs, e)
				}
			}
		}
		msgs, err := transcript.FromJournal(evs)
		if err != nil {
			return nil, err
		}
		msgs, _ = transcript.ForProvider(msgs)
		return toProviderMessages(msgs), nil
	}
}

// toProviderMessages maps transcript messages onto the providers' neutral
// message type.
func toProviderMessages(msgs []transcript.Message) []openai.Message {
	out := make([]openai.Message, 0, len(msgs))
	for _, m := range msgs {
		pm := openai.Message{Role: string(m.Role)}
		var text []string
		for _, b := range m.Blocks {
			switch b.Type {
			case transcript.BlockText:
				text = append(text, b.Text)
			case transcript.BlockThinking:
				if !b.Redacted {
					pm.Thinking += b.Text
					pm.Signature = b.Signature
				}
			case transcript.BlockToolCall:
				pm.ToolCalls = append(pm.ToolCalls, openai.ToolCall{ID: b.ID, Name: b.Name, Input: b.Input})
			case transcript.BlockToolResult:
				pm.ToolCallID, pm.IsError = b.CallID, b.IsError
				for _, c := range b.Content {
					if c.Type == transcript.BlockText {
						text = append(text, c.Text)
					}
				}
			}
		}
		pm.Text = strings.Join(text, "")
		out = append(out, pm)
	}
	return out
}
