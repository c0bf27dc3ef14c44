package doctor

import (
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Redaction (docs/doctor.md, "Redaction"). Everything a report echoes from
// its input goes through one of these functions.

const (
	maxToken   = 128 // longest identifier echoed as it is
	maxSegment = 16  // longest URL path segment or ref id echoed whole
	maxText    = 240 // longest runtime text (Problem, lock detail) echoed
)

// redacted replaces a value that may not be echoed by a short hash, so two
// reports can still be compared.
func redacted(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "redacted:" + hex.EncodeToString(sum[:4])
}

// isToken reports whether s looks like an identifier: short, no spaces,
// only [A-Za-z0-9._:/@+-]. Free text (a prompt, an answer) never does.
func isToken(s string) bool {
	if s == "" || len(s) > maxToken {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '.', c == '_', c == ':', c == '/', c == '@', c == '+', c == '-':
		default:
			return false
		}
	}
	return true
}

// token echoes an identifier (id, provider, model, owner, host, type), or
// its hash if it does not look like one.
func token(s string) string {
	if s == "" || isToken(s) {
		return s
	}
	return redacted(s)
}

// shorten echoes a provider-side identifier (conversation or response id,
// browser target, URL path segment) by its head and tail only.
func shorten(s string) string {
	if s == "" {
		return ""
	}
	if !isToken(s) {
		return redacted(s)
	}
	if len(s) <= maxSegment {
		return s
	}
	return s[:8] + "..." + s[len(s)-4:]
}

// redactURL keeps a URL's scheme, host and port, and its path with long
// segments shortened; user info, query and fragment are dropped, since
// they are where tokens and signatures live.
func redactURL(raw string) string {
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" || u.Host == "" || !isToken(u.Scheme) || !isToken(u.Host) {
		return redacted(raw)
	}
	var b strings.Builder
	b.WriteString(strings.ToLower(u.Scheme))
	b.WriteString("://")
	b.WriteString(strings.ToLower(u.Host))
	for seg := range strings.SplitSeq(strings.TrimPrefix(u.EscapedPath(), "/"), "/") {
		if seg == "" {
			continue
		}
		b.WriteByte('/')
		b.WriteString(shorten(seg))
	}
	return b.String()
}

var urlInText = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s"'<>]+`)

// scrubText makes runtime-generated text (a quarantine problem, a lock
// verdict) safe to echo: URLs are redacted, control characters dropped,
// and the result truncated. It is never applied to provider or user text,
// which is not echoed at all.
func scrubText(s string) string {
	s = urlInText.ReplaceAllStringFunc(s, redactURL)
	s = strings.Map(func(r rune) rune {
		if r == utf8.RuneError || unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	s = strings.TrimSpace(s)
	if utf8.RuneCountInString(s) > maxText {
		r := []rune(s)
		s = string(r[:maxText]) + "..."
	}
	return s
}

var toolInReason = regexp.MustCompile(`tool "([A-Za-z0-9._:/@+-]{1,64})"`)

// toolsInReason returns the tool names a run's reason quotes as
// `tool "name"`, the form the runtime writes when it strands a run (G9).
// Nothing else of the reason is read.
func toolsInReason(reason string) []string {
	var out []string
	for _, m := range toolInReason.FindAllStringSubmatch(reason, 8) {
		out = append(out, m[1])
	}
	return out
}
