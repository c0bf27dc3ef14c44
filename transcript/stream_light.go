package transcript

import (
	"bytes"
	"hash/maphash"
	"strings"
)

// lightLine is what the check pass reads of a path line: only what
// message-level repair looks at (roles, stop reasons, response ids, tool
// call ids and whether calls have input, result ids, and whether user text
// is blank), as raw JSON values in the line, decoding nothing else. It is
// reused from line to line, so reading a line allocates nothing.
type lightLine struct {
	typ, role, stop, callID, respID []byte
	apiError                        bool
	blocks                          []lightBlock
}

// lightBlock is one content block of a lightLine.
type lightBlock struct {
	obj            bool   // an object (else the block is nothing repair knows)
	typ            []byte // raw "type"
	id, name, text []byte // raw "id", "name", "text"
	useID          []byte // raw "tool_use_id"
	hasInput       bool   // a non-null "input"
	hasArgs        bool   // a non-null "arguments"
}

// input reports whether a tool call block has input: "input", or in pi
// "arguments", present and not null.
func (lb *lightBlock) input(f Format) bool {
	return lb.hasInput || f == FormatPi && lb.hasArgs
}

// read reads a line of format f, which is valid JSON (the scan checked it).
func (ll *lightLine) read(f Format, line []byte) {
	*ll = lightLine{blocks: ll.blocks[:0]}
	walkObject(line, 0, func(key []byte, v int) int {
		switch string(key) {
		case "type":
			e := skipValue(line, v)
			ll.typ = line[v:e]
			return e
		case "isApiErrorMessage":
			ll.apiError = line[v] == 't'
		case "message":
			return walkObject(line, v, func(key []byte, v int) int {
				if string(key) == "content" {
					// The last content wins, as in encoding/json.
					var e int
					ll.blocks, e = lightBlocks(line, v, ll.blocks[:0])
					return e
				}
				e := skipValue(line, v)
				switch string(key) {
				case "role":
					ll.role = line[v:e]
				case "stopReason":
					if f == FormatPi {
						ll.stop = line[v:e]
					}
				case "stop_reason":
					if f == FormatClaude {
						ll.stop = line[v:e]
					}
				case "toolCallId":
					ll.callID = line[v:e]
				case "id":
					ll.respID = line[v:e]
				}
				return e
			})
		}
		return skipValue(line, v)
	})
}

// lightKeys are where keyCheck records the values readChecked takes, as
// indexes of a format's key sets (-1: the format does not use it).
type lightKeys struct {
	typ, role, content, stop, callID, respID int
}

var (
	piLight = lightKeys{typ: piLineKeys.at("type"), role: piMsgKeys.at("role"), content: piMsgKeys.at("content"),
		stop: piMsgKeys.at("stopReason"), callID: piMsgKeys.at("toolCallId"), respID: -1}
	ccLight = lightKeys{typ: ccLineKeys.at("type"), role: ccMsgKeys.at("role"), content: ccMsgKeys.at("content"),
		stop: ccMsgKeys.at("stop_reason"), callID: -1, respID: ccMsgKeys.at("id")}
)

// readChecked is read on a line the scan has just checked with k: the
// values it needs are where k found them, so that only the content is
// walked again. A line with ambiguous keys (k.bad: which value of a key
// counts is then a question) is read in full by read.
func (ll *lightLine) readChecked(f Format, line []byte, k *keyCheck) {
	if k.bad {
		ll.read(f, line)
		return
	}
	*ll = lightLine{blocks: ll.blocks[:0]}
	lk := piLight
	if f != FormatPi {
		lk = ccLight
		ll.apiError = k.apiErrorAt != 0 && line[k.apiErrorAt-1] == 't'
	}
	sub := func(i int) []byte {
		if i < 0 {
			return nil
		}
		return value(line, k.subAt[i])
	}
	ll.typ = value(line, k.topAt[lk.typ])
	ll.role, ll.stop, ll.callID, ll.respID = sub(lk.role), sub(lk.stop), sub(lk.callID), sub(lk.respID)
	if at := k.subAt[lk.content]; at != 0 {
		ll.blocks, _ = lightBlocks(line, at-1, ll.blocks[:0])
	}
}

// user reports whether the line's text blocks are user text (whose
// blankness matters).
func (ll *lightLine) user(f Format) bool {
	return string(ll.typ) == `"user"` || f == FormatPi && string(ll.role) == `"user"`
}

