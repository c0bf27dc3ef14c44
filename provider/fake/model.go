package fake

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/belayhq/belay"
)

// Model names the fake understands.
const (
	// ModelEcho (or the empty model) replies with the prompt.
	ModelEcho = "echo"
	// ModelScriptPrefix starts a model string in the script mini-language.
	ModelScriptPrefix = "script:"
)

// ParseModel reads a model string: "" or "echo" (the zero Script, an
// echo), or "script:" followed by items in the mini-language that
// docs/providers.md specifies, e.g.
//
//	script:reply=hello world;rate=20;first=300ms;stall=5s@1;error=rate_limited:2s#1;tool=write_file:side:ok@2
func ParseModel(model string) (*Script, error) {
	s, err := modelScript(model)
	if s == nil && err == nil {
		s = &Script{}
	}
	return s, err
}

// modelScript returns nil for the echo model.
func modelScript(model string) (*Script, error) {
	switch {
	case model == "" || model == ModelEcho:
		return nil, nil
	case strings.HasPrefix(model, ModelScriptPrefix):
		s, err := parseMini(model[len(ModelScriptPrefix):])
		if err != nil {
			return nil, withSource(err, "model")
		}
		return s, nil
	}
	return nil, &ScriptError{Source: "model", Msg: fmt.Sprintf("unknown fake model %q: use %q or %q followed by script items", clip(model), ModelEcho, ModelScriptPrefix)}
}

