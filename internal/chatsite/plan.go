package chatsite

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Plan is how the site answers one prompt, in site time.
type Plan struct {
	Think    time.Duration // thinking placeholder before any text
	Pause    time.Duration // after the preamble, before the rest streams
	Stream   time.Duration // streaming the rest
	Words    int
	Error    bool     // the turn ends in an error with Retry
	Artifact []string // file names attached to the finished turn
	// StopDelay is how long the page takes, after its stop control is
	// clicked, before it tells the server (as a site whose stop handler
	// first finishes its own work).
	StopDelay time.Duration
}

// DefaultPlan answers in 4 s of site time: 1 s thinking, a preamble, a
// 0.5 s pause, 2.5 s streaming, 60 words.
var DefaultPlan = Plan{Think: time.Second, Pause: 500 * time.Millisecond, Stream: 2500 * time.Millisecond, Words: 60}

var directive = regexp.MustCompile(`\[\[([^\]]*)\]\]`)

// ParsePlan reads the [[key=value ...]] block of a prompt (see the package
// doc); keys it does not know are an error, so a typo does not silently
// run the default.
func ParsePlan(prompt string) (Plan, error) {
	p := DefaultPlan
	m := directive.FindStringSubmatch(prompt)
	if m == nil {
		return p, nil
	}
	for _, kv := range strings.Fields(m[1]) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return p, fmt.Errorf("chatsite: directive %q is not key=value", kv)
		}
		var err error
		switch k {
		case "think":
			p.Think, err = time.ParseDuration(v)
		case "pause":
			p.Pause, err = time.ParseDuration(v)
		case "stream":
			p.Stream, err = time.ParseDuration(v)
		case "words":
			p.Words, err = strconv.Atoi(v)
			if err == nil && p.Words < 1 {
				err = fmt.Errorf("words must be at least 1")
			}
		case "error":
			p.Error = v == "1" || v == "true"
		case "artifacts":
			p.Artifact = strings.Split(v, ",")
		case "stopdelay":
			p.StopDelay, err = time.ParseDuration(v)
		default:
			err = fmt.Errorf("unknown key")
		}
		if err != nil {
			return p, fmt.Errorf("chatsite: directive %q: %v", kv, err)
		}
	}
	return p, nil
}

// Hash is the hex sha256 of a prompt, as the prompt log records it.
func Hash(prompt string) string {
	h := sha256.Sum256([]byte(prompt))
	return hex.EncodeToString(h[:])
}

var vocabulary = strings.Fields(`the answer rests on three observations about durable
sessions first a conversation outlives the shell second every side effect is
journaled before it happens third recovery reads before it writes so a prompt
is never sent twice and an answer is never lost consider the lease the epoch
the fence and the watchdog each protects one boundary between what was promised
and what was done`)

// tokens are the answer's pieces: each is a prefix-stable extension of
// the text, so the visible text while streaming is always a prefix of the
// final answer.
func tokens(prompt string, words int) []string {
	h := sha256.Sum256([]byte(prompt))
	rng := rand.New(rand.NewPCG(binary.LittleEndian.Uint64(h[:8]), binary.LittleEndian.Uint64(h[8:16])))
	out := make([]string, 0, words+1)
	out = append(out, "Answer "+hex.EncodeToString(h[:4])+":")
	for i := 1; i <= words; i++ {
		sep := " "
		if i%12 == 0 {
			sep = "\n"
		}
		out = append(out, sep+vocabulary[rng.IntN(len(vocabulary))])
	}
	return out
}

// AnswerText is the full answer the site gives to prompt (without an
// error turn), as the page renders it.
func AnswerText(prompt string) (string, error) {
	p, err := ParsePlan(prompt)
	if err != nil {
		return "", err
	}
	return strings.Join(tokens(prompt, p.Words), ""), nil
}

// AnswerMarkdown is the full answer's markdown source, what the turn's
// copy button puts on the clipboard: the rendered text with its heading
// in bold, so it differs from the page's text.
func AnswerMarkdown(prompt string) (string, error) {
	p, err := ParsePlan(prompt)
	if err != nil {
		return "", err
	}
	return markdown(tokens(prompt, p.Words)), nil
}

// markdown is the source of the tokens shown.
func markdown(toks []string) string {
	if len(toks) == 0 {
		return ""
	}
	return "**" + toks[0] + "**" + strings.Join(toks[1:], "")
}
