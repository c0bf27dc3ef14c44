package transcript

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"time"
)

// claudeCodec reads and writes Claude Code sessions. Lines of types it does
// not know are kept untouched.
type claudeCodec struct{}

func (claudeCodec) hasHeader() bool            { return false }
func (claudeCodec) checkHeader(_ []byte) error { return nil }

func (claudeCodec) checkLine(line []byte) string {
	why, _ := claudeCheck(line)
	return why
}

// claudeCheck is checkLine that also returns where the line's keys are.
func claudeCheck(line []byte) (string, *keyCheck) {
	k := &keyCheck{top: ccLineKeys, sub: ccMsgKeys, subOf: "message"}
	return claudeCheckKeys(line, k), k
}

func claudeCheckKeys(line []byte, k *keyCheck) string {
	if why := k.check(line); why != "" {
		return why
	}
	typ, ok := strBytes(line, k.topAt[0])
	if !ok || len(typ) == 0 {
		return `line has no "type"`
	}
	if string(typ) == "user" || string(typ) == "assistant" {
		if !object(line, k.topAt[4]) {
			return string(typ) + ` line has no "message" object`
		}
		if k.bad {
			return ambiguous
		}
	}
	return ""
}

type claudeMessage struct {
	ID         string          `json:"id"`
	Role       string          `json:"role"`
	Model      string          `json:"model"`
	Content    json.RawMessage `json:"content"`
	StopReason *string         `json:"stop_reason"`
	Usage      *struct {
		Input      int `json:"input_tokens"`
		Output     int `json:"output_tokens"`
		CacheRead  int `json:"cache_read_input_tokens"`
		CacheWrite int `json:"cache_creation_input_tokens"`
	} `json:"usage"`
}

func (claudeCodec) build(d *Document) error {
	d.tree, d.parentK = true, "parentUuid"
	var body []*entry
	anyMain := false
	for _, e := range d.entries {
		if e.blank {
			continue
		}
		body = append(body, e)
		e.id, _ = getString(e.raw, "uuid")
		e.parent, _ = getString(e.raw, "parentUuid")
		if e.id != "" && conversational(e) && !sidechain(e) {
			anyMain = true
		}
	}
	body = d.dropDuplicates(body)
	path := d.linkTree(body, treeSpec{
		idKey: "uuid", parentKey: "parentUuid",
		leaf: func(e *entry) bool {
			return e.id != "" && conversational(e) && (!anyMain || !sidechain(e))
		},
		// Not a result line that hangs on its call's line beside the
		// chain (its parent has other children): the chain goes on
		// elsewhere.
		near: func(child, c *entry, kids map[string]int) bool {
			return conversational(c) && sidechain(c) == sidechain(child) && !(isResultLine(c) && kids[c.parent] > 1)
		},
	})
	for _, e := range path {
		e.path = true
	}
	// Claude Code writes the result of each call of a turn on a line whose
	// parent is the line holding that call, so with several calls the
	// results hang on different branches and only the last is on the path
	// from the leaf. Pair them by id across the tree: a result line off
	// the path, on a path line holding its call, belongs to the
	// conversation right after that line, unless the path itself goes on
	// from that line through a result line (then the others are abandoned
	// branches).
	resultChild := map[string]bool{} // path lines with a result line as path child
	for _, e := range path {
		if e.link != "" && isResultLine(e) {
			resultChild[e.link] = true
		}
	}
	children := map[string][]*entry{}
	for _, e := range body {
		if !e.path && e.id != "" && e.link != "" {
			children[e.link] = append(children[e.link], e)
		}
	}
	add := func(e *entry, msgs []*Message) {
		e.parts = len(msgs)
		for i, m := range msgs {
			d.seal(m, e, i)
			d.items = append(d.items, m)
		}
	}
	for _, e := range path {
		msgs := claudeEntryMessages(e)
		add(e, msgs)
		if len(msgs) != 1 || msgs[0].Role != RoleAssistant || len(children[e.id]) == 0 || resultChild[e.id] {
			continue
		}
		calls := map[string]bool{}
		for _, b := range msgs[0].ToolCalls() {
			calls[b.ID] = true
		}
		for _, c := range children[e.id] {
			if sidechain(c) != sidechain(e) {
				continue
			}
			if rs := resultLine(c, calls); rs != nil {
				c.path, c.branch = true, true
				add(c, rs)
			}
		}
	}
	return nil
}

// resultLine returns the messages of a user line that holds only results
// of the given calls, or nil.
func resultLine(e *entry, calls map[string]bool) []*Message {
	if !isResultLine(e) {
		return nil
	}
	msgs := claudeEntryMessages(e)
	for _, m := range msgs {
		if b, ok := resultOf(m); !ok || !calls[b.CallID] {
			return nil
		}
	}
	return msgs
}

// isResultLine reports whether e is a user line whose content is a
// non-empty array of tool_result blocks only.
func isResultLine(e *entry) bool {
	typ, _ := getString(e.raw, "type")
	if typ != "user" {
		return false
	}
	msg, _ := getField(e.raw, "message")
	c, _ := getField(msg, "content")
	return resultBlocksOnly(c)
}

// resultBlocksOnly reports whether content c is a non-empty array whose
// elements are all objects of type tool_result.
func resultBlocksOnly(c []byte) bool {
	if len(c) == 0 || c[0] != '[' {
		return false
	}
	spans := arrayElems(c)
	if len(spans) == 0 {
		return false
	}
	for _, sp := range spans {
		if t, _ := getString(c[sp[0]:sp[1]], "type"); t != "tool_result" {
			return false
		}
	}
	return true
}

