package fake

import (
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/belayhq/belay"
	"github.com/belayhq/belay/provider"
)

// A plan is a script unrolled for one prompt and attempt: a list of ops.
// Positional ops (tokens, tool calls and results, turn ends) each take one
// cursor position; the others sit between positions. A resumed run skips
// the positional ops before its cursor and the other ops at or before it:
// those belong to the connection that broke.
type plan struct {
	ops []op
	// size is the number of positions.
	size int
	// input is the prompt's token count for Usage events.
	input int
}

type opKind uint8

const (
	// Positional ops.
	opThinking opKind = iota
	opText
	opCall
	opResult
	opTurnEnd
	// Ops between positions.
	opRunTool
	opStall
	opError
	opCrash
	opHang
	opUsage
)

func (k opKind) positional() bool { return k <= opTurnEnd }

type op struct {
	kind opKind
	// pos is a positional op's position; for the others, the position of
	// the next positional op.
	pos  int
	text string
	step *Step
	call *provider.Call
	res  *provider.Result
	// output is the token count a usage op reports.
	output int
}

const defaultStopReason = "end_turn"

func buildPlan(s *Script, prompt string, attempt int) *plan {
	reply := prompt
	if s.Reply != nil {
		reply = *s.Reply
	}
	thinking := splitWords(s.Thinking)
	tokens := splitTokens(reply, s.Tokens)
	total := len(thinking) + len(tokens)
	p := &plan{input: len(strings.Fields(prompt))}
	emitted := 0
	content := func(kind opKind, text string) {
		p.ops = append(p.ops, op{kind: kind, text: text})
		emitted++
		if s.UsageEvery > 0 && emitted%s.UsageEvery == 0 && emitted < total {
			p.ops = append(p.ops, op{kind: opUsage, output: emitted})
		}
	}
	for _, t := range thinking {
		content(opThinking, t)
	}

	// Steps for this attempt, ordered by where they go.
	ids := callIDs(s.Steps)
	type placed struct {
		at int
		i  int
	}
	var steps []placed
	for i := range s.Steps {
		st := &s.Steps[i]
		if !st.Attempts.Contains(attempt) {
			continue
		}
		at := int(st.At)
		if st.At == End || at > len(tokens) {
			at = len(tokens)
		}
		steps = append(steps, placed{at, i})
	}
	sort.SliceStable(steps, func(a, b int) bool { return steps[a].at < steps[b].at })

	next := 0
	for i := 0; i <= len(tokens); i++ {
		for ; next < len(steps) && steps[next].at == i; next++ {
			p.addStep(&s.Steps[steps[next].i], ids[steps[next].i])
		}
		if i < len(tokens) {
			content(opText, tokens[i])
		}
	}
	// The final usage, then a TurnEnd unless a turn_end step is last.
	usage := op{kind: opUsage, output: total}
	if n := len(p.ops); n > 0 && p.ops[n-1].kind == opTurnEnd {
		p.ops = append(p.ops[:n-1], usage, p.ops[n-1])
	} else {
		reason := s.StopReason
		if reason == "" {
			reason = defaultStopReason
		}
		p.ops = append(p.ops, usage, op{kind: opTurnEnd, text: reason})
	}
	for i := range p.ops {
		p.ops[i].pos = p.size
		if p.ops[i].kind.positional() {
			p.size++
		}
	}
	return p
}

func (p *plan) addStep(st *Step, id string) {
	switch st.Kind {
	case StepStall:
		p.ops = append(p.ops, op{kind: opStall, step: st})
	case StepError:
		p.ops = append(p.ops, op{kind: opError, step: st})
	case StepCrash:
		p.ops = append(p.ops, op{kind: opCrash, step: st})
	case StepHang:
		p.ops = append(p.ops, op{kind: opHang, step: st})
	case StepTurnEnd:
		reason := st.StopReason
		if reason == "" {
			reason = defaultStopReason
		}
		p.ops = append(p.ops, op{kind: opTurnEnd, text: reason})
	case StepTool:
		call := &provider.Call{ID: id, Name: st.Tool, Input: st.Input, SideEffect: st.SideEffect}
		res := &provider.Result{CallID: id, Content: st.Content}
		p.ops = append(p.ops, op{kind: opCall, step: st, call: call})
		switch st.Outcome {
		case OutcomeDenied:
			res.IsError, res.Class = true, belay.ClassPermissionDenied
			if res.Content == "" {
				res.Content = "permission denied"
			}
		case OutcomeError:
			res.IsError = true
			if res.Content == "" {
				res.Content = "tool failed"
			}
		default:
			if res.Content == "" {
				res.Content = "ok"
			}
		}
		if st.Outcome != OutcomeDenied && (st.SideEffect || st.Duration > 0) {
			p.ops = append(p.ops, op{kind: opRunTool, step: st, call: call})
		}
		if st.Outcome == OutcomeCrash {
			p.ops = append(p.ops, op{kind: opCrash, step: st})
		}
		p.ops = append(p.ops, op{kind: opResult, step: st, res: res})
	}
}

// splitWords cuts s into words, each with the whitespace after it (the
// first also with any before it), so that the pieces join back to s.
func splitWords(s string) []string {
	var out []string
	start, seenWord, prevSpace := 0, false, false
	for i, r := range s {
		space := unicode.IsSpace(r)
		if !space && prevSpace && seenWord {
			out = append(out, s[start:i])
			start = i
		}
		if !space {
			seenWord = true
		}
		prevSpace = space
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// splitTokens cuts text into n tokens (0: one per word). With fewer words
// than n, words are grouped; with more, the text is cut by characters,
// repeated (space separated, "lorem" if empty) until it has n of them.
func splitTokens(text string, n int) []string {
	words := splitWords(text)
	if n == 0 {
		return words
	}
	out := make([]string, n)
	if n <= len(words) {
		for j := range n {
			out[j] = strings.Join(words[j*len(words)/n:(j+1)*len(words)/n], "")
		}
		return out
	}
	if text == "" {
		text = "lorem"
	}
	full := text
	if rc := utf8.RuneCountInString(text); rc < n {
		k := 1 + n/(rc+1) // copies, so that rc + (k-1)(rc+1) >= n
		full = strings.Repeat(text+" ", k-1) + text
	}
	runes := []rune(full)
	for j := range n {
		out[j] = string(runes[j*len(runes)/n : (j+1)*len(runes)/n])
	}
	return out
}
