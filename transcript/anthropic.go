package transcript

import (
	"encoding/json"
)

// anthropicCodec reads and writes Anthropic Messages.
type anthropicCodec struct{}

func (anthropicCodec) hasHeader() bool            { return false }
func (anthropicCodec) checkHeader(_ []byte) error { return nil }
func (anthropicCodec) checkLine(line []byte) string {
	return checkRoleLine(line)
}

type anBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	Thinking  string          `json:"thinking"`
	Signature string          `json:"signature"`
	Data      string          `json:"data"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
	Source    *struct {
		Type      string `json:"type"`
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
		URL       string `json:"url"`
		FileID    string `json:"file_id"`
	} `json:"source"`
}

// anthropicBlocks reads Anthropic content (a string or blocks); Claude Code
// uses the same blocks.
func anthropicBlocks(c json.RawMessage) []Block {
	return contentBlocks(c, func(raw json.RawMessage) Block {
		var ab anBlock
		_ = json.Unmarshal(raw, &ab)
		b := Block{Type: BlockType(ab.Type), raw: raw}
		switch ab.Type {
		case "text":
			b.Type, b.Text = BlockText, ab.Text
		case "thinking":
			b.Type, b.Text, b.Signature = BlockThinking, ab.Thinking, ab.Signature
		case "redacted_thinking":
			b.Type, b.Redacted, b.Signature = BlockThinking, true, ab.Data
		case "tool_use":
			b.Type, b.ID, b.Name = BlockToolCall, ab.ID, ab.Name
			if !isNullish(ab.Input) {
				b.Input = ab.Input
			}
		case "tool_result":
			b.Type, b.CallID, b.IsError = BlockToolResult, ab.ToolUseID, ab.IsError
			b.Content = anthropicBlocks(ab.Content)
			markSynthetic(&b)
		case "image", "document":
			b.Type = BlockImage
			if ab.Type == "document" {
				b.Type = BlockFile
			}
			if s := ab.Source; s != nil {
				b.MediaType, b.Data, b.URL = s.MediaType, s.Data, s.URL
				if s.FileID != "" {
					b.URL = s.FileID
				}
			}
		}
		return b
	})
}

// splitUser turns a user message's blocks into messages: each tool_result
// a tool message of its own, runs of other blocks user messages.
func splitUser(blocks []Block, meta Meta) []*Message {
	var out []*Message
	var cur *Message
	for _, b := range blocks {
		if b.Type == BlockToolResult {
			cur = nil
			out = append(out, &Message{Role: RoleTool, Blocks: []Block{b}, Meta: meta, Synthetic: b.Synthetic})
			continue
		}
		if cur == nil {
			cur = &Message{Role: RoleUser, Meta: meta}
			out = append(out, cur)
		}
		cur.Blocks = append(cur.Blocks, b)
	}
	if len(out) == 0 {
		out = append(out, &Message{Role: RoleUser, Meta: meta})
	}
	return out
}

func (anthropicCodec) build(d *Document) error {
	for _, e := range d.entries {
		if e.blank {
			if d.array {
				e.parts = 1
				d.items = append(d.items, &Message{src: e})
			}
			continue
		}
		e.path = true
		var am struct {
			Role       string          `json:"role"`
			Content    json.RawMessage `json:"content"`
			StopReason string          `json:"stop_reason"`
			Model      string          `json:"model"`
		}
		_ = json.Unmarshal(e.raw, &am)
		blocks := anthropicBlocks(am.Content)
		var msgs []*Message
		switch am.Role {
		case "user":
			msgs = splitUser(blocks, Meta{})
		case "assistant":
			msgs = []*Message{{Role: RoleAssistant, Blocks: blocks, Meta: Meta{StopReason: am.StopReason, Model: am.Model}}}
		case "system":
			msgs = []*Message{{Role: RoleSystem, Blocks: blocks}}
		default:
			msgs = []*Message{{}}
		}
		e.parts = len(msgs)
		for i, m := range msgs {
			d.seal(m, e, i)
			d.items = append(d.items, m)
		}
	}
	return nil
}

// wholeEntries reports whether group is exactly the messages of one or
// more entries as read, each complete, in order and unchanged.
func wholeEntries(group []*Message) bool {
	for i := 0; i < len(group); {
		m := group[i]
		if m.src == nil || m.part != 0 || m.src.parts < 1 || i+m.src.parts > len(group) {
			return false
		}
		for j := 0; j < m.src.parts; j++ {
			g := group[i+j]
			if g.src != m.src || g.part != j || !g.unchanged() {
				return false
			}
		}
		i += m.src.parts
	}
	return true
}

// groups splits items into the messages of a role-alternating format: a
// run of tool messages and the user message right after it make one user
// message; any other message is one on its own.
func groups(items []*Message) [][]*Message {
	var out [][]*Message
	for i := 0; i < len(items); {
		m := items[i]
		if m.src != nil && m.part == 0 && m.src.parts > 1 && i+m.src.parts <= len(items) && wholeEntries(items[i:i+m.src.parts]) {
			out = append(out, items[i:i+m.src.parts])
			i += m.src.parts
			continue
		}
		if m.Role != RoleTool {
			j := i + 1
			// The other parts of an entry read as several messages stay together.
			for m.src != nil && j < len(items) && items[j].src == m.src && items[j].Role != RoleTool && items[j].Role == m.Role {
				j++
			}
			out = append(out, items[i:j])
			i = j
			continue
		}
		j := i
		for j < len(items) && items[j].Role == RoleTool {
			j++
		}
		if j < len(items) && items[j].Role == RoleUser {
			j++
		}
		out = append(out, items[i:j])
		i = j
	}
	return out
}

func (anthropicCodec) render(d *Document, items []*Message) []outEntry {
	var out []outEntry
	for _, g := range groups(items) {
		if wholeEntries(g) || (len(g) == 1 && g[0].opaque()) {
			for _, m := range g {
				if m.part == 0 && m.src != nil {
					out = append(out, outEntry{src: m.src, raw: m.src.raw})
				}
			}
			continue
		}
		var base []byte
		var src *entry
		for _, m := range g {
			if m.src != nil {
				src, base = m.src, m.src.raw
				break
			}
		}
		role := "user"
		if g[0].Role == RoleAssistant || g[0].Role == RoleSystem {
			role = string(g[0].Role)
		}
		if base == nil {
			base = []byte(`{"role":"` + role + `"}`)
		}
		var blocks [][]byte
		for _, m := range g {
			for i := range m.Blocks {
				if raw := anthropicBlock(&m.Blocks[i]); raw != nil {
					blocks = append(blocks, raw)
				}
			}
		}
		out = append(out, outEntry{src: src, raw: setField(base, "content", contentValue(base, blocks, g))})
	}
	return out
}

// contentValue keeps string content a string when it still is one text.
func contentValue(base []byte, blocks [][]byte, g []*Message) []byte {
	orig, _ := getField(base, "content")
	if len(g) == 1 && len(orig) > 0 && orig[0] == '"' && len(g[0].Blocks) == 1 && g[0].Blocks[0].Type == BlockText {
		return mustJSON(g[0].Blocks[0].Text)
	}
	if blocks == nil {
		return []byte("[]")
	}
	return joinArray(blocks)
}

// anthropicBlock encodes one block as Anthropic (and Claude Code) write it.
func anthropicBlock(b *Block) []byte {
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
		if b.Redacted {
			return mustJSON(map[string]string{"type": "redacted_thinking", "data": b.Signature})
		}
		return mustJSON(struct {
			Type      string `json:"type"`
			Thinking  string `json:"thinking"`
			Signature string `json:"signature,omitempty"`
		}{"thinking", b.Text, b.Signature})
	case BlockToolCall:
		in := b.Input
		if len(in) == 0 || in[0] != '{' {
			in = json.RawMessage(`{}`)
		}
		return mustJSON(struct {
			Type  string          `json:"type"`
			ID    string          `json:"id"`
			Name  string          `json:"name"`
			Input json.RawMessage `json:"input"`
		}{"tool_use", b.ID, b.Name, in})
	case BlockToolResult:
		var content [][]byte
		for i := range b.Content {
			if raw := anthropicBlock(&b.Content[i]); raw != nil {
				content = append(content, raw)
			}
		}
		return mustJSON(struct {
			Type      string          `json:"type"`
			ToolUseID string          `json:"tool_use_id"`
			Content   json.RawMessage `json:"content"`
			IsError   bool            `json:"is_error,omitempty"`
		}{"tool_result", b.CallID, resultContent(b, content), b.IsError})
	case BlockImage, BlockFile:
		typ := "image"
		if b.Type == BlockFile {
			typ = "document"
		}
		src := map[string]string{"type": "base64", "media_type": b.MediaType, "data": b.Data}
		if b.Data == "" {
			src = map[string]string{"type": "url", "url": b.URL}
		}
		return mustJSON(map[string]any{"type": typ, "source": src})
	}
	return nil
}

func resultContent(b *Block, content [][]byte) json.RawMessage {
	if len(b.Content) == 1 && b.Content[0].Type == BlockText && b.Content[0].raw == nil {
		return mustJSON(b.Content[0].Text)
	}
	if content == nil {
		return json.RawMessage(`""`)
	}
	return joinArray(content)
}
