package command

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/provider"
)

// classes map the error text agent CLIs print to error classes. The first
// match wins; the text is the stream's last error and the tail of stderr.
var classes = []struct {
	class belay.ErrorClass
	re    *regexp.Regexp
}{
	{belay.ClassContextOverflow, regexp.MustCompile(`(?i)prompt is too long|context[ _-]?(length|window)|maximum context|context_length_exceeded|too many tokens`)},
	{belay.ClassAuth, regexp.MustCompile(`(?i)\b401\b|\b403\b|unauthori[sz]ed|authenticat|invalid[ _-]?(api[ _-]?key|x-api-key|token)|api[ _-]?key|not logged in|please (run )?(/)?login|log ?in again|oauth token|billing_error|forbidden`)},
	{belay.ClassRateLimited, regexp.MustCompile(`(?i)\b429\b|rate[ _-]?limit|too many requests|usage limit|quota`)},
	{belay.ClassOverloaded, regexp.MustCompile(`(?i)\b529\b|\b503\b|overloaded|at capacity|server is busy`)},
	{belay.ClassInvalidRequest, regexp.MustCompile(`(?i)invalid_request|\b400\b|unknown (option|argument|flag)|unexpected argument|requires --verbose|usage:`)},
	{belay.ClassTransient, regexp.MustCompile(`(?i)\b5\d\d\b|server_error|api_error|timed? ?out|connection (reset|refused|closed|error)|network|econnreset|etimedout|socket hang up`)},
}

// classify returns the class an error text names, or "".
func classify(text string) belay.ErrorClass {
	if strings.TrimSpace(text) == "" {
		return ""
	}
	for _, c := range classes {
		if c.re.MatchString(text) {
			return c.class
		}
	}
	return ""
}

// statusClass maps an HTTP status an agent reported to a class, or "".
func statusClass(status int) belay.ErrorClass {
	switch {
	case status == 0:
		return ""
	case status == 401 || status == 403:
		return belay.ClassAuth
	case status == 429:
		return belay.ClassRateLimited
	case status == 503 || status == 529:
		return belay.ClassOverloaded
	case status == 400 || status == 404 || status == 413 || status == 422:
		return belay.ClassInvalidRequest
	case status >= 500:
		return belay.ClassTransient
	}
	return ""
}

// exitError is the failure of an agent that exited with a non-zero status:
// classified from the stream's last error and the tail of stderr; failing
// that, 126 and 127 (the command cannot run or does not exist) are
// invalid_request, anything else transient.
func exitError(code int, hint, stderrTail string) *provider.Error {
	msg := fmt.Sprintf("agent exited with status %d", code)
	if code > 128 && code < 128+65 {
		msg = fmt.Sprintf("agent killed by signal %d", code-128)
	}
	detail := hint
	if detail == "" {
		detail = lastLine(stderrTail)
	}
	if detail != "" {
		msg += ": " + truncate(detail, 300)
	}
	class := classify(hint + "\n" + stderrTail)
	if class == "" {
		switch code {
		case 126, 127:
			class = belay.ClassInvalidRequest
		default:
			class = belay.ClassTransient
		}
	}
	return &provider.Error{Class: class, Message: msg}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return strings.TrimSpace(s)
}