// lightMessages reads the messages of a path line as the codecs do, but
// only what message-level repair looks at (lightLine).
func lightMessages(f Format, line []byte) []*Message {
	var ll lightLine
	ll.read(f, line)
	str := func(v []byte) string { s, _ := jsonString(v); return s }
	blocks := make([]Block, 0, len(ll.blocks))
	for _, lb := range ll.blocks {
		blocks = append(blocks, lb.block(f, ll.user(f)))
	}
	if f == FormatPi {
		if string(ll.typ) != `"message"` {
			return []*Message{{}}
		}
		switch string(ll.role) {
		case `"user"`:
			return []*Message{{Role: RoleUser, Blocks: blocks}}
		case `"assistant"`:
			return []*Message{{Role: RoleAssistant, Blocks: blocks, Meta: Meta{StopReason: str(ll.stop)}}}
		case `"toolResult"`:
			return []*Message{{Role: RoleTool, Blocks: []Block{{Type: BlockToolResult, CallID: str(ll.callID)}}}}
		}
		return []*Message{{}}
	}
	switch string(ll.typ) {
	case `"user"`:
		return splitUser(blocks, Meta{})
	case `"assistant"`:
		meta := Meta{ResponseID: str(ll.respID), StopReason: str(ll.stop)}
		if meta.StopReason == "" && ll.apiError {
			meta.StopReason = "error"
		}
		return []*Message{{Role: RoleAssistant, Blocks: blocks, Meta: meta}}
	}
	return []*Message{{}}
}

// lightPart is a message of a path line as simpleClean and the frame
// reader see it, with ids as hashes: enough to find frames and to tell a
// frame in the shape repair leaves alone, without a Message. A frame that
// is not is read again as Messages (lightMessages).
type lightPart struct {
	role      Role
	errored   bool   // Errored()
	blank     bool   // blank(): a user message with no text but blanks
	malformed bool   // allCallsMalformed()
	result    bool   // a tool message with its result block
	resultID  uint64 // hash of the result's call id
	resp      uint64 // hash of an assistant's response id
	hasResp   bool   // the response id is not ""
	over      bool   // more calls than calls holds: read the Messages
	ncalls    int
	calls     [4]lightCall
}

// lightCall is a tool call of a lightPart.
type lightCall struct {
	id  uint64 // hash of the id
	bad bool   // no input, or a blank id: repair drops it
}

// idSum hashes a raw JSON value as its decoded string (jsonString: a
// value that is not a string is ""), and reports whether that string is
// blank.
func idSum(seed maphash.Seed, v []byte) (uint64, bool) {
	var b []byte
	if len(v) >= 2 && v[0] == '"' {
		b = v[1 : len(v)-1]
		if bytes.IndexByte(b, '\\') >= 0 {
			s, _ := jsonString(v)
			b = []byte(s)
		}
	}
	return maphash.Bytes(seed, b), len(bytes.TrimSpace(b)) == 0
}

// parts appends the lightParts of the line (as many as lightMessages
// returns messages, in the same order) to out.
func (ll *lightLine) parts(f Format, seed maphash.Seed, out []lightPart) []lightPart {
	user := ll.user(f)
	if f == FormatPi {
		if string(ll.typ) != `"message"` {
			return append(out, lightPart{})
		}
		switch string(ll.role) {
		case `"user"`:
			p := lightPart{role: RoleUser}
			p.blank = ll.blankRun(f, user, ll.blocks)
			return append(out, p)
		case `"assistant"`:
			stop, _ := jsonString(ll.stop)
			return append(out, ll.assistant(f, seed, stop))
		case `"toolResult"`:
			p := lightPart{role: RoleTool, result: true}
			p.resultID, _ = idSum(seed, ll.callID)
			return append(out, p)
		}
		return append(out, lightPart{})
	}
	switch string(ll.typ) {
	case `"user"`:
		// As splitUser: each result a tool message, each run of other
		// blocks a user message.
		n := len(out)
		run := -1
		for i, lb := range ll.blocks {
			if lb.kind(f) == BlockToolResult {
				if run >= 0 {
					out[len(out)-1].blank = ll.blankRun(f, user, ll.blocks[run:i])
					run = -1
				}
				p := lightPart{role: RoleTool, result: true}
				p.resultID, _ = idSum(seed, lb.useID)
				out = append(out, p)
				continue
			}
			if run < 0 {
				run = i
				out = append(out, lightPart{role: RoleUser})
			}
		}
		if run >= 0 {
			out[len(out)-1].blank = ll.blankRun(f, user, ll.blocks[run:])
		}
		if len(out) == n {
			out = append(out, lightPart{role: RoleUser, blank: true})
		}
		return out
	case `"assistant"`:
		stop, _ := jsonString(ll.stop)
		if stop == "" && ll.apiError {
			stop = "error"
		}
		p := ll.assistant(f, seed, stop)
		if s, _ := jsonString(ll.respID); s != "" {
			p.resp, _ = idSum(seed, ll.respID)
			p.hasResp = true
		}
		return append(out, p)
	}
	return append(out, lightPart{})
}

// assistant is the lightPart of an assistant message.
func (ll *lightLine) assistant(f Format, seed maphash.Seed, stop string) lightPart {
	p := lightPart{role: RoleAssistant}
	switch strings.ToLower(stop) {
	case "error", "aborted", "cancelled", "canceled":
		p.errored = true
	}
	allBad := len(ll.blocks) > 0
	for _, lb := range ll.blocks {
		if lb.kind(f) != BlockToolCall {
			allBad = false
			continue
		}
		h, blankID := idSum(seed, lb.id)
		c := lightCall{id: h, bad: !lb.input(f) || blankID}
		if !c.bad {
			allBad = false
		}
		if p.ncalls < len(p.calls) {
			p.calls[p.ncalls] = c
		} else {
			p.over = true
		}
		p.ncalls++
	}
	p.malformed = allBad && !p.errored
	return p
}

