package transcript

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// This file tells a transcript's format from its bytes. JSONL lines vote
// by their structure (a belay CRC trailer, a pi or Claude Code entry type,
// a message role); OpenAI and Anthropic messages are told apart by what
// only one of the two APIs has (marks), read from the messages' keys and
// content block types, never from their text: a pasted document is text
// in both, and a message that quotes the other API's JSON is still text.

// detectLimit bounds how much of a file Detect looks at.
const detectLimit = 256 << 10

// voteLines is how many non-blank JSONL lines vote for a format.
const voteLines = 64

// roleMessages is the vote of a line that is an OpenAI or Anthropic
// message: which of the two its marks (and the other lines') tell.
const roleMessages Format = "openai|anthropic"

// Detect tells the format of a transcript from its first bytes (at most
// 256 KiB are looked at). OpenAI and Anthropic messages with nothing that
// tells them apart in those bytes (plain text is the same in both) are
// OpenAI; RepairFile reads on in that case (detectFile).
func Detect(head []byte) (Format, error) {
	if len(head) > detectLimit {
		head = head[:detectLimit]
	}
	f, _, err := detect(head)
	return f, err
}

// detect tells the format of data (a whole file or its start) and whether
// it is sure of it: it is not when data holds OpenAI or Anthropic messages
// and no mark that tells them apart (the answer is then OpenAI), nor when
// none of its lines is whole (a first line longer than data).
func detect(data []byte) (Format, bool, error) {
	t := bytes.TrimLeft(bytes.TrimPrefix(data, utf8BOM), " \t\r\n")
	if len(t) == 0 {
		return "", false, fmt.Errorf("%w: the file is empty; supported formats are %s", ErrUnknownFormat, supported())
	}
	if isDocument(t) {
		var m marks
		m.document(t)
		return m.format(), m.sure(), nil
	}
	var v lineVote
	for line := range bytes.SplitSeq(t, []byte("\n")) {
		if !v.add(bytes.TrimRight(line, "\r")) {
			break
		}
	}
	return v.result()
}

// isDocument reports whether t (a file's start, blanks and byte-order
// mark skipped) is a JSON document, an array or a request object, not
// JSONL.
func isDocument(t []byte) bool {
	return len(t) > 0 && (t[0] == '[' || t[0] == '{' && isRequestObject(t))
}

// detectFile tells the format of the file at path, of size bytes, whose
// first bytes are head, reading on when head is not enough (detect): a
// JSON document whole, if it is not larger than limit (the in-memory
// repair reads it anyway: data returns it); JSONL line by line (lines
// longer than MaxLineSize skipped), its first 64 non-blank lines voting
// and, for OpenAI or Anthropic messages, on until a line tells the two
// apart, at most limit bytes.
func detectFile(path string, head []byte, size, limit int64) (f Format, data []byte, err error) {
	f, sure, err := detect(head)
	if sure || int64(len(head)) >= size {
		return f, nil, err
	}
	if isDocument(bytes.TrimLeft(bytes.TrimPrefix(head, utf8BOM), " \t\r\n")) {
		if size > limit {
			return f, nil, err
		}
		if data, err = os.ReadFile(path); err != nil {
			return "", nil, fmt.Errorf("transcript: %w", err)
		}
		f, _, err = detect(data)
		return f, data, err
	}
	in, err := os.Open(path)
	if err != nil {
		return "", nil, fmt.Errorf("transcript: %w", err)
	}
	defer in.Close()
	s := &lineScanner{r: bufio.NewReaderSize(io.LimitReader(in, limit), 1<<20)}
	var v lineVote
	for {
		line, off, _, tooLong, err := s.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", nil, fmt.Errorf("transcript: read %s: %w", path, err)
		}
		if off == 0 {
			line = bytes.TrimPrefix(line, utf8BOM)
		}
		if !tooLong && !v.add(line) {
			break
		}
	}
	f, _, err = v.result()
	return f, nil, err
}

// lineVote is the vote of a JSONL file's lines.
type lineVote struct {
	votes [len(voteFormats)]int
	n     int // the lines that voted
	marks marks
}

// voteFormats are what a line votes for, in the order ties are settled.
var voteFormats = [...]Format{FormatBelay, FormatPi, FormatClaude, roleMessages}

// add counts a line (without its terminator); it reports whether more
// lines can change the answer. The first 64 non-blank lines vote; after
// them, when messages win, only their marks count.
func (v *lineVote) add(line []byte) bool {
	if len(bytes.TrimSpace(line)) == 0 {
		return true
	}
	if v.n >= voteLines {
		if v.best() != roleMessages || v.marks.sure() {
			return false
		}
		if validJSON(line) {
			if _, ok := getField(line, "role"); ok {
				v.marks.message(line)
			}
		}
		return !v.marks.sure()
	}
	v.n++
	if f := detectLine(line, &v.marks); f != "" {
		for i, vf := range voteFormats {
			if vf == f {
				v.votes[i]++
			}
		}
	}
	return true
}

func (v *lineVote) best() Format {
	best, bestN := Format(""), 0
	for i, f := range voteFormats {
		if v.votes[i] > bestN {
			best, bestN = f, v.votes[i]
		}
	}
	return best
}

