package transcript

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"
)

// piCodec reads and writes pi coding-agent sessions (versions 1-3).
type piCodec struct{}

func (piCodec) hasHeader() bool { return true }

func (piCodec) checkHeader(line []byte) error {
	if !validJSON(line) {
		return errors.New("the header line is not valid JSON")
	}
	if typ, _ := getString(line, "type"); typ != "session" {
		return errors.New(`the first line is not a {"type":"session"} header`)
	}
	if id, ok := getString(line, "id"); !ok || strings.TrimSpace(id) == "" {
		return errors.New(`the session header has no "id"`)
	}
	return nil
}

func (piCodec) checkLine(line []byte) string {
	why, _ := piCheck(line)
	return why
}

// piCheck is checkLine that also returns where the line's keys are.
func piCheck(line []byte) (string, *keyCheck) {
	k := &keyCheck{top: piLineKeys, sub: piMsgKeys, subOf: "message"}
	return piCheckKeys(line, k), k
}

func piCheckKeys(line []byte, k *keyCheck) string {
	if why := k.check(line); why != "" {
		return why
	}
	typ, ok := strBytes(line, k.topAt[0])
	if !ok || len(typ) == 0 {
		return `entry has no "type"`
	}
	if string(typ) == "session" {
		return "a second session header"
	}
	if k.bad {
		return ambiguous
	}
	if string(typ) == "message" {
		if !object(line, k.topAt[4]) {
			return `message entry has no "message" object`
		}
		if _, ok := strBytes(line, k.subAt[0]); !ok {
			return `message has no "role"`
		}
	}
	return ""
}

type piBlock struct {
	Type              string          `json:"type"`
	Text              string          `json:"text"`
	Thinking          string          `json:"thinking"`
	ThinkingSignature string          `json:"thinkingSignature"`
	Redacted          bool            `json:"redacted"`
	Data              string          `json:"data"`
	MimeType          string          `json:"mimeType"`
	ID                string          `json:"id"`
	Name              string          `json:"name"`
	Arguments         json.RawMessage `json:"arguments"`
	Input             json.RawMessage `json:"input"`
}

type piUsage struct {
	Input      int `json:"input"`
	Output     int `json:"output"`
	CacheRead  int `json:"cacheRead"`
	CacheWrite int `json:"cacheWrite"`
}

// piUsageOut is usage as pi writes it: with its total and a cost (pi's
// footer and session stats read usage.cost.total without a guard; belay
// does not know prices, so the cost is zero).
type piUsageOut struct {
	piUsage
	TotalTokens int    `json:"totalTokens"`
	Cost        piCost `json:"cost"`
}

type piCost struct {
	Input      float64 `json:"input"`
	Output     float64 `json:"output"`
	CacheRead  float64 `json:"cacheRead"`
	CacheWrite float64 `json:"cacheWrite"`
	Total      float64 `json:"total"`
}

// piStopReason is a stop reason as pi names it ("stop", "length",
// "toolUse", "error", "aborted"), from pi's or another format's; calls
// says the turn calls tools.
func piStopReason(stop string, calls bool) string {
	switch stop {
	case "stop", "length", "toolUse", "error", "aborted":
		if calls && stop == "stop" {
			return "toolUse"
		}
		return stop
	case "max_tokens", "model_context_window_exceeded":
		return "length"
	case "tool_use", "tool_calls", "function_call":
		return "toolUse"
	case "refusal", "content_filter":
		return "error"
	}
	if calls {
		return "toolUse"
	}
	return "stop"
}

type piMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	Model      string          `json:"model"`
	Provider   string          `json:"provider"`
	Usage      *piUsage        `json:"usage"`
	StopReason string          `json:"stopReason"`
	Timestamp  int64           `json:"timestamp"`
	ToolCallID string          `json:"toolCallId"`
	ToolName   string          `json:"toolName"`
	IsError    bool            `json:"isError"`
}

func piBlocks(c json.RawMessage) []Block {
	return contentBlocks(c, func(raw json.RawMessage) Block {
		var pb piBlock
		_ = json.Unmarshal(raw, &pb)
		b := Block{Type: BlockType(pb.Type), raw: raw}
		switch pb.Type {
		case "text":
			b.Type, b.Text = BlockText, pb.Text
		case "thinking":
			b.Type, b.Text, b.Signature, b.Redacted = BlockThinking, pb.Thinking, pb.ThinkingSignature, pb.Redacted
		case "image":
			b.Type, b.Data, b.MediaType = BlockImage, pb.Data, pb.MimeType
		case "toolCall", "toolUse", "functionCall", "tool_use", "tool_call", "function_call":
			b.Type, b.ID, b.Name = BlockToolCall, pb.ID, pb.Name
			switch {
			case !isNullish(pb.Arguments):
				b.Input = pb.Arguments
			case !isNullish(pb.Input):
				b.Input = pb.Input
			}
		}
		return b
	})
}