func conversational(e *entry) bool {
	typ, _ := getString(e.raw, "type")
	switch typ {
	case "user", "assistant", "system", "attachment":
		return true
	}
	return false
}

func sidechain(e *entry) bool {
	v, _ := getField(e.raw, "isSidechain")
	return string(v) == "true"
}

func claudeEntryMessages(e *entry) []*Message {
	typ, _ := getString(e.raw, "type")
	if typ != "user" && typ != "assistant" {
		return []*Message{{}}
	}
	raw, _ := getField(e.raw, "message")
	var cm claudeMessage
	if json.Unmarshal(raw, &cm) != nil {
		return []*Message{{}}
	}
	meta := Meta{ID: e.id, Model: cm.Model}
	if ts, ok := getString(e.raw, "timestamp"); ok {
		meta.Time, _ = time.Parse(time.RFC3339Nano, ts)
	}
	blocks := anthropicBlocks(cm.Content)
	if typ == "user" {
		return splitUser(blocks, meta)
	}
	meta.ResponseID = cm.ID
	if cm.StopReason != nil {
		meta.StopReason = *cm.StopReason
	}
	if v, _ := getField(e.raw, "isApiErrorMessage"); string(v) == "true" && meta.StopReason == "" {
		meta.StopReason = "error"
	}
	if u := cm.Usage; u != nil {
		meta.Usage = &Usage{Input: u.Input, Output: u.Output, CacheRead: u.CacheRead, CacheWrite: u.CacheWrite}
	}
	return []*Message{{Role: RoleAssistant, Blocks: blocks, Meta: meta}}
}

func (claudeCodec) render(d *Document, items []*Message) []outEntry {
	ids := d.idSet()
	used := map[*entry]bool{}
	var out []outEntry
	var prevLine []byte          // the last line written that came from the file
	owner := map[string]string{} // call id -> uuid of the line holding it
	for i := 0; i < len(items); {
		m := items[i]
		// The messages read from one line stay one line while together.
		j := i + 1
		for m.src != nil && j < len(items) && items[j].src == m.src {
			j++
		}
		g := items[i:j]
		i = j
		if m.src != nil && m.Role == RoleAssistant {
			for _, b := range m.ToolCalls() {
				owner[b.ID] = m.src.id
			}
		}
		if m.src != nil && (m.opaque() || wholeEntries(g)) && !used[m.src] {
			used[m.src] = true
			out = append(out, outEntry{src: m.src, raw: m.src.raw, id: m.src.id, branch: m.src.branch})
			prevLine = m.src.raw
			continue
		}
		var blocks [][]byte
		for _, gm := range g {
			for k := range gm.Blocks {
				if raw := anthropicBlock(&gm.Blocks[k]); raw != nil {
					blocks = append(blocks, raw)
				}
			}
		}
		if m.src != nil && !used[m.src] {
			used[m.src] = true
			msg, _ := getField(m.src.raw, "message")
			msg = setField(msg, "content", contentValue(msg, blocks, g))
			out = append(out, outEntry{src: m.src, raw: setField(m.src.raw, "message", msg), id: m.src.id, branch: m.src.branch})
			prevLine = m.src.raw
			continue
		}
		id := newUUID(ids, seedOf(d, m, out))
		prev := prevLine
		if prev == nil {
			prev = d.envelope
		}
		o := outEntry{raw: claudeNewLine(m, blocks, id, prev), id: id}
		// A new result line hangs on the line holding its call, as Claude
		// Code writes them.
		if res, ok := m.Result(); ok && len(g) == 1 && d.data != nil {
			if p := owner[res.CallID]; p != "" {
				o.branch, o.parent = true, p
				o.raw = setField(o.raw, "sourceToolAssistantUUID", mustJSON(p))
			}
		}
		out = append(out, o)
	}
	return out
}

// claudeNewLine writes a user line for a message belay made, with the
// envelope (session, cwd, version, branch) of the line before it.
func claudeNewLine(m *Message, blocks [][]byte, id string, prev []byte) []byte {
	line := []byte(`{"parentUuid":null}`)
	for _, k := range []string{"isSidechain", "userType", "cwd", "sessionId", "version", "gitBranch"} {
		if v, ok := getField(prev, k); ok {
			line = setField(line, k, v)
		}
	}
	role := "user"
	if m.Role == RoleAssistant {
		role = "assistant"
	}
	line = setField(line, "type", mustJSON(role))
	content := joinArray(blocks)
	if blocks == nil {
		content = []byte("[]")
	}
	line = setField(line, "message", []byte(`{"role":`+string(mustJSON(role))+`,"content":`+string(content)+`}`))
	line = setField(line, "uuid", mustJSON(id))
	ts := m.Meta.Time
	if ts.IsZero() {
		ts = time.Unix(0, 0)
	}
	line = setField(line, "timestamp", mustJSON(ts.UTC().Format("2006-01-02T15:04:05.000Z")))
	if m.Synthetic {
		line = setField(line, "toolUseResult", mustJSON("belay: synthetic result for transcript repair"))
		if pid, ok := getString(prev, "uuid"); ok {
			line = setField(line, "sourceToolAssistantUUID", mustJSON(pid))
		}
	}
	return line
}

// newUUID derives a version-4-shaped UUID from seed, unique in the file.
func newUUID(ids map[string]bool, seed string) string {
	for n := 0; ; n++ {
		sum := sha256.Sum256([]byte(seed + "/" + strconv.Itoa(n)))
		sum[6] = sum[6]&0x0f | 0x40
		sum[8] = sum[8]&0x3f | 0x80
		h := hex.EncodeToString(sum[:16])
		id := h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
		if !ids[id] {
			ids[id] = true
			return id
		}
	}
}
