package transcript

import (
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
