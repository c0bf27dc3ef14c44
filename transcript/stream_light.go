package transcript

import (
	"strings"
)

// lightMessages reads the messages of a path line as the codecs do, but
// only what message-level repair looks at: roles, stop reasons, response
// ids, tool call ids, names and whether they have input, result ids, and
// whether user text is blank. It reads the line once, decoding nothing
// else. The line is valid JSON (the scan checked it).
func lightMessages(f Format, line []byte) []*Message {
	var typ []byte
	var role, stop, callID, respID []byte
	var blocks []Block
	var content []byte
	apiError := false
	walkObject(line, 0, func(key []byte, v int) int {
		switch string(key) {
		case "type":
			e := skipValue(line, v)
			typ = line[v:e]
			return e
		case "isApiErrorMessage":
			apiError = line[v] == 't'
		case "message":
			return walkObject(line, v, func(key []byte, v int) int {
				switch string(key) {
				case "role":
					e := skipValue(line, v)
					role = line[v:e]
					return e
				case "content":
					e := skipValue(line, v)
					content = line[v:e]
					return e
				case "stopReason":
					if f == FormatPi {
						e := skipValue(line, v)
						stop = line[v:e]
						return e
					}
				case "stop_reason":
					if f == FormatClaude {
						e := skipValue(line, v)
						stop = line[v:e]
						return e
					}
				case "toolCallId":
					e := skipValue(line, v)
					callID = line[v:e]
					return e
				case "id":
					e := skipValue(line, v)
					respID = line[v:e]
					return e
				}
				return skipValue(line, v)
			})
		}
		return skipValue(line, v)
	})
	str := func(v []byte) string { s, _ := jsonString(v); return s }
	user := string(typ) == `"user"` || f == FormatPi && string(role) == `"user"`
	blocks = lightBlocks(f, content, user)
	if f == FormatPi {
		if string(typ) != `"message"` {
			return []*Message{{}}
		}
		switch string(role) {
		case `"user"`:
			return []*Message{{Role: RoleUser, Blocks: blocks}}
		case `"assistant"`:
			return []*Message{{Role: RoleAssistant, Blocks: blocks, Meta: Meta{StopReason: str(stop)}}}
		case `"toolResult"`:
			return []*Message{{Role: RoleTool, Blocks: []Block{{Type: BlockToolResult, CallID: str(callID)}}}}
		}
		return []*Message{{}}
	}
	switch string(typ) {
	case `"user"`:
		return splitUser(blocks, Meta{})
	case `"assistant"`:
		meta := Meta{ResponseID: str(respID), StopReason: str(stop)}
		if meta.StopReason == "" && apiError {
			meta.StopReason = "error"
		}
		return []*Message{{Role: RoleAssistant, Blocks: blocks, Meta: meta}}
	}
	return []*Message{{}}
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

// lightBlocks reads content (a string or an array of blocks) of any of the
// block shapes pi, Claude Code and Anthropic use. With text, text blocks
// say whether they are blank.
func lightBlocks(f Format, c []byte, text bool) []Block {
	if isNullish(c) {
		return nil
	}
	blank := func(v []byte) string {
		if !text {
			return "x"
		}
		s, _ := jsonString(v)
		if strings.TrimSpace(s) == "" {
			return ""
		}
		return "x"
	}
	if c[0] == '"' {
		return []Block{{Type: BlockText, Text: blank(c)}}
	}
	if c[0] != '[' {
		return nil
	}
	var out []Block
	i := skipSpace(c, 1)
	for i < len(c) && c[i] != ']' {
		var t, id, name, textV, useID []byte
		hasInput := false
		isObj := c[i] == '{'
		i = walkObject(c, i, func(key []byte, v int) int {
			e := skipValue(c, v)
			switch string(key) {
			case "type":
				t = c[v:e]
			case "id":
				id = c[v:e]
			case "name":
				name = c[v:e]
			case "text":
				textV = c[v:e]
			case "tool_use_id":
				useID = c[v:e]
			case "input":
				hasInput = hasInput || !isNullish(c[v:e])
			case "arguments":
				hasInput = hasInput || f == FormatPi && !isNullish(c[v:e])
			}
			return e
		})
		i = skipSpace(c, i)
		if i < len(c) && c[i] == ',' {
			i = skipSpace(c, i+1)
		}
		if !isObj {
			out = append(out, Block{})
			continue
		}
		ts, _ := jsonString(t)
		b := Block{Type: BlockType(ts)}
		switch ts {
		case "text":
			b.Type, b.Text = BlockText, blank(textV)
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
			b.ID, _ = jsonString(id)
			b.Name, _ = jsonString(name)
			if hasInput {
				b.Input = []byte("{}")
			}
		case "tool_result":
			b.Type = BlockToolResult
			b.CallID, _ = jsonString(useID)
		}
		out = append(out, b)
	}
	return out
}
