package command

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/BurntSushi/toml"

	"github.com/belayhq/belay/provider"
)

// formats lists the decoders in a fixed order for the fuzzer's choice.
var formats = []string{FormatClaude, FormatCodex, FormatJSONL, FormatText}

// splitLines splits output as the tailer does: each line keeps its '\n',
// the last may have none.
func splitLines(out []byte) [][]byte {
	var lines [][]byte
	for len(out) > 0 {
		i := bytes.IndexByte(out, '\n')
		if i < 0 {
			return append(lines, out)
		}
		lines = append(lines, out[:i+1])
		out = out[i+1:]
	}
	return lines
}

type decoded struct {
	events []provider.Event
	done   bool
	err    error
	hint   string
}

func decodeAll(format string, lines [][]byte, skip int) decoded {
	d := decoders[format](readOnlySet(DefaultReadOnlyTools))
	var out decoded
	for i, l := range lines {
		evs := d.decode(l)
		if i >= skip {
			out.events = append(out.events, evs...)
		}
	}
	out.done, out.err = d.result()
	out.hint = d.hint()
	return out
}

// checkEvent checks that a provider event is one the runner can journal:
// its payload is there, ids are set, JSON is valid and contents bounded.
func checkEvent(e provider.Event) error {
	switch e.Kind {
	case provider.TextDelta, provider.ThinkingDelta:
		if e.Text == "" {
			return errors.New("empty text")
		}
	case provider.ToolCall:
		if e.Call == nil || e.Call.ID == "" {
			return errors.New("tool call without an id")
		}
		if len(e.Call.Input) > 0 && !json.Valid(e.Call.Input) {
			return errors.New("tool call input is not JSON")
		}
	case provider.ToolResult:
		if e.Result == nil || e.Result.CallID == "" {
			return errors.New("tool result without a call id")
		}
		if len(e.Result.Content) > maxContent+len("…[truncated]") {
			return errors.New("tool result content over the cap")
		}
		if e.Result.Class != "" && !knownClass(e.Result.Class) {
			return errors.New("unknown class")
		}
	case provider.Usage:
		if e.Tokens == nil {
			return errors.New("usage without tokens")
		}
	case provider.TurnEnd:
		if e.StopReason == "" {
			return errors.New("turn end without a stop reason")
		}
	case provider.Keepalive:
	default:
		return errors.New("unknown kind")
	}
	if _, err := json.Marshal(e); err != nil {
		return err
	}
	return nil
}

// FuzzDecoders feeds arbitrary agent output, untrusted subprocess bytes,
// to each output decoder. No line may panic a decoder; every event must be
// well formed; a reported failure is a *provider.Error of a known class
// with a bounded message; the text format loses nothing; and a decoder is
// a pure function of its lines, so a reattach that replays the lines
// before its cursor sees exactly the events a straight run saw after it.
func FuzzDecoders(f *testing.F) {
	seeds := map[string][]string{
		FormatClaude: {
			`{"type":"system","subtype":"init","session_id":"s1","tools":["Bash","Read"]}`,
			`{"type":"assistant","message":{"content":[{"type":"thinking","thinking":"hmm"},{"type":"text","text":"Let me look."}]},"parent_tool_use_id":null}`,
			`{"type":"assistant","message":{"content":[{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"rm x"}}]},"parent_tool_use_id":null}`,
			`{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"done","is_error":false}]}}`,
			`{"type":"system","subtype":"api_retry","attempt":1,"error_status":529,"error":"overloaded"}`,
			`{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"toolu_2","content":[{"type":"text","text":"line 1"},{"type":"image"}],"is_error":true}]}}`,
			`{"type":"assistant","message":{"content":[{"type":"text","text":"sub"}]},"parent_tool_use_id":"toolu_9"}`,
			`{"type":"result","subtype":"success","is_error":false,"usage":{"input_tokens":10,"cache_read_input_tokens":5,"output_tokens":7},"stop_reason":"end_turn"}`,
			`{"type":"result","subtype":"error_max_turns","is_error":true,"errors":["reached max turns"],"api_error_status":429}`,
		},
		FormatCodex: {
			`{"type":"item.started","item":{"id":"item_1","type":"command_execution","command":"bash -lc ls","status":"in_progress"}}`,
			`{"type":"item.completed","item":{"id":"item_1","type":"command_execution","command":"bash -lc ls","aggregated_output":"README.md\n","exit_code":0,"status":"completed"}}`,
			`{"type":"item.completed","item":{"id":"item_2","type":"reasoning","text":"thinking about it"}}`,
			`{"type":"item.completed","item":{"id":"item_3","type":"mcp_tool_call","server":"s","tool":"t","arguments":{"a":1},"result":{"x":2},"status":"failed","error":{"message":"boom"}}}`,
			`{"type":"item.completed","item":{"id":"item_4","type":"file_change","changes":[{"path":"a","kind":"add"}],"status":"declined"}}`,
			`{"type":"error","message":"Reconnecting... 1/5"}`,
			`{"type":"item.completed","item":{"id":"item_5","type":"agent_message","text":"Yes."}}`,
			`{"type":"turn.completed","usage":{"input_tokens":24763,"output_tokens":122}}`,
			`{"type":"turn.failed","error":{"message":"stream disconnected: rate limit"}}`,
		},
		FormatJSONL: {
			`{"type":"thinking","text":"plan"}`,
			`{"type":"text","text":"Hello"}`,
			`{"type":"tool_call","id":"c1","name":"write_file","input":{"path":"a"}}`,
			`{"type":"tool_result","id":"c1","content":"ok","class":"permission_denied","is_error":true}`,
			`{"type":"usage","input_tokens":3,"output_tokens":4}`,
			`{"type":"error","message":"quota","class":"bogus"}`,
			`{"type":"done","stop_reason":"max_tokens"}`,
		},
		FormatText: {"first line", "", "second line"},
	}
	for i, format := range formats {
		f.Add(uint8(i), []byte(strings.Join(seeds[format], "\n")+"\n"), uint8(3))
		f.Add(uint8(i), []byte(strings.Join(seeds[format], "\n")), uint8(0))
	}
	f.Add(uint8(0), []byte("{\"type\":\"user\",\"message\":{\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"t\",\"content\":\""+strings.Repeat("é", maxContent)+"\"}]}}\n"), uint8(0))
	f.Add(uint8(2), []byte("not json\n{\n[]\nnull\n{\"type\":5}\n\xff\xfe\n"), uint8(1))
	f.Fuzz(func(t *testing.T, which uint8, out []byte, cut uint8) {
		format := formats[int(which)%len(formats)]
		lines := splitLines(out)
		all := decodeAll(format, lines, 0)
		for i, e := range all.events {
			if err := checkEvent(e); err != nil {
				t.Fatalf("%s: event %d %+v: %v", format, i, e, err)
			}
			if utf8.Valid(out) && e.Result != nil && !utf8.ValidString(e.Result.Content) {
				t.Fatalf("%s: truncation broke UTF-8", format)
			}
		}
		if all.err != nil {
			var pe *provider.Error
			if !errors.As(all.err, &pe) || !knownClass(pe.Class) {
				t.Fatalf("%s: failure %#v", format, all.err)
			}
			if len(pe.Message) > len("agent: ")+500+len("…[truncated]") {
				t.Fatalf("%s: failure message of %d bytes", format, len(pe.Message))
			}
			if !all.done {
				t.Fatalf("%s: a failure that does not end the stream", format)
			}
		}
		if format == FormatText {
			var got strings.Builder
			for _, e := range all.events {
				got.WriteString(e.Text)
			}
			if got.String() != string(out) {
				t.Fatalf("text lost bytes: %q -> %q", out, got.String())
			}
		}
		// Reattach: replay the lines before a cursor, then decode on.
		k := 0
		if len(lines) > 0 {
			k = int(cut) % (len(lines) + 1)
		}
		want := decodeAll(format, lines[:k], 0)
		resumed := decodeAll(format, lines, k)
		if len(want.events)+len(resumed.events) != len(all.events) ||
			!reflect.DeepEqual(all.events[len(want.events):], resumed.events) && len(resumed.events) > 0 ||
			all.done != resumed.done || all.hint != resumed.hint || (all.err == nil) != (resumed.err == nil) {
			t.Fatalf("%s: replaying %d of %d lines changes what follows", format, k, len(lines))
		}
	})
}

