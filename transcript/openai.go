package transcript

import (
	"encoding/json"
	"strings"
)

// openaiCodec reads and writes OpenAI Chat Completions messages.
type openaiCodec struct{}

func (openaiCodec) hasHeader() bool            { return false }
func (openaiCodec) checkHeader(_ []byte) error { return nil }

// checkRoleLine validates a line holding one message object.
func checkRoleLine(line []byte) string {
	k := keyCheck{top: roleKeys}
	if why := k.check(line); why != "" {
		return why
	}
	if _, ok := strBytes(line, k.topAt[0]); !ok {
		return `message has no string "role"`
	}
	if k.bad {
		return ambiguous
	}
	return ""
}

func (openaiCodec) checkLine(line []byte) string { return checkRoleLine(line) }

type oaMessage struct {
	Role       string            `json:"role"`
	Content    json.RawMessage   `json:"content"`
	ToolCalls  []json.RawMessage `json:"tool_calls"`
	ToolCallID string            `json:"tool_call_id"`
}

type oaPart struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	Refusal  string `json:"refusal"`
	ImageURL *struct {
		URL string `json:"url"`
	} `json:"image_url"`
	File *struct {
		FileID   string `json:"file_id"`
		FileData string `json:"file_data"`
		Filename string `json:"filename"`
	} `json:"file"`
}

type oaToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function *struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
	Custom *struct {
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
	} `json:"custom"`
}

func (openaiCodec) build(d *Document) error {
	for _, e := range d.entries {
		if e.blank {
			if d.array {
				e.parts = 1
				d.items = append(d.items, &Message{src: e})
			}
			continue
		}
		e.path = true
		m := openaiMessage(e.raw)
		d.seal(m, e, 0)
		e.parts = 1
		d.items = append(d.items, m)
	}
	return nil
}

func openaiMessage(raw []byte) *Message {
	var om oaMessage
	if err := json.Unmarshal(raw, &om); err != nil {
		return &Message{}
	}
	m := &Message{}
	switch om.Role {
	case "system", "developer":
		m.Role = RoleSystem
	case "user":
		m.Role = RoleUser
	case "assistant":
		m.Role = RoleAssistant
	case "tool":
		m.Role = RoleTool
	default:
		return m // opaque (e.g. the deprecated "function" role)
	}
	content := openaiContent(om.Content)
	if m.Role == RoleTool {
		res := Block{Type: BlockToolResult, CallID: om.ToolCallID, Content: content}
		markSynthetic(&res)
		m.Blocks = []Block{res}
		m.Synthetic = res.Synthetic
		return m
	}
	m.Blocks = content
	for _, raw := range om.ToolCalls {
		var tc oaToolCall
		_ = json.Unmarshal(raw, &tc)
		b := Block{Type: BlockToolCall, ID: tc.ID, raw: raw}
		switch {
		case tc.Function != nil:
			b.Name = tc.Function.Name
			b.Input = argumentsInput(tc.Function.Arguments)
		case tc.Custom != nil:
			b.Name = tc.Custom.Name
			b.Input = argumentsInput(tc.Custom.Input)
		}
		m.Blocks = append(m.Blocks, b)
	}
	return m
}

// argumentsInput turns OpenAI's arguments (a JSON string, as sent) into a
// tool call input: the JSON it holds when valid, else the string itself.
func argumentsInput(a json.RawMessage) json.RawMessage {
	if isNullish(a) {
		return nil
	}
	if a[0] != '"' {
		return a
	}
	s, ok := jsonString(a)
	if ok && strings.TrimSpace(s) != "" && json.Valid([]byte(s)) {
		return json.RawMessage(s)
	}
	return a
}

// inputArguments is the reverse of argumentsInput.
func inputArguments(in json.RawMessage) []byte {
	if len(in) > 0 && in[0] == '"' {
		return in
	}
	return mustJSON(string(in))
}

