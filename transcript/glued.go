package transcript

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
)

// This file finds the entries of a JSONL line that is not valid because
// an entry was written onto the end of another: a writer that crashed in
// the middle of a line (no fsync: the end of the line never reached the
// disk) and, started again, appended its next entry to the torn one with
// no line end between them: `…"timest{"type":"message",…}`. The entry
// at the end is whole and is kept as a line of its own; the torn fragment
// before it is dropped. Two whole entries with no line end between them
// (a line cut exactly before its line end) are split into two lines.

// gluedAt returns where the JSON object that ends line starts, when that
// object is an entry its format's writer wrote (entry) and something is
// before it, or 0. line is not a valid entry itself.
//
// The object is found walking back from the line's end, which is outside
// any string: a quote with an even run of backslashes before it starts or
// ends a string, so braces inside strings (`"text":"{\"type\":…}"`) are
// not counted; where the braces balance again is the object's start, and
// the object is then validated whole. Walking back stops at that start,
// so the cost is the object's length.
func gluedAt(line []byte, entry func([]byte) bool) int {
	end := len(line)
	for end > 0 && isSpace(line[end-1]) {
		end--
	}
	if end == 0 || line[end-1] != '}' {
		return 0
	}
	depth, inString := 0, false
	for i := end - 1; i >= 0; i-- {
		c := line[i]
		if inString {
			if c == '"' && evenBackslashes(line, i) {
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '}', ']':
			depth++
		case '{', '[':
			depth--
			if depth > 0 {
				continue
			}
			if c != '{' || len(bytes.TrimSpace(line[:i])) == 0 || !entry(line[i:end]) {
				return 0 // the line's only object, or not an entry
			}
			if _, prefix := truncatedAt(line[:end]); prefix && depthAt(line[:i]) >= 2 {
				// The line up to here is the start of one JSON value, with
				// this object nested two deep in it: an entry torn right
				// after a nested object that has the keys of an entry (a
				// pi custom entry's data, an OpenAI message's metadata),
				// not an entry glued onto a torn one, which almost never
				// continues the torn one's JSON (the tear falls inside a
				// string or a key, and the glued entry does not fit
				// there).
				return 0
			}
			return i
		}
	}
	return 0
}

// depthAt returns how many objects and arrays are open at the end of b,
// the start of a JSON value (strings skipped).
func depthAt(b []byte) int {
	depth, inString := 0, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inString {
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		}
	}
	return depth
}

// evenBackslashes reports whether an even number of backslashes (none
// included) comes right before line[i].
func evenBackslashes(line []byte, i int) bool {
	n := 0
	for j := i - 1; j >= 0 && line[j] == '\\'; j-- {
		n++
	}
	return n%2 == 0
}

// splitGlued splits a line that is not a valid entry into a torn fragment
// (line[:frag], frag 0 when there is none) and the entries written after
// it (spans of line, in order, contiguous, the last running to the line's
// end). It returns no spans when the line does not end with a whole entry
// written after something else: the line is then dropped whole. whole
// accepts an entry of the format (the line check), entry one its writer
// wrote (gluedEntry).
func splitGlued(line []byte, whole, entry func([]byte) bool) (frag int, spans [][2]int) {
	end := len(line)
	for end > 0 {
		k := gluedAt(line[:end], entry)
		if k == 0 {
			// Nothing more glued: what is left is a whole entry (a line
			// cut right before its line end) or the torn fragment.
			if len(spans) > 0 && whole(line[:end]) {
				spans = append(spans, [2]int{0, end})
				end = 0
			}
			break
		}
		spans = append(spans, [2]int{k, end})
		end = k
	}
	if len(spans) == 0 {
		return 0, nil
	}
	slices.Reverse(spans)
	return end, spans
}

// gluedEntry reports whether b, found at the end of a line after other
// bytes, is an entry as the format's writer writes it: a valid entry
// (checkLine) with the keys that writer puts in every entry, which the
// objects nested in an entry do not have (a content block, Claude Code's
// message object, a subagent's progress message), so that a line torn
// right after one of those is not taken for a torn line with an entry
// glued on. pi: "id", "parentId" and "timestamp" (versions 2 and 3; a version 1 file
// has no ids, and its glued entries are not recovered); Claude Code:
// "sessionId", or "leafUuid" (a summary) or "messageId" and a "snapshot"
// (a file history snapshot); OpenAI and Anthropic: a string "role". A
// belay journal's lines are never split.
func gluedEntry(f Format, c codec) func([]byte) bool {
	return func(b []byte) bool {
		if c.checkLine(b) != "" {
			return false
		}
		has := func(key string) bool {
			v, ok := getField(b, key)
			return ok && len(v) > 0 && v[0] == '"'
		}
		switch f {
		case FormatPi:
			v, ok := getField(b, "parentId")
			return has("id") && has("timestamp") && ok && (string(v) == "null" || len(v) > 0 && v[0] == '"')
		case FormatClaude:
			if has("sessionId") || has("leafUuid") {
				return true
			}
			v, ok := getField(b, "snapshot")
			return has("messageId") && ok && len(v) > 0 && v[0] == '{'
		case FormatOpenAI, FormatAnthropic:
			return true // checkLine requires a string "role"
		}
		return false
	}
}

// Reasons of the changes made to a line that held glued entries; frag is
// what is dropped before them.
func fragmentReason(frag []byte, entries int) string {
	what := "the complete entry written after it is kept as a line of its own"
	if entries > 1 {
		what = fmt.Sprintf("the %d complete entries written after it are kept, each as a line of its own", entries)
	}
	if len(bytes.Trim(frag, "\x00")) == 0 {
		// A crash after the file grew and before the write's bytes
		// reached the disk leaves zeros where they were to go.
		return fmt.Sprintf("the line begins with %d zero bytes (the space of a write a crash left unwritten, then the next entry written after it with no line end): they are dropped; %s", len(frag), strings.Replace(what, "written after it", "after them", 1))
	}
	return fmt.Sprintf("the line begins with %d bytes of an entry cut short (a torn write, then the next entry written onto it with no line end): the torn fragment is dropped; %s", len(frag), what)
}

func splitReason(entries int) string {
	return fmt.Sprintf("the line holds %d complete entries with no line end between them (a line end lost): each is kept as a line of its own", entries)
}