func (piCodec) build(d *Document) error {
	d.parentK = "parentId"
	d.version = 1
	if d.header == nil {
		return nil // an empty file
	}
	if v, ok := getField(d.header.raw, "version"); ok {
		var n int
		if json.Unmarshal(v, &n) == nil {
			d.version = n
		}
	}
	var body []*entry
	for _, e := range d.entries {
		if e != d.header && !e.blank {
			body = append(body, e)
		}
	}
	path := body
	if d.version >= 2 {
		d.tree = true
		for _, e := range body {
			e.id, _ = getString(e.raw, "id")
			e.parent, _ = getString(e.raw, "parentId")
		}
		body = d.dropDuplicates(body)
		path = d.linkTree(body, treeSpec{idKey: "id", parentKey: "parentId"})
	}
	for _, e := range path {
		e.path = true
		m := piEntryMessage(e)
		d.seal(m, e, 0)
		e.parts = 1
		d.items = append(d.items, m)
	}
	return nil
}

func piEntryMessage(e *entry) *Message {
	typ, _ := getString(e.raw, "type")
	if typ != "message" {
		return &Message{}
	}
	raw, _ := getField(e.raw, "message")
	var pm piMessage
	if json.Unmarshal(raw, &pm) != nil {
		return &Message{}
	}
	meta := Meta{ID: e.id, Model: pm.Model, Provider: pm.Provider, StopReason: pm.StopReason}
	if ts, ok := getString(e.raw, "timestamp"); ok {
		meta.Time, _ = time.Parse(time.RFC3339Nano, ts)
	}
	if meta.Time.IsZero() && pm.Timestamp > 0 {
		meta.Time = time.UnixMilli(pm.Timestamp).UTC()
	}
	if u := pm.Usage; u != nil {
		meta.Usage = &Usage{Input: u.Input, Output: u.Output, CacheRead: u.CacheRead, CacheWrite: u.CacheWrite}
	}
	m := &Message{Meta: meta}
	blocks := piBlocks(pm.Content)
	switch pm.Role {
	case "user":
		m.Role, m.Blocks = RoleUser, blocks
	case "assistant":
		m.Role, m.Blocks = RoleAssistant, blocks
	case "toolResult":
		res := Block{Type: BlockToolResult, CallID: pm.ToolCallID, Name: pm.ToolName, IsError: pm.IsError, Content: blocks}
		markSynthetic(&res)
		m.Role, m.Blocks, m.Synthetic = RoleTool, []Block{res}, res.Synthetic
	default:
		return &Message{} // bashExecution, custom, ...: kept as they are
	}
	return m
}

func (piCodec) render(d *Document, items []*Message) []outEntry {
	ids := d.idSet()
	names := piCallNames(d, items)
	out := make([]outEntry, 0, len(items))
	for _, m := range items {
		if m.opaque() || m.unchanged() {
			if m.src != nil {
				out = append(out, outEntry{src: m.src, raw: m.src.raw, id: m.src.id})
			}
			continue
		}
		if m.src != nil {
			msg, _ := getField(m.src.raw, "message")
			msg = setField(msg, "content", piContent(m, msg))
			out = append(out, outEntry{src: m.src, raw: setField(m.src.raw, "message", msg), id: m.src.id})
			continue
		}
		id := ""
		if d.tree {
			id = newPiID(ids, seedOf(d, m, out))
		}
		out = append(out, outEntry{raw: piNewEntry(m, id, d.tree, names), id: id})
	}
	return out
}

// piCallNames are the names of the tool calls of items by call id, with
// those of the batch rendered before (a streamed export renders in
// batches; a result follows its call closely): what names a tool result
// written from a format whose results do not carry the name.
func piCallNames(d *Document, items []*Message) map[string]string {
	names := map[string]string{}
	for _, m := range items {
		for i := range m.Blocks {
			if b := &m.Blocks[i]; b.Type == BlockToolCall && b.ID != "" && b.Name != "" {
				names[b.ID] = b.Name
			}
		}
	}
	prev := d.piNames
	d.piNames = names
	for id, n := range prev {
		if _, ok := names[id]; !ok {
			names[id] = n
		}
	}
	return names
}

func piContent(m *Message, orig []byte) []byte {
	var blocks []Block
	if m.Role == RoleTool {
		res, _ := m.Result()
		blocks = res.Content
	} else {
		blocks = m.Blocks
	}
	c, _ := getField(orig, "content")
	if len(c) > 0 && c[0] == '"' && len(blocks) == 1 && blocks[0].Type == BlockText {
		return mustJSON(blocks[0].Text)
	}
	var parts [][]byte
	for i := range blocks {
		if p := piBlock2JSON(&blocks[i]); p != nil {
			parts = append(parts, p)
		}
	}
	if parts == nil {
		return []byte("[]")
	}
	return joinArray(parts)
}