// FuzzConfig decodes arbitrary [providers.NAME] tables (TOML, as the
// daemon does). A config New accepts must be able to start its agent:
// argv, environment and directories hold no NUL byte (the kernel takes
// none), environment names are names, and the defaults are applied.
func FuzzConfig(f *testing.F) {
	f.Add("type = \"command\"\npreset = \"claude\"\ndir = \"/home/me/src\"\nargv = [\"claude\", \"-p\", \"--output-format\", \"stream-json\", \"--verbose\"]\n")
	f.Add("preset = \"codex\"\nread_only_tools = [\"Read\"]\n")
	f.Add("argv = [\"mytool\", \"--ask\", \"{prompt}\", \"--run\", \"{run_dir}/{attempt}\"]\nmodel_args = [\"--model\", \"{model}\"]\nformat = \"jsonl\"\nenv = { MYTOOL_LOG = \"warn\" }\nkill_grace = \"10s\"\n")
	f.Add("argv = [\"x\"]\nprompt = \"sometimes\"\n")
	// Regressions: values no process can be started with.
	f.Add("argv = [\"x\\u0000y\"]\n")
	f.Add("argv = [\"x\"]\nenv = { \"A=B\" = \"c\" }\n")
	f.Add("argv = [\"x\"]\nenv = { \"\" = \"c\" }\n")
	f.Add("argv = [\"x\"]\nenv = { A = \"c\\u0000\" }\n")
	f.Add("argv = [\"x\"]\ndir = \"/tmp/\\u0000\"\n")
	f.Fuzz(func(t *testing.T, table string) {
		var cfg Config
		if _, err := toml.Decode(table, &cfg); err != nil {
			return
		}
		p, err := New("c", cfg)
		if err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("error is not ErrConfig: %v", err)
			}
			return
		}
		c := p.Config()
		if len(c.Argv) == 0 || c.Argv[0] == "" || decoders[c.Format] == nil || c.Prompt != PromptArg && c.Prompt != PromptStdin ||
			!filepath.IsAbs(c.RunDir) || c.KillGrace <= 0 || c.PollInterval <= 0 || c.RefEvery <= 0 {
			t.Fatalf("config after defaults: %+v", c)
		}
		for _, s := range append(append(append([]string{c.Dir, c.RunDir}, c.Argv...), c.ModelArgs...), slices.Collect(maps.Values(c.Env))...) {
			if strings.IndexByte(s, 0) >= 0 {
				t.Fatalf("a NUL byte in %q", s)
			}
		}
		for k := range c.Env {
			if k == "" || strings.ContainsAny(k, "=\x00") {
				t.Fatalf("environment name %q", k)
			}
		}
		argv := c.expand(vars{prompt: "p", model: "m", session: "s", run: "r", attempt: "1", runDir: "/d"})
		if len(argv) != len(c.Argv)+len(c.ModelArgs) {
			t.Fatalf("expanded %d args from %d and %d", len(argv), len(c.Argv), len(c.ModelArgs))
		}
	})
}
