package transcript

import (
	"encoding/json"
	"hash/fnv"
	"strings"
	"time"
)

// Role is who a message is from.
type Role string

// Roles.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	// RoleTool messages carry exactly one tool_result block.
	RoleTool Role = "tool"
)

// BlockType is the kind of a content block.
type BlockType string

// Block types.
const (
	BlockText       BlockType = "text"
	BlockThinking   BlockType = "thinking"
	BlockToolCall   BlockType = "tool_call"
	BlockToolResult BlockType = "tool_result"
	BlockImage      BlockType = "image"
	BlockFile       BlockType = "file"
)

// Block is one piece of a message's content.
type Block struct {
	Type BlockType `json:"type"`
	// Text of a text or thinking block.
	Text string `json:"text,omitempty"`
	// Signature is a thinking block's opaque provider signature; for a
	// redacted thinking block it holds the opaque payload.
	Signature string `json:"signature,omitempty"`
	Redacted  bool   `json:"redacted,omitempty"`

	// ID, Name and Input of a tool_call. Input is the call's arguments as
	// JSON (an object, or a JSON string when a provider sent arguments that
	// are not valid JSON); nil means the call has no input at all.
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`

	// CallID, Content and IsError of a tool_result. Content holds text and
	// image blocks.
	CallID  string  `json:"call_id,omitempty"`
	Content []Block `json:"content,omitempty"`
	IsError bool    `json:"is_error,omitempty"`

	// MediaType, URL and Data of an image or file reference: a URL (or a
	// provider file id), or inline base64 Data.
	MediaType string `json:"media_type,omitempty"`
	URL       string `json:"url,omitempty"`
	Data      string `json:"data,omitempty"`
	Filename  string `json:"filename,omitempty"`

	// Synthetic marks a block belay made up (a missing tool result).
	Synthetic bool `json:"synthetic,omitempty"`

	raw json.RawMessage // the block as read, in its document's format
	fp  uint64          // fingerprint of the block as read
}

// Usage counts tokens.
type Usage struct {
	Input      int `json:"input,omitempty"`
	Output     int `json:"output,omitempty"`
	CacheRead  int `json:"cache_read,omitempty"`
	CacheWrite int `json:"cache_write,omitempty"`
}

// Meta is per-message metadata.
type Meta struct {
	// StopReason as the source recorded it (end_turn, tool_use, stop,
	// toolUse, error, aborted, ...).
	StopReason string `json:"stop_reason,omitempty"`
	Model      string `json:"model,omitempty"`
	Provider   string `json:"provider,omitempty"`
	Usage      *Usage `json:"usage,omitempty"`
	// Time the message was written.
	Time time.Time `json:"time,omitzero"`
	// ID is the source's id for the entry holding the message (a pi entry
	// id, a Claude Code uuid, a belay run id).
	ID string `json:"id,omitempty"`
	// ResponseID groups the parts of one provider response that a format
	// stores as separate entries (Claude Code writes one line per block).
	ResponseID string `json:"response_id,omitempty"`
}

// Message is one message of a conversation.
type Message struct {
	Role   Role    `json:"role"`
	Blocks []Block `json:"blocks"`
	Meta   Meta    `json:"meta,omitzero"`
	// Synthetic marks a message belay made up.
	Synthetic bool `json:"synthetic,omitempty"`

	src  *entry // the entry this message was read from
	part int    // which of the entry's messages this is
	fp   uint64 // fingerprint as read: unchanged messages are written back as read
}

// opaque reports whether m stands for a document entry that is not a
// conversation message (a pi model_change, a Claude Code system line): it
// is kept in place and written back as it was.
func (m *Message) opaque() bool { return m.Role == "" }

// Text returns the concatenated text blocks of m.
func (m *Message) Text() string {
	var b strings.Builder
	for _, bl := range m.Blocks {
		if bl.Type == BlockText {
			b.WriteString(bl.Text)
		}
	}
	return b.String()
}

// ToolCalls returns m's tool_call blocks.
func (m *Message) ToolCalls() []Block {
	var out []Block
	for _, b := range m.Blocks {
		if b.Type == BlockToolCall {
			out = append(out, b)
		}
	}
	return out
}

// Result returns the tool_result block of a tool message.
func (m *Message) Result() (Block, bool) {
	for _, b := range m.Blocks {
		if b.Type == BlockToolResult {
			return b, true
		}
	}
	return Block{}, false
}

// Errored reports whether m is an assistant turn that ended in an error or
// was aborted: repair leaves such turns alone and makes up no results for
// their calls.
func (m *Message) Errored() bool {
	if m.Role != RoleAssistant {
		return false
	}
	switch strings.ToLower(m.Meta.StopReason) {
	case "error", "aborted", "cancelled", "canceled":
		return true
	}
	return false
}

func fingerprint(v any) uint64 {
	b, err := json.Marshal(v)
	if err != nil {
		return 0
	}
	h := fnv.New64a()
	_, _ = h.Write(b)
	return h.Sum64() | 1 // never 0: 0 means "not read from a document"
}

// seal records m (and its blocks) as read from part of src, so that a
// writer can tell an unchanged message and write it back byte for byte. A
// region of a dry run is never written: it skips the fingerprints.
func (d *Document) seal(m *Message, src *entry, part int) {
	m.src, m.part = src, part
	if d.region != nil && d.region.dryRun {
		return
	}
	for i := range m.Blocks {
		m.Blocks[i].fp = fingerprint(&m.Blocks[i])
	}
	m.fp = fingerprint(m)
}

// unchanged reports whether m is as it was read from src.
func (m *Message) unchanged() bool {
	return m.src != nil && m.fp != 0 && fingerprint(m) == m.fp
}

// keptRaw returns b's bytes as read when b is unchanged.
func (b *Block) keptRaw() json.RawMessage {
	if b.raw != nil && b.fp != 0 && fingerprint(b) == b.fp {
		return b.raw
	}
	return nil
}

// cloneMessages deep-copies the block slices so that repair never changes
// a caller's messages.
func cloneMessages(msgs []Message) []Message {
	out := make([]Message, len(msgs))
	for i, m := range msgs {
		out[i] = m
		out[i].Blocks = append([]Block(nil), m.Blocks...)
	}
	return out
}

// inputMissing reports whether a tool call's input is absent: no bytes or
// JSON null. An empty object is valid input.
func inputMissing(in json.RawMessage) bool {
	s := strings.TrimSpace(string(in))
	return s == "" || s == "null"
}

// contentBlocks reads a message's content as the formats write it: absent,
// a plain string (one text block), or an array of blocks, each decoded by
// block.
func contentBlocks(c json.RawMessage, block func(raw json.RawMessage) Block) []Block {
	if isNullish(c) {
		return nil
	}
	if c[0] == '"' {
		s, _ := jsonString(c)
		return []Block{{Type: BlockText, Text: s}}
	}
	// What json.Unmarshal into []json.RawMessage takes, split with the
	// package's own scanner (a block's bytes are decoded once, by block).
	if i := skipSpace(c, 0); i >= len(c) || c[i] != '[' || !validJSON(c) {
		return nil
	}
	elems := arrayElems(c)
	out := make([]Block, 0, len(elems))
	for _, e := range elems {
		out = append(out, block(json.RawMessage(c[e[0]:e[1]:e[1]])))
	}
	return out
}