func piBlock2JSON(b *Block) []byte {
	if raw := b.keptRaw(); raw != nil {
		return raw
	}
	switch b.Type {
	case BlockText:
		return mustJSON(struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}{"text", b.Text})
	case BlockThinking:
		return mustJSON(struct {
			Type      string `json:"type"`
			Thinking  string `json:"thinking"`
			Signature string `json:"thinkingSignature,omitempty"`
			Redacted  bool   `json:"redacted,omitempty"`
		}{"thinking", b.Text, b.Signature, b.Redacted})
	case BlockImage:
		return mustJSON(struct {
			Type     string `json:"type"`
			Data     string `json:"data"`
			MimeType string `json:"mimeType"`
		}{"image", b.Data, b.MediaType})
	case BlockToolCall:
		in := b.Input
		if len(in) == 0 {
			in = json.RawMessage("{}")
		}
		return mustJSON(struct {
			Type      string          `json:"type"`
			ID        string          `json:"id"`
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		}{"toolCall", b.ID, b.Name, in})
	}
	return nil
}

// piNewEntry encodes a message belay made (a synthetic result) or one
// converted from another format as a pi message entry.
func piNewEntry(m *Message, id string, tree bool, names map[string]string) []byte {
	ts := m.Meta.Time
	if ts.IsZero() {
		ts = time.Unix(0, 0).UTC()
	}
	msg := []byte(`{}`)
	switch m.Role {
	case RoleTool:
		res, _ := m.Result()
		name := res.Name
		if name == "" {
			name = names[res.CallID]
		}
		if name == "" {
			name = "unknown" // its call is not in the conversation
		}
		msg = setField(msg, "role", []byte(`"toolResult"`))
		msg = setField(msg, "toolCallId", mustJSON(res.CallID))
		msg = setField(msg, "toolName", mustJSON(name))
		msg = setField(msg, "content", piContent(m, nil))
		msg = setField(msg, "isError", mustJSON(res.IsError))
		if res.Synthetic {
			msg = setField(msg, "details", []byte(`{"belay":"synthetic"}`))
		}
	case RoleAssistant:
		msg = setField(msg, "role", []byte(`"assistant"`))
		msg = setField(msg, "content", piContent(m, nil))
		if m.Meta.Model != "" {
			msg = setField(msg, "model", mustJSON(m.Meta.Model))
		}
		var u piUsageOut
		if mu := m.Meta.Usage; mu != nil {
			u.piUsage = piUsage{Input: mu.Input, Output: mu.Output, CacheRead: mu.CacheRead, CacheWrite: mu.CacheWrite}
			u.TotalTokens = mu.Input + mu.Output + mu.CacheRead + mu.CacheWrite
		}
		msg = setField(msg, "usage", mustJSON(u))
		calls := slices.ContainsFunc(m.Blocks, func(b Block) bool { return b.Type == BlockToolCall })
		msg = setField(msg, "stopReason", mustJSON(piStopReason(m.Meta.StopReason, calls)))
	default:
		msg = setField(msg, "role", []byte(`"user"`))
		msg = setField(msg, "content", piContent(m, nil))
	}
	msg = setField(msg, "timestamp", mustJSON(ts.UnixMilli()))
	line := []byte(`{"type":"message"}`)
	if tree {
		line = setField(line, "id", mustJSON(id))
		line = setField(line, "parentId", []byte("null"))
	}
	line = setField(line, "timestamp", mustJSON(ts.UTC().Format("2006-01-02T15:04:05.000Z")))
	return setField(line, "message", msg)
}

// newPiID makes an id shaped as pi's (8 hex characters), unique in the
// file. It is derived from seed, so repairing the same file twice gives the
// same bytes.
func newPiID(ids map[string]bool, seed string) string {
	for n := 0; ; n++ {
		sum := sha256.Sum256([]byte(seed + "/" + strconv.Itoa(n)))
		id := hex.EncodeToString(sum[:4])
		if !ids[id] {
			ids[id] = true
			return id
		}
	}
}

// seedOf derives the seed of a new entry's id from what it answers and the
// entry before it.
func seedOf(d *Document, m *Message, out []outEntry) string {
	seed := "belay"
	switch {
	case len(out) > 0:
		seed += "/" + out[len(out)-1].id
	case d.prevOut != nil:
		seed += "/" + *d.prevOut // a streaming export's entry before this stretch
	}
	if res, ok := m.Result(); ok {
		seed += "/" + res.CallID
	}
	return seed
}