func openaiContent(c json.RawMessage) []Block {
	return contentBlocks(c, func(raw json.RawMessage) Block {
		var p oaPart
		_ = json.Unmarshal(raw, &p)
		b := Block{Type: BlockType(p.Type), raw: raw}
		switch p.Type {
		case "text":
			b.Type, b.Text = BlockText, p.Text
		case "refusal":
			b.Type, b.Text = BlockText, p.Refusal
		case "image_url":
			b.Type = BlockImage
			if p.ImageURL != nil {
				b.URL = p.ImageURL.URL
			}
		case "file":
			b.Type = BlockFile
			if p.File != nil {
				b.URL, b.Data, b.Filename = p.File.FileID, p.File.FileData, p.File.Filename
			}
		}
		return b
	})
}

// markSynthetic recognises a result that belay's repair made up.
func markSynthetic(b *Block) {
	for _, c := range b.Content {
		if c.Type == BlockText && strings.HasPrefix(c.Text, "[belay] missing tool result") {
			b.Synthetic, b.IsError = true, true
		}
	}
}

func (openaiCodec) render(d *Document, items []*Message) []outEntry {
	out := make([]outEntry, 0, len(items))
	for _, m := range items {
		if m.opaque() || m.unchanged() {
			if m.src != nil {
				out = append(out, outEntry{src: m.src, raw: m.src.raw})
			}
			continue
		}
		var base []byte
		if m.src != nil {
			base = m.src.raw
		}
		out = append(out, outEntry{src: m.src, raw: encodeOpenAI(m, base)})
	}
	return out
}

func encodeOpenAI(m *Message, base []byte) []byte {
	if base == nil {
		role := string(m.Role)
		base = []byte(`{"role":` + string(mustJSON(role)) + `}`)
	}
	if m.Role == RoleTool {
		res, _ := m.Result()
		base = setField(base, "tool_call_id", mustJSON(res.CallID))
		return setField(base, "content", mustJSON(textOf(res.Content)))
	}
	var parts [][]byte
	var calls [][]byte
	texts := 0
	for i := range m.Blocks {
		b := &m.Blocks[i]
		if b.Type == BlockToolCall {
			if raw := b.keptRaw(); raw != nil {
				calls = append(calls, raw)
				continue
			}
			calls = append(calls, []byte(`{"id":`+string(mustJSON(b.ID))+`,"type":"function","function":{"name":`+string(mustJSON(b.Name))+`,"arguments":`+string(inputArguments(b.Input))+`}}`))
			continue
		}
		if raw := b.keptRaw(); raw != nil {
			parts = append(parts, raw)
			continue
		}
		switch b.Type {
		case BlockText, BlockThinking:
			if b.Type == BlockThinking {
				continue // Chat Completions has no place for reasoning
			}
			texts++
			parts = append(parts, mustJSON(map[string]string{"type": "text", "text": b.Text}))
		case BlockImage:
			parts = append(parts, mustJSON(map[string]any{"type": "image_url", "image_url": map[string]string{"url": imageURL(b)}}))
		case BlockFile:
			parts = append(parts, mustJSON(map[string]any{"type": "file", "file": map[string]string{"file_id": b.URL, "file_data": b.Data, "filename": b.Filename}}))
		}
	}
	orig, _ := getField(base, "content")
	wasArray := len(orig) > 0 && orig[0] == '['
	switch {
	case len(parts) == 0 && len(calls) > 0:
		base = setField(base, "content", []byte("null"))
	case len(parts) == 1 && texts == 1 && !wasArray:
		base = setField(base, "content", mustJSON(m.Text()))
	case len(parts) == 0:
		base = setField(base, "content", []byte(`""`))
	default:
		base = setField(base, "content", joinArray(parts))
	}
	if len(calls) > 0 {
		base = setField(base, "tool_calls", joinArray(calls))
	} else {
		base = delField(base, "tool_calls")
	}
	return base
}

func imageURL(b *Block) string {
	if b.URL != "" || b.Data == "" {
		return b.URL
	}
	return "data:" + b.MediaType + ";base64," + b.Data
}

func textOf(bs []Block) string {
	var sb strings.Builder
	for _, b := range bs {
		if b.Type == BlockText {
			sb.WriteString(b.Text)
		}
	}
	return sb.String()
}

func joinArray(elems [][]byte) []byte {
	out := []byte{'['}
	for i, e := range elems {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, e...)
	}
	return append(out, ']')
}
