package transcript

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Format names a transcript format.
type Format string

// Supported formats.
const (
	// FormatBelay is belay's own session journal (journal.jsonl).
	FormatBelay Format = "belay"
	// FormatPi is a pi coding-agent session (JSONL, versions 1-3).
	FormatPi Format = "pi"
	// FormatClaude is a Claude Code session (~/.claude/projects/*/*.jsonl).
	FormatClaude Format = "claude"
	// FormatOpenAI is OpenAI Chat Completions messages: a JSON array, a
	// request object with "messages", or JSONL with one message per line.
	FormatOpenAI Format = "openai"
	// FormatAnthropic is Anthropic Messages: a JSON array, a request object
	// with "messages" (and "system"), or JSONL with one message per line.
	FormatAnthropic Format = "anthropic"
)

// Formats lists the supported formats.
var Formats = []Format{FormatBelay, FormatPi, FormatClaude, FormatOpenAI, FormatAnthropic}

var (
	// ErrUnknownFormat is returned when a format cannot be detected or is
	// not supported.
	ErrUnknownFormat = errors.New("transcript: unknown format")
	// ErrInvalidHeader is returned for a file whose header is missing or
	// invalid: repair refuses it and never truncates or replaces it.
	ErrInvalidHeader = errors.New("transcript: invalid header")
	// ErrInvalidDocument is returned for a JSON document (not JSONL) that
	// does not parse.
	ErrInvalidDocument = errors.New("transcript: invalid document")
)

func supported() string {
	names := make([]string, len(Formats))
	for i, f := range Formats {
		names[i] = string(f)
	}
	return strings.Join(names, ", ")
}

// ParseFormat returns the format named s (case-insensitive; "claude-code"
// is an alias of claude).
func ParseFormat(s string) (Format, error) {
	switch f := Format(strings.ToLower(strings.TrimSpace(s))); f {
	case FormatBelay, FormatPi, FormatClaude, FormatOpenAI, FormatAnthropic:
		return f, nil
	case "claude-code", "claudecode":
		return FormatClaude, nil
	}
	return "", fmt.Errorf("%w %q: supported formats are %s", ErrUnknownFormat, s, supported())
}

// utf8BOM is the UTF-8 byte-order mark. No agent writes one, and their
// readers do not accept one: JSON.parse fails on it, so a pi or Claude
// Code file that starts with one loses its first line, and pi does not
// find the session to continue (it parses the first line alone). Detection
// and parsing accept it; repair removes it (ChangeDropBOM).
var utf8BOM = []byte("\xef\xbb\xbf")

// bomChange reports the byte-order mark removed.
func bomChange() Change {
	return Change{Kind: ChangeDropBOM, Reason: "the file begins with a UTF-8 byte-order mark (EF BB BF), which the agents' JSON readers do not accept: removed"}
}

// detectLimit bounds how much of a file detection reads.
const detectLimit = 256 << 10

// Detect tells the format of a transcript from its first bytes (at most
// 256 KiB are looked at).
func Detect(head []byte) (Format, error) {
	if len(head) > detectLimit {
		head = head[:detectLimit]
	}
	head = bytes.TrimPrefix(head, utf8BOM)
	t := bytes.TrimLeft(head, " \t\r\n")
	if len(t) == 0 {
		return "", fmt.Errorf("%w: the file is empty; supported formats are %s", ErrUnknownFormat, supported())
	}
	if t[0] == '[' {
		return classifyMessages(t), nil
	}
	// One JSON object holding "messages": a request body.
	if t[0] == '{' && isRequestObject(t) {
		return classifyMessages(t), nil
	}
	votes := map[Format]int{}
	n := 0
	for line := range bytes.SplitSeq(t, []byte("\n")) {
		line = bytes.TrimRight(line, "\r")
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if n++; n > 64 {
			break
		}
		if f := detectLine(line); f != "" {
			votes[f]++
		}
	}
	best, bestN := Format(""), 0
	for _, f := range Formats {
		if votes[f] > bestN {
			best, bestN = f, votes[f]
		}
	}
	if best == "" {
		return "", fmt.Errorf("%w: not a transcript this version of belay knows; supported formats are %s (use --format to name one)", ErrUnknownFormat, supported())
	}
	return best, nil
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

// detectLine votes for the format one JSONL line looks like.
func detectLine(line []byte) Format {
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
		return classifyMessages(line)
	}
	return ""
}

// classifyMessages tells OpenAI from Anthropic messages (an array, a
// request object or one message). Ties go to OpenAI: plain user/assistant
// text is the same in both.
func classifyMessages(t []byte) Format {
	openai, anthropic := 0, 0
	if t[0] == '{' {
		if _, ok := getField(t, "system"); ok {
			anthropic += 2
		}
	}
	for _, k := range []string{`"tool_calls"`, `"tool_call_id"`, `"role":"tool"`, `"role":"system"`, `"role":"developer"`, `"image_url"`, `"content":null`, `"role": "tool"`, `"role": "system"`} {
		openai += bytes.Count(t, []byte(k))
	}
	for _, k := range []string{`"tool_use"`, `"tool_result"`, `"tool_use_id"`, `"thinking"`, `"redacted_thinking"`, `"type": "tool_use"`, `"type": "tool_result"`} {
		anthropic += bytes.Count(t, []byte(k))
	}
	if anthropic > openai {
		return FormatAnthropic
	}
	return FormatOpenAI
}
