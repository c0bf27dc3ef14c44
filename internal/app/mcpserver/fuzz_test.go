package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/belayhq/belay/internal/app/mcpserver"
)

// waitArguments are the arguments that make a tool block for up to that
// many seconds; the fuzz targets cap them so that an input costs
// milliseconds.
var waitArguments = []string{"timeoutSeconds", "waitSeconds"}

// FuzzTools calls every tool with arbitrary arguments against a real
// daemon, over the SDK's in-memory transport. Whatever the arguments, a
// call of a known tool is answered with a result, never a protocol error
// (a result the tool's output schema refuses is one); a failed result
// carries belay's error (code, message and next action) unless the SDK
// refused the arguments against the tool's input schema first; and the
// server answers the next call.
func FuzzTools(f *testing.F) {
	for _, seed := range []struct{ tool, args string }{
		{"send", `{"prompt":"hi","provider":"fake"}`},
		{"send", `{"prompt":"hi","provider":"fake","deadline":"-1s","tags":["a",""]}`},
		{"send", `{"prompt":"","session":"ses_x","policy":"sideways"}`},
		{"status", `{"run":"run_01jfz0000000000000000000aa"}`},
		{"status", `{}`},
		{"read", `{"run":"run_x","cursor":"!!","maxBytes":-5}`},
		{"wait", `{"run":"run_x","timeoutSeconds":1e308}`},
		{"cancel", `{"run":"","reason":"x"}`},
		{"doctor", `{"session":"ses_01jfz0000000000000000000aa"}`},
		{"runs_list", `{"status":"nope","since":"yesterday","limit":1000000,"cursor":"%%"}`},
		{"retry", `{"run":"run_x","policy":"replace","deadline":"90m"}`},
		{"inbox_post", `{"session":"ses_x","type":"t","data":{"n":12345678901234567890}}`},
		{"inbox_poll", `{"session":"ses_x","ttlSeconds":-1,"max":-3,"waitSeconds":60}`},
		{"inbox_ack", `{"session":"ses_x","delivery":"dlv_x","epoch":1,"kind":"maybe","delaySeconds":-2}`},
		{"no_such_tool", `{}`},
	} {
		f.Add(seed.tool, seed.args)
	}
	_, c := startDaemon(f)
	a := connectInMemory(f, c, mcpserver.Scope{All: true})
	tools, err := a.cs.ListTools(context.Background(), nil)
	if err != nil {
		f.Fatal(err)
	}
	known := map[string]bool{}
	for _, tool := range tools.Tools {
		known[tool.Name] = true
	}
	f.Fuzz(func(t *testing.T, tool, args string) {
		var m map[string]any
		if json.Unmarshal([]byte(args), &m) != nil {
			return // the SDK's client sends an object; other bytes never reach a tool
		}
		for _, k := range waitArguments {
			if v, ok := m[k].(float64); ok && v > 0.01 {
				m[k] = 0.01
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res, err := a.cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: m})
		if !known[tool] {
			var we *jsonrpc.Error
			if err == nil || !errors.As(err, &we) || we.Code != jsonrpc.CodeInvalidParams {
				t.Fatalf("unknown tool %q: %v, want the SDK's invalid params", tool, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("%s %s: a protocol error, want a tool result: %v", tool, args, err)
		}
		if res.IsError {
			msg := text(res)
			if strings.HasPrefix(msg, `{"error":`) {
				var e struct{ Error mcpserver.ToolError }
				if err := json.Unmarshal([]byte(msg), &e); err != nil || e.Error.Code == "" || e.Error.Message == "" || e.Error.NextAction == "" {
					t.Fatalf("%s %s: a failure without belay's code, message and next action: %s", tool, args, msg)
				}
			} else if !strings.HasPrefix(msg, `validating "arguments"`) && !strings.HasPrefix(msg, "json: ") {
				t.Fatalf("%s %s: a failure that is neither belay's error nor the SDK's refusal of the arguments: %s", tool, args, msg)
			}
		}
		if _, err := a.cs.CallTool(ctx, &mcp.CallToolParams{Name: "status", Arguments: map[string]any{}}); err != nil {
			t.Fatalf("after %s %s: the server no longer answers: %v", tool, args, err)
		}
	})
}

// FuzzHTTP sends arbitrary requests to the daemon's MCP endpoint (the
// handler `belay serve` mounts at /mcp): any scope in the query, any body,
// any session header. The handler answers every one, within the request's
// time, with no internal error.
func FuzzHTTP(f *testing.F) {
	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"fuzz","version":"1"}}}`
	for _, seed := range []struct{ method, query, body, session string }{
		{"POST", "", initialize, ""},
		{"POST", "tag=team-a&subscriber=x", initialize, ""},
		{"POST", "session=ses_x&all=1", initialize, ""},
		{"POST", "session=", initialize, ""},
		{"POST", "", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"status","arguments":{}}}`, "nope"},
		{"POST", "", `[` + initialize + `]`, ""},
		{"POST", "", `{"jsonrpc":"2.0","id":1,"method":`, ""},
		{"POST", "", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, ""},
		{"GET", "", "", "nope"},
		{"DELETE", "", "", "nope"},
		{"PUT", "all=true", "x", ""},
	} {
		f.Add(seed.method, seed.query, []byte(seed.body), seed.session)
	}
	_, c := startDaemon(f)
	h := mcpserver.NewHTTP(c, "test", nil)
	f.Cleanup(h.Close)
	f.Fuzz(func(t *testing.T, method, query string, body []byte, session string) {
		req, err := http.NewRequest(method, "http://belay/mcp?"+query, bytes.NewReader(body))
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		req = req.WithContext(ctx)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
		}
		w := httptest.NewRecorder()
		done := make(chan struct{})
		go func() {
			defer close(done)
			h.ServeHTTP(w, req)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s /mcp?%s: no answer 8 s after the request's context ended", method, query)
		}
		if w.Code >= 500 {
			t.Fatalf("%s /mcp?%s %q: %d %s", method, query, body, w.Code, w.Body.String())
		}
	})
}
