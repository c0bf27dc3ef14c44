package httpapi

import (
	"regexp"
	"strings"
)

// Redacted replaces a secret in scrubbed text.
const Redacted = "[REDACTED]"

// Patterns of credentials that are scrubbed even when they are not the
// configured key: header values, key=value pairs and well-known key
// shapes.
var secretPatterns = []*regexp.Regexp{
	// Authorization: Bearer xyz, "x-api-key": "xyz", api_key=xyz, ...
	regexp.MustCompile(`(?i)((?:proxy-)?authorization|x-api-key|api[-_]?key|access[-_]?token|secret)("?\s*[:=]\s*"?)(?:(?:bearer|basic)\s+)?[^\s"',;}&]+`),
	// A bare bearer token anywhere.
	regexp.MustCompile(`(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{6,}`),
	// OpenAI and Anthropic style keys: sk-..., sk-proj-..., sk-ant-...
	regexp.MustCompile(`\bsk-[A-Za-z0-9_-]{6,}`),
}

// Scrubber removes secrets from text: the configured keys (exactly) and
// anything shaped like a credential.
type Scrubber struct {
	secrets []string
}

// NewScrubber returns a scrubber for the given secrets (empty ones and
// ones shorter than 4 bytes, which would mangle ordinary text, are
// skipped; the patterns still catch credentials in headers).
func NewScrubber(secrets ...string) *Scrubber {
	s := &Scrubber{}
	for _, v := range secrets {
		if v = strings.TrimSpace(v); len(v) >= 4 {
			s.secrets = append(s.secrets, v)
		}
	}
	return s
}

// String returns s with every secret replaced by Redacted.
func (s *Scrubber) String(text string) string {
	if s != nil {
		for _, v := range s.secrets {
			text = strings.ReplaceAll(text, v, Redacted)
		}
	}
	text = scrubPairs(text)
	for _, re := range secretPatterns[1:] {
		text = re.ReplaceAllString(text, Redacted)
	}
	return text
}

// scrubPairs redacts the values of key=value and "key": "value" pairs. An
// error code that merely ends in a key word, followed by ": " and its
// message (OpenAI's "invalid_api_key: Incorrect API key provided"), is
// not a pair: its message is kept.
func scrubPairs(text string) string {
	re := secretPatterns[0]
	var b strings.Builder
	last := 0
	for _, m := range re.FindAllStringSubmatchIndex(text, -1) {
		start, sep := m[0], text[m[4]:m[5]]
		if start > 0 && isIdentByte(text[start-1]) && strings.TrimSpace(sep) == ":" && strings.HasPrefix(sep, ":") && len(sep) > 1 {
			continue
		}
		b.WriteString(text[last:m[5]])
		b.WriteString(Redacted)
		last = m[1]
	}
	b.WriteString(text[last:])
	return b.String()
}

func isIdentByte(c byte) bool {
	return c == '_' || c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// clip scrubs text, then cuts it to at most n bytes (and a "…"). Cutting
// first could leave the start of a secret that no longer matches.
func (s *Scrubber) clip(text string, n int) string {
	return truncate(s.String(text), n)
}
