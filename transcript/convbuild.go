package transcript

import (
	"encoding/json"
	"fmt"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/journal"
)

// convBuilder folds a session's journal events into its conversation one
// event at a time (FromJournal describes the rules). A streaming export
// takes the messages of the runs that ended and starts it again.
type convBuilder struct {
	msgs []Message
	runs map[string]*runState
	open int // runs in runs that have not ended
	// waiting are the runs created whose prompt is not placed yet (they
	// have not started), in the order they were created.
	waiting []*runState
	// text, when set, takes a text or thinking delta instead of the
	// builder decoding it into blk: the block is new (extend false) or
	// the run's current one. A streaming export keeps long text in the
	// journal and reads it again when it writes the block.
	text func(rs *runState, blk *Block, extend bool, e journal.Event) error
}

// runState is what the builder knows of one run.
type runState struct {
	prompt    *Message // the prompt, until the run starts
	start     int      // index of the run's first message after the prompt
	asst      int      // index of the open assistant message, -1 if none
	lastAsst  int      // index of the run's last assistant message, -1 if none
	turnEnded bool     // the turn end was journaled
	ended     bool     // the run's terminal run.updated was journaled
	model     string
	blockFrom uint64 // seq of the first delta of the open text or thinking block
	// The final answer (run.answer) being gathered: its hash, size and
	// the parts so far.
	ansSHA  string
	ansSize int64
	ans     []byte
}

func (b *convBuilder) get(e journal.Event) *runState {
	rs := b.runs[e.Run]
	if rs == nil {
		rs = b.newRun(e.Run, "")
	}
	return rs
}

func (b *convBuilder) newRun(id, model string) *runState {
	if b.runs == nil {
		b.runs = map[string]*runState{}
	}
	if old := b.runs[id]; old == nil || old.ended {
		b.open++
	} else if old.prompt != nil {
		b.place(old) // created twice: the first prompt stays where it was
	}
	rs := &runState{start: len(b.msgs), asst: -1, lastAsst: -1, model: model}
	b.runs[id] = rs
	return rs
}

func (b *convBuilder) openAsst(rs *runState, e journal.Event) *Message {
	if rs.asst < 0 {
		b.msgs = append(b.msgs, Message{Role: RoleAssistant, Meta: Meta{ID: e.Run, Model: rs.model, Time: e.TS}})
		rs.asst = len(b.msgs) - 1
		rs.lastAsst = rs.asst
	}
	return &b.msgs[rs.asst]
}

// idle reports whether every run the builder has seen has ended: no later
// event changes the messages built so far.
func (b *convBuilder) idle() bool { return b.open == 0 }

// reset starts a new stretch of the conversation after the messages built
// so far were taken.
func (b *convBuilder) reset() {
	b.msgs = b.msgs[:0]
	clear(b.runs)
	b.open = 0
	b.waiting = b.waiting[:0]
}

// place puts the prompt of a run that starts (or ends without starting)
// after every message before it: a follow-up queued while another run
// streamed comes after that run's answer, not where it was queued.
func (b *convBuilder) place(rs *runState) {
	if rs.prompt == nil {
		return
	}
	b.msgs = append(b.msgs, *rs.prompt)
	rs.prompt, rs.start = nil, len(b.msgs)
	for i, w := range b.waiting {
		if w == rs {
			b.waiting = append(b.waiting[:i], b.waiting[i+1:]...)
			break
		}
	}
}

// finish places the prompts of the runs that have not started: the end of
// the conversation, in the order they were queued.
func (b *convBuilder) finish() {
	for len(b.waiting) > 0 {
		b.place(b.waiting[0])
	}
}

// starts reports whether an event of a run that exists shows it started
// (or ended): anything but its creation, a cancel request, or a phase
// change that leaves it queued.
func starts(e journal.Event) bool {
	switch e.Type {
	case belay.EventRunCreated, belay.EventRunCancelRequested:
		return false
	case belay.EventRunUpdated:
		var p struct {
			Phase string `json:"phase"`
		}
		return json.Unmarshal(e.Data, &p) != nil || p.Phase != string(belay.PhaseQueued)
	}
	return true
}