func (v *lineVote) result() (Format, bool, error) {
	switch best := v.best(); best {
	case "":
		return "", false, fmt.Errorf("%w: not a transcript this version of belay knows; supported formats are %s (use --format to name one)", ErrUnknownFormat, supported())
	case roleMessages:
		return v.marks.format(), v.marks.sure(), nil
	default:
		return best, true, nil
	}
}

func isRequestObject(t []byte) bool {
	if !json.Valid(t) {
		return requestPrefix(t)
	}
	v, ok := getField(t, "messages")
	return ok && len(v) > 0 && v[0] == '['
}

// requestPrefix reports whether t is the start of a request object cut
// short (a truncated file, or the head of a large one): valid JSON up to
// its end, with a "messages" array among the fields read so far.
func requestPrefix(t []byte) bool {
	if _, ok := truncatedAt(t); !ok {
		return false
	}
	i, ok := fieldStart(t, "messages")
	return ok && i < len(t) && t[i] == '['
}

// detectLine votes for the format one JSONL line looks like; an OpenAI or
// Anthropic message (roleMessages) adds its marks to m.
func detectLine(line []byte, m *marks) Format {
	if bytes.HasPrefix(line, []byte(`{"seq":`)) && bytes.Contains(line, []byte(`,"crc":"`)) {
		return FormatBelay
	}
	if !validJSON(line) {
		return ""
	}
	typ, _ := getString(line, "type")
	switch typ {
	case "session", "model_change", "thinking_level_change", "compaction", "branch_summary",
		"custom", "custom_message", "label", "session_info":
		return FormatPi
	case "message":
		if _, ok := getField(line, "message"); ok {
			return FormatPi
		}
	case "user", "assistant", "system", "summary", "progress", "attachment",
		"file-history-snapshot", "queue-operation", "last-prompt", "custom-title", "ai-title":
		if _, ok := getField(line, "role"); !ok {
			return FormatClaude
		}
	}
	if _, ok := getField(line, "role"); ok {
		m.message(line)
		return roleMessages
	}
	return ""
}

// marks counts what tells OpenAI messages from Anthropic ones, from their
// structure only: roles, keys and content block types that one of the two
// APIs has and the other has not.
type marks struct{ openai, anthropic int }

// format is the format the marks tell; OpenAI when they tell nothing.
func (m *marks) format() Format {
	if m.anthropic > m.openai {
		return FormatAnthropic
	}
	return FormatOpenAI
}

// sure reports whether the marks tell one format.
func (m *marks) sure() bool { return m.openai != m.anthropic }

// document counts the marks of a JSON document (an array of messages or a
// request object), which may be cut short: its elements up to the cut. A
// request's top-level "system" is Anthropic's (OpenAI's is a message).
func (m *marks) document(t []byte) {
	arr := t
	if t[0] == '{' {
		if _, ok := fieldStart(t, "system"); ok {
			m.anthropic += 2
		}
		i, ok := fieldStart(t, "messages")
		if !ok {
			return
		}
		arr = t[i:]
	}
	i := skipSpace(arr, 0)
	if i >= len(arr) || arr[i] != '[' {
		return
	}
	for i = skipSpace(arr, i+1); i < len(arr) && arr[i] != ']'; {
		start := i
		if i = skipValue(arr, i); i == start {
			return // not JSON here
		}
		if e := arr[start:i]; e[0] == '{' && validJSON(e) {
			m.message(e)
		}
		if i = skipSpace(arr, i); i < len(arr) && arr[i] == ',' {
			i = skipSpace(arr, i+1)
		}
	}
}

// message counts the marks of one message, a valid JSON object.
func (m *marks) message(b []byte) {
	topFields(b, func(f field) bool {
		v := b[f.start:f.end]
		switch string(f.key) {
		case "role":
			switch role, _ := jsonString(v); role {
			case "tool", "system", "developer", "function":
				m.openai++ // Anthropic messages are user or assistant
			}
		case "tool_calls", "tool_call_id", "function_call", "refusal", "audio":
			m.openai++
		case "content":
			switch {
			case string(v) == "null":
				m.openai++
			case len(v) > 0 && v[0] == '[':
				m.blocks(v)
			}
		}
		return true
	})
}

// blocks counts the marks of a message's content blocks (a valid array).
func (m *marks) blocks(arr []byte) {
	for _, sp := range arrayElems(arr) {
		b := arr[sp[0]:sp[1]]
		if b[0] != '{' {
			continue
		}
		switch typ, _ := getString(b, "type"); typ {
		case "tool_use", "tool_result", "thinking", "redacted_thinking", "document",
			"server_tool_use", "web_search_tool_result", "web_fetch_tool_result", "search_result",
			"mcp_tool_use", "mcp_tool_result", "code_execution_tool_result", "bash_code_execution_tool_result",
			"text_editor_code_execution_tool_result", "container_upload":
			m.anthropic++
		case "image":
			if _, ok := getField(b, "source"); ok {
				m.anthropic++ // OpenAI's images are image_url parts
			}
		case "image_url", "input_audio", "file", "refusal":
			m.openai++
		}
	}
}