// blankRun reports whether blank() holds for a user message of these
// blocks: every block a text block of only blanks.
func (ll *lightLine) blankRun(f Format, user bool, blocks []lightBlock) bool {
	for _, lb := range blocks {
		if lb.kind(f) != BlockText || !lb.blankText(user) {
			return false
		}
	}
	return true
}

// kind is the block's type as lightMessages gives it, for the types
// repair tells apart ("" for any other).
func (lb *lightBlock) kind(f Format) BlockType {
	if !lb.obj {
		return ""
	}
	switch string(lb.typ) {
	case `"text"`:
		return BlockText
	case `"tool_use"`:
		return BlockToolCall
	case `"toolCall"`, `"toolUse"`, `"functionCall"`, `"tool_call"`, `"function_call"`:
		if f != FormatClaude {
			return BlockToolCall
		}
	case `"tool_result"`:
		return BlockToolResult
	}
	if bytes.IndexByte(lb.typ, '\\') >= 0 {
		return lb.block(f, false).Type
	}
	return ""
}

// blankText reports whether a text block's text is blank (only asked of
// user text; other text counts as not blank).
func (lb *lightBlock) blankText(user bool) bool {
	if !user {
		return false
	}
	if len(lb.text) >= 2 && lb.text[0] == '"' && bytes.IndexByte(lb.text, '\\') < 0 {
		return len(bytes.TrimSpace(lb.text[1:len(lb.text)-1])) == 0
	}
	s, _ := jsonString(lb.text)
	return strings.TrimSpace(s) == ""
}

// block is the Block lightMessages gives for lb. With user, text blocks
// say whether they are blank.
func (lb *lightBlock) block(f Format, user bool) Block {
	if !lb.obj {
		return Block{}
	}
	ts, _ := jsonString(lb.typ)
	b := Block{Type: BlockType(ts)}
	switch ts {
	case "text":
		b.Type, b.Text = BlockText, "x"
		if lb.blankText(user) {
			b.Text = ""
		}
	case "thinking", "redacted_thinking":
		b.Type = BlockThinking
	case "image":
		b.Type = BlockImage
	case "document":
		b.Type = BlockFile
	case "toolCall", "toolUse", "functionCall", "tool_use", "tool_call", "function_call":
		if f == FormatClaude && ts != "tool_use" {
			break
		}
		b.Type = BlockToolCall
		b.ID, _ = jsonString(lb.id)
		b.Name, _ = jsonString(lb.name)
		if lb.input(f) {
			b.Input = []byte("{}")
		}
	case "tool_result":
		b.Type = BlockToolResult
		b.CallID, _ = jsonString(lb.useID)
	}
	return b
}

// walkObject calls fn for each member of the object that starts at b[i]
// with the key and where its value starts; fn returns where the value
// ends. It returns the index after the object. b must be valid JSON.
func walkObject(b []byte, i int, fn func(key []byte, v int) int) int {
	i = skipSpace(b, i)
	if i >= len(b) || b[i] != '{' {
		return skipValue(b, i)
	}
	i = skipSpace(b, i+1)
	for i < len(b) && b[i] == '"' {
		ks := i + 1
		i = skipString(b, i)
		if i-1 < ks {
			return len(b)
		}
		key := b[ks : i-1]
		i = skipSpace(b, i)
		if i >= len(b) || b[i] != ':' {
			return len(b)
		}
		i = skipSpace(b, fn(key, skipSpace(b, i+1)))
		if i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
		}
	}
	if i < len(b) && b[i] == '}' {
		i++
	}
	return i
}

// lightBlocks reads the content value at b[i] (a string or an array of
// blocks, of any of the block shapes pi, Claude Code and Anthropic use)
// into out, and returns where the value ends.
func lightBlocks(b []byte, i int, out []lightBlock) ([]lightBlock, int) {
	if i >= len(b) {
		return out, i
	}
	switch b[i] {
	case '"':
		e := skipString(b, i)
		return append(out, lightBlock{obj: true, typ: []byte(`"text"`), text: b[i:e]}), e
	case '[':
	default:
		return out, skipValue(b, i)
	}
	i = skipSpace(b, i+1)
	for i < len(b) && b[i] != ']' {
		lb := lightBlock{obj: b[i] == '{'}
		i = walkObject(b, i, func(key []byte, v int) int {
			e := skipValue(b, v)
			switch string(key) {
			case "type":
				lb.typ = b[v:e]
			case "id":
				lb.id = b[v:e]
			case "name":
				lb.name = b[v:e]
			case "text":
				lb.text = b[v:e]
			case "tool_use_id":
				lb.useID = b[v:e]
			case "input":
				lb.hasInput = lb.hasInput || !isNullish(b[v:e])
			case "arguments":
				lb.hasArgs = lb.hasArgs || !isNullish(b[v:e])
			}
			return e
		})
		i = skipSpace(b, i)
		if i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
		}
		out = append(out, lb)
	}
	if i < len(b) {
		i++ // ]
	}
	return out, i
}