func (b *convBuilder) add(e journal.Event) error {
	bad := func(err error) error { return fmt.Errorf("transcript: event %d (%s): %w", e.Seq, e.Type, err) }
	if rs := b.runs[e.Run]; rs != nil && rs.prompt != nil && starts(e) {
		b.place(rs)
	}
	switch e.Type {
	case belay.EventRunCreated:
		var p struct {
			Model string `json:"model"`
			Input struct {
				Prompt string `json:"prompt"`
			} `json:"input"`
		}
		if err := json.Unmarshal(e.Data, &p); err != nil {
			return bad(err)
		}
		rs := b.newRun(e.Run, p.Model)
		rs.prompt = &Message{Role: RoleUser, Blocks: []Block{{Type: BlockText, Text: p.Input.Prompt}}, Meta: Meta{ID: e.Run, Time: e.TS}}
		b.waiting = append(b.waiting, rs)
	case belay.EventRunText, belay.EventRunThinking:
		t := BlockText
		if e.Type == belay.EventRunThinking {
			t = BlockThinking
		}
		rs := b.get(e)
		m := b.openAsst(rs, e)
		n := len(m.Blocks)
		extend := n > 0 && m.Blocks[n-1].Type == t
		if !extend {
			rs.blockFrom = e.Seq
		}
		if b.text != nil {
			if !extend {
				m.Blocks = append(m.Blocks, Block{Type: t})
				n++
			}
			return b.text(rs, &m.Blocks[n-1], extend, e)
		}
		var p struct {
			Text string `json:"text"`
		}
		if err := json.Unmarshal(e.Data, &p); err != nil {
			return bad(err)
		}
		if extend {
			m.Blocks[n-1].Text += p.Text
		} else {
			m.Blocks = append(m.Blocks, Block{Type: t, Text: p.Text})
		}
	case belay.EventRunAnswer:
		var p belay.AnswerData
		if err := json.Unmarshal(e.Data, &p); err != nil {
			return bad(err)
		}
		rs := b.get(e)
		if p.Offset == 0 || p.SHA256 != rs.ansSHA || p.Size != rs.ansSize {
			rs.ansSHA, rs.ansSize, rs.ans = p.SHA256, p.Size, rs.ans[:0]
		}
		if p.Offset == int64(len(rs.ans)) {
			rs.ans = append(rs.ans, p.Text...)
		}
		if int64(len(rs.ans)) == rs.ansSize {
			b.finalAnswer(rs, e, string(rs.ans))
			rs.ansSHA, rs.ansSize, rs.ans = "", 0, nil
		}
	case belay.EventRunToolCall:
		var p struct {
			ID    string          `json:"id"`
			Name  string          `json:"name"`
			Input json.RawMessage `json:"input"`
		}
		if err := json.Unmarshal(e.Data, &p); err != nil {
			return bad(err)
		}
		if len(p.Input) == 0 {
			p.Input = json.RawMessage(`{}`)
		}
		m := b.openAsst(b.get(e), e)
		m.Blocks = append(m.Blocks, Block{Type: BlockToolCall, ID: p.ID, Name: p.Name, Input: p.Input})
	case belay.EventRunToolResult:
		var p struct {
			CallID  string `json:"callId"`
			Content string `json:"content"`
			IsError bool   `json:"isError"`
		}
		if err := json.Unmarshal(e.Data, &p); err != nil {
			return bad(err)
		}
		rs := b.get(e)
		rs.asst = -1
		var content []Block
		if p.Content != "" {
			content = []Block{{Type: BlockText, Text: p.Content}}
		}
		b.msgs = append(b.msgs, Message{Role: RoleTool, Meta: Meta{ID: e.Run, Time: e.TS}, Blocks: []Block{{Type: BlockToolResult, CallID: p.CallID, IsError: p.IsError, Content: content}}})
	case belay.EventRunUsage:
		var p struct {
			Input  int `json:"input"`
			Output int `json:"output"`
		}
		if err := json.Unmarshal(e.Data, &p); err != nil {
			return bad(err)
		}
		rs := b.get(e)
		if rs.lastAsst >= 0 {
			b.msgs[rs.lastAsst].Meta.Usage = &Usage{Input: p.Input, Output: p.Output}
		}
	case belay.EventRunUpdated:
		var p struct {
			Phase string `json:"phase"`
			Data  struct {
				Attempt    int    `json:"attempt"`
				Resume     bool   `json:"resume"`
				StopReason string `json:"stopReason"`
			} `json:"data"`
		}
		if err := json.Unmarshal(e.Data, &p); err != nil {
			return bad(err)
		}
		rs := b.runs[e.Run]
		if rs == nil {
			return nil
		}
		switch {
		case p.Data.Attempt > 1 && !p.Data.Resume:
			// Started again from scratch: drop what the run streamed so far.
			b.truncate(rs)
		case p.Data.StopReason != "":
			rs.turnEnded = true
			if rs.lastAsst >= 0 {
				b.msgs[rs.lastAsst].Meta.StopReason = p.Data.StopReason
			}
		case p.Phase == "failed" || p.Phase == "stranded" || p.Phase == "cancelled":
			if rs.lastAsst >= 0 && !rs.turnEnded {
				reason := "error"
				if p.Phase == "cancelled" {
					reason = "aborted"
				}
				b.msgs[rs.lastAsst].Meta.StopReason = reason
			}
		}
		switch p.Phase {
		case "complete", "failed", "stranded", "cancelled":
			if !rs.ended {
				rs.ended = true
				b.open--
			}
		}
	}
	return nil
}

// finalAnswer puts a run's final answer in place of the text blocks of
// its last assistant message: the answer as the provider took it when the
// turn ended supersedes the text it streamed.
func (b *convBuilder) finalAnswer(rs *runState, e journal.Event, text string) {
	i := rs.lastAsst
	if i < 0 {
		b.openAsst(rs, e)
		i = rs.lastAsst
	}
	m := &b.msgs[i]
	blocks := make([]Block, 0, len(m.Blocks)+1)
	at := -1
	for _, blk := range m.Blocks {
		if blk.Type == BlockText {
			if at < 0 {
				at = len(blocks)
				blocks = append(blocks, Block{Type: BlockText, Text: text})
			}
			continue
		}
		blocks = append(blocks, blk)
	}
	if at < 0 {
		blocks = append(blocks, Block{Type: BlockText, Text: text})
	}
	m.Blocks = blocks
}

// truncate drops every message from rs's first one after its prompt on,
// those of runs created while it was going included; the indexes such a
// run keeps are cut back so that they never name another run's message.
func (b *convBuilder) truncate(rs *runState) {
	b.msgs = b.msgs[:rs.start]
	rs.asst, rs.lastAsst, rs.turnEnded = -1, -1, false
	rs.ansSHA, rs.ansSize, rs.ans = "", 0, nil
	for _, o := range b.runs {
		if o.start > len(b.msgs) {
			o.start = len(b.msgs)
		}
		if o.asst >= len(b.msgs) {
			o.asst = -1
		}
		if o.lastAsst >= len(b.msgs) {
			o.lastAsst = -1
		}
	}
}