// parseMini parses the items after "script:".
func parseMini(src string) (*Script, error) {
	items, err := splitItems(src)
	if err != nil {
		return nil, &ScriptError{Msg: err.Error()}
	}
	s := &Script{}
	seen := map[string]bool{}
	for i, item := range items {
		if item == "" {
			continue
		}
		if err := s.parseItem(item, seen); err != nil {
			return nil, &ScriptError{Field: fmt.Sprintf("item %d (%s)", i+1, clip(item)), Msg: err.Error()}
		}
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return s, nil
}

// splitItems splits on ';', undoing backslash escapes.
func splitItems(src string) ([]string, error) {
	var items []string
	var b strings.Builder
	for i := 0; i < len(src); i++ {
		switch c := src[i]; c {
		case '\\':
			if i+1 == len(src) {
				return nil, errors.New("a backslash at the end escapes nothing")
			}
			i++
			b.WriteByte(src[i])
		case ';':
			items = append(items, b.String())
			b.Reset()
		default:
			b.WriteByte(c)
		}
	}
	return append(items, b.String()), nil
}

func (s *Script) parseItem(item string, seen map[string]bool) error {
	cut := strings.IndexAny(item, "=@#")
	name, rest := item, ""
	if cut >= 0 {
		name, rest = item[:cut], item[cut:]
	}
	value, hasValue := strings.CutPrefix(rest, "=")
	if settingNames[name] {
		if !hasValue {
			return fmt.Errorf("%s needs a value: %s=...", name, name)
		}
		if seen[name] {
			return fmt.Errorf("%s is set twice", name)
		}
		seen[name] = true
		return s.parseSetting(name, value)
	}
	kind, ok := stepNames[name]
	if !ok {
		return fmt.Errorf("unknown item %q (want one of reply, thinking, tokens, rate, first, keepalive, usage, ref, stop, stall, error, tool, turn, crash, hang)", clip(name))
	}
	mods := rest
	if hasValue {
		end := strings.IndexAny(value, "@#")
		if end < 0 {
			end = len(value)
		}
		value, mods = value[:end], value[end:]
	}
	st := Step{Kind: kind}
	if err := st.parseMods(mods); err != nil {
		return err
	}
	switch kind {
	case StepCrash, StepHang:
		if hasValue {
			return fmt.Errorf("%s takes no value (write %s@3#1)", name, name)
		}
	case StepTurnEnd:
		st.StopReason = value
	case StepStall:
		d, err := parseDuration(value)
		if err != nil {
			return fmt.Errorf("stall: %w", err)
		}
		st.Duration = d
	case StepError:
		class, retry, hasRetry := strings.Cut(value, ":")
		st.Class = belay.ErrorClass(class)
		if !knownClass(st.Class) {
			return fmt.Errorf("unknown error class %q (want one of %s)", clip(class), classList())
		}
		if hasRetry {
			d, err := parseDuration(retry)
			if err != nil {
				return fmt.Errorf("retry-after: %w", err)
			}
			st.RetryAfter = d
		}
	case StepTool:
		if err := st.parseTool(value); err != nil {
			return err
		}
	}
	s.Steps = append(s.Steps, st)
	return nil
}

var settingNames = map[string]bool{
	"reply": true, "thinking": true, "tokens": true, "rate": true, "first": true,
	"keepalive": true, "usage": true, "ref": true, "stop": true,
}

var stepNames = map[string]StepKind{
	"stall": StepStall, "error": StepError, "crash": StepCrash, "hang": StepHang,
	"tool": StepTool, "turn": StepTurnEnd,
}

func (s *Script) parseSetting(name, value string) error {
	var err error
	switch name {
	case "reply":
		s.Reply = &value
	case "thinking":
		s.Thinking = value
	case "stop":
		s.StopReason = value
	case "tokens":
		s.Tokens, err = parseCount(value)
	case "usage":
		s.UsageEvery, err = parseCount(value)
	case "ref":
		s.RefEvery, err = parseCount(value)
	case "rate":
		s.Rate, err = strconv.ParseFloat(value, 64)
		if err != nil || math.IsInf(s.Rate, 0) || math.IsNaN(s.Rate) {
			err = fmt.Errorf("bad rate %q: want tokens per second, like 20 or 0.5", clip(value))
		}
	case "first":
		s.FirstToken, err = parseDuration(value)
	case "keepalive":
		s.Keepalive, err = parseDuration(value)
	}
	return err
}

// parseMods reads a step's "@POS" and "#ATTEMPTS" suffixes, in any order.
func (st *Step) parseMods(mods string) error {
	var sawAt, sawAttempts bool
	for mods != "" {
		sigil := mods[0]
		end := strings.IndexAny(mods[1:], "@#")
		if end < 0 {
			end = len(mods) - 1
		}
		arg := mods[1 : 1+end]
		mods = mods[1+end:]
		switch sigil {
		case '@':
			if sawAt {
				return errors.New("@position given twice")
			}
			sawAt = true
			if arg == "end" {
				st.At = End
				continue
			}
			n, err := parseCount(arg)
			if err != nil {
				return fmt.Errorf("@position: %w (or \"end\")", err)
			}
			st.At = Position(n)
		case '#':
			if sawAttempts {
				return errors.New("#attempts given twice")
			}
			sawAttempts = true
			set, err := ParseAttempts(arg)
			if err != nil {
				return fmt.Errorf("#attempts: %w", err)
			}
			st.Attempts = set
		}
	}
	return nil
}

// parseTool reads NAME[:FLAG]...; flags are side, an outcome (ok, error,
// denied, permission_denied, crash) and a duration.
func (st *Step) parseTool(value string) error {
	parts := strings.Split(value, ":")
	st.Tool = parts[0]
	if !toolName.MatchString(st.Tool) {
		return fmt.Errorf("tool name %q must be 1-64 of A-Z a-z 0-9 _ . -", clip(st.Tool))
	}
	var sawDuration bool
	for _, f := range parts[1:] {
		switch f {
		case "side":
			if st.SideEffect {
				return errors.New("tool flag side given twice")
			}
			st.SideEffect = true
			continue
		case "ok", "error", "denied", "permission_denied", "crash":
			if st.Outcome != "" {
				return fmt.Errorf("tool outcome given twice (%s and %s)", st.Outcome, f)
			}
			st.Outcome = Outcome(f)
			if f == "denied" {
				st.Outcome = OutcomeDenied
			}
			continue
		}
		d, err := parseDuration(f)
		if err != nil {
			return fmt.Errorf("unknown tool flag %q (want side, ok, error, denied, crash or a duration)", clip(f))
		}
		if sawDuration {
			return errors.New("tool duration given twice")
		}
		sawDuration = true
		st.Duration = d
	}
	return nil
}

func parseCount(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > maxEvery || s != strconv.Itoa(n) {
		return 0, fmt.Errorf("bad count %q: want a whole number from 0 to %d", clip(s), maxEvery)
	}
	return n, nil
}

func parseDuration(s string) (Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("bad duration %q: want a Go duration like 300ms or 1m30s", clip(s))
	}
	return Duration(d), nil
}
