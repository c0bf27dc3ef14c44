// Package openaitest is a loopback OpenAI-compatible server for tests: it
// streams Chat Completions and background Responses (with resume by
// starting_after, polling and cancel) in the documented wire formats, and
// injects the failures belay must survive (HTTP errors with Retry-After,
// a connection cut mid-stream, a stall). It records every request.
//
//	srv := openaitest.NewServer(openaitest.Options{Reply: "hello"})
//	defer srv.Close()
//	// [providers.openai] base_url = srv.URL
package openaitest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Options script the server.
type Options struct {
	// Reply is the answer text; empty echoes the last user message.
	Reply string
	// Chunk is the number of bytes per text delta (default 4).
	Chunk int
	// Delay is the pause before each stream event.
	Delay time.Duration
	// APIKey, if set, must be sent as "Authorization: Bearer <APIKey>";
	// other requests get a 401.
	APIKey string
	// ToolCalls end the answer with function calls, after the text.
	ToolCalls []ToolCall
	// Failures answer the first create requests (POST /chat/completions
	// and POST /responses), one each, in order.
	Failures []Failure
	// CutAfter aborts the connection of the first create's stream after
	// this many events (0: never): no terminal event, no clean end.
	CutAfter int
	// StallAfter and Stall pause the first create's stream for Stall
	// after StallAfter events (Stall 0: never).
	StallAfter int
	Stall      time.Duration
	// NoResumeStream refuses GET /responses/{id}?stream=true (HTTP 400),
	// so clients must poll.
	NoResumeStream bool
	// GetFailures answers the first GET /responses/{id} requests (stream
	// resumes and polls alike) with HTTP 500.
	GetFailures int
	// PollsInProgress is how many polls of a response report in_progress
	// before its final state.
	PollsInProgress int
}

// ToolCall is a function call the model makes.
type ToolCall struct {
	ID, Name, Arguments string
}

// Failure is an HTTP error answer.
type Failure struct {
	Status int
	// RetryAfter is the Retry-After header value, if any.
	RetryAfter string
	// Type, Code and Message fill the OpenAI error body.
	Type, Code, Message string
}

// Request is a request the server received.
type Request struct {
	Method string
	Path   string
	Query  string
	Header http.Header
	Body   []byte
}

// Server is the loopback server.
type Server struct {
	// URL is the base URL to configure: "http://127.0.0.1:PORT/v1".
	URL string

	opts Options
	srv  *httptest.Server

	mu        sync.Mutex
	requests  []Request
	creates   int
	responses map[string]*response
	cancelled []string
	nextID    int
	faulted   bool // the first create's stream has started
	gets      int
}

type response struct {
	id     string
	events []map[string]any
	final  map[string]any
	status string
	polls  int
}

// NewServer starts a server on a loopback port.
func NewServer(opts Options) *Server {
	if opts.Chunk <= 0 {
		opts.Chunk = 4
	}
	s := &Server{opts: opts, responses: map[string]*response{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.chat)
	mux.HandleFunc("POST /v1/responses", s.createResponse)
	mux.HandleFunc("GET /v1/responses/{id}", s.getResponse)
	mux.HandleFunc("POST /v1/responses/{id}/cancel", s.cancel)
	s.srv = httptest.NewServer(s.record(mux))
	s.URL = s.srv.URL + "/v1"
	return s
}

// Close shuts the server down.
func (s *Server) Close() {
	s.srv.CloseClientConnections()
	s.srv.Close()
}

// Requests returns the requests received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Cancelled returns the ids of the responses cancelled so far.
func (s *Server) Cancelled() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.cancelled...)
}

func (s *Server) record(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 16<<20))
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		s.mu.Lock()
		s.requests = append(s.requests, Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header.Clone(), Body: body})
		s.mu.Unlock()
		if s.opts.APIKey != "" && r.Header.Get("Authorization") != "Bearer "+s.opts.APIKey {
			writeError(w, Failure{Status: 401, Type: "invalid_request_error", Code: "invalid_api_key", Message: "Incorrect API key provided."})
			return
		}
		next.ServeHTTP(w, r)
	})
}

func writeError(w http.ResponseWriter, f Failure) {
	if f.RetryAfter != "" {
		w.Header().Set("Retry-After", f.RetryAfter)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(f.Status)
	if f.Message == "" {
		f.Message = http.StatusText(f.Status)
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": f.Message, "type": nullable(f.Type), "code": nullable(f.Code), "param": nil}})
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// failure returns the scripted failure for this create, if any.
func (s *Server) failure() (Failure, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.creates
	s.creates++
	if n < len(s.opts.Failures) {
		return s.opts.Failures[n], true
	}
	return Failure{}, false
}

// firstStream reports whether this is the first create's stream.
func (s *Server) firstStream() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	first := !s.faulted
	s.faulted = true
	return first
}

// reply returns the answer text for a request whose user messages are
// given, last one last.
func (s *Server) reply(lastUser string) string {
	if s.opts.Reply != "" {
		return s.opts.Reply
	}
	return lastUser
}

func (s *Server) chunks(text string) []string {
	var out []string
	for len(text) > 0 {
		n := min(s.opts.Chunk, len(text))
		for n < len(text) && text[n]&0xC0 == 0x80 {
			n++ // keep UTF-8 sequences whole
		}
		out = append(out, text[:n])
		text = text[n:]
	}
	return out
}

// streamer writes SSE events with the scripted delay, cut and stall.
type streamer struct {
	w     http.ResponseWriter
	rc    *http.ResponseController
	ctx   context.Context
	opts  *Options
	first bool // the first create's stream: faults apply
	n     int
}

func newStreamer(w http.ResponseWriter, r *http.Request, opts *Options, first bool) *streamer {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	st := &streamer{w: w, rc: http.NewResponseController(w), ctx: r.Context(), opts: opts, first: first}
	_ = st.rc.Flush()
	return st
}

// send writes one event; it reports false when the stream must end (the
// client left, or the script cuts it here).
func (st *streamer) send(event, data string) bool {
	if st.first && st.opts.CutAfter > 0 && st.n >= st.opts.CutAfter {
		panic(http.ErrAbortHandler) // drops the connection mid-stream
	}
	if st.first && st.opts.Stall > 0 && st.n == st.opts.StallAfter {
		if !wait(st.ctx, st.opts.Stall) {
			return false
		}
	}
	if st.opts.Delay > 0 && !wait(st.ctx, st.opts.Delay) {
		return false
	}
	var b strings.Builder
	if event != "" {
		fmt.Fprintf(&b, "event: %s\n", event)
	}
	fmt.Fprintf(&b, "data: %s\n\n", data)
	if _, err := io.WriteString(st.w, b.String()); err != nil {
		return false
	}
	st.n++
	return st.rc.Flush() == nil
}

func wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// chat serves POST /v1/chat/completions (streaming only).
func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model    string `json:"model"`
		Stream   bool   `json:"stream"`
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, Failure{Status: 400, Type: "invalid_request_error", Message: "bad JSON: " + err.Error()})
		return
	}
	if f, ok := s.failure(); ok {
		writeError(w, f)
		return
	}
	if !req.Stream {
		writeError(w, Failure{Status: 400, Type: "invalid_request_error", Message: "openaitest serves streaming requests only"})
		return
	}
	last := ""
	for _, m := range req.Messages {
		var text string
		if m.Role == "user" && json.Unmarshal(m.Content, &text) == nil {
			last = text
		}
	}
	st := newStreamer(w, r, &s.opts, s.firstStream())
	base := map[string]any{"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 1700000000, "model": req.Model}
	chunk := func(delta map[string]any, finish any) string {
		c := map[string]any{}
		for k, v := range base {
			c[k] = v
		}
		c["choices"] = []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}}
		c["usage"] = nil
		return mustJSON(c)
	}
	if !st.send("", chunk(map[string]any{"role": "assistant", "content": ""}, nil)) {
		return
	}
	text := s.reply(last)
	for _, c := range s.chunks(text) {
		if !st.send("", chunk(map[string]any{"content": c}, nil)) {
			return
		}
	}
	for i, tc := range s.opts.ToolCalls {
		head := map[string]any{"index": i, "id": tc.ID, "type": "function", "function": map[string]any{"name": tc.Name, "arguments": ""}}
		if !st.send("", chunk(map[string]any{"tool_calls": []any{head}}, nil)) {
			return
		}
		for _, a := range s.chunks(tc.Arguments) {
			frag := map[string]any{"index": i, "function": map[string]any{"arguments": a}}
			if !st.send("", chunk(map[string]any{"tool_calls": []any{frag}}, nil)) {
				return
			}
		}
	}
	finish := "stop"
	if len(s.opts.ToolCalls) > 0 {
		finish = "tool_calls"
	}
	if !st.send("", chunk(map[string]any{}, finish)) {
		return
	}
	usage := map[string]any{}
	for k, v := range base {
		usage[k] = v
	}
	usage["choices"] = []any{}
	usage["usage"] = map[string]any{"prompt_tokens": len(strings.Fields(last)), "completion_tokens": len(s.chunks(text)), "total_tokens": len(strings.Fields(last)) + len(s.chunks(text))}
	if !st.send("", mustJSON(usage)) {
		return
	}
	st.send("", "[DONE]")
}

// createResponse serves POST /v1/responses with background and stream.
func (s *Server) createResponse(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model      string          `json:"model"`
		Input      json.RawMessage `json:"input"`
		Background bool            `json:"background"`
		Stream     bool            `json:"stream"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, Failure{Status: 400, Type: "invalid_request_error", Message: "bad JSON: " + err.Error()})
		return
	}
	if f, ok := s.failure(); ok {
		writeError(w, f)
		return
	}
	if !req.Background || !req.Stream {
		writeError(w, Failure{Status: 400, Type: "invalid_request_error", Message: "openaitest serves background streaming responses only"})
		return
	}
	last := ""
	var text string
	if json.Unmarshal(req.Input, &text) == nil {
		last = text
	} else {
		var items []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		_ = json.Unmarshal(req.Input, &items)
		for _, it := range items {
			if it.Role == "user" && json.Unmarshal(it.Content, &text) == nil {
				last = text
			}
		}
	}
	resp := s.newResponse(req.Model, s.reply(last))
	st := newStreamer(w, r, &s.opts, s.firstStream())
	s.play(st, resp, -1)
}

// newResponse scripts a response's events and final state.
func (s *Server) newResponse(model, text string) *response {
	s.mu.Lock()
	s.nextID++
	id := fmt.Sprintf("resp_test%d", s.nextID)
	s.mu.Unlock()
	resp := &response{id: id, status: "in_progress"}
	obj := func(status string, output []any) map[string]any {
		o := map[string]any{"id": id, "object": "response", "status": status, "model": model, "background": true, "output": output, "error": nil, "incomplete_details": nil}
		if status == "completed" {
			o["usage"] = map[string]any{"input_tokens": 3, "output_tokens": len(s.chunks(text))}
		}
		return o
	}
	add := func(ev map[string]any) {
		ev["sequence_number"] = len(resp.events)
		resp.events = append(resp.events, ev)
	}
	msgID := "msg_" + id
	add(map[string]any{"type": "response.created", "response": obj("queued", []any{})})
	add(map[string]any{"type": "response.in_progress", "response": obj("in_progress", []any{})})
	add(map[string]any{"type": "response.output_item.added", "output_index": 0, "item": map[string]any{"type": "message", "id": msgID, "status": "in_progress", "role": "assistant", "content": []any{}}})
	add(map[string]any{"type": "response.content_part.added", "item_id": msgID, "output_index": 0, "content_index": 0, "part": map[string]any{"type": "output_text", "text": ""}})
	for _, c := range s.chunks(text) {
		add(map[string]any{"type": "response.output_text.delta", "item_id": msgID, "output_index": 0, "content_index": 0, "delta": c})
	}
	add(map[string]any{"type": "response.output_text.done", "item_id": msgID, "output_index": 0, "content_index": 0, "text": text})
	part := map[string]any{"type": "output_text", "text": text, "annotations": []any{}}
	add(map[string]any{"type": "response.content_part.done", "item_id": msgID, "output_index": 0, "content_index": 0, "part": part})
	msg := map[string]any{"type": "message", "id": msgID, "status": "completed", "role": "assistant", "content": []any{part}}
	add(map[string]any{"type": "response.output_item.done", "output_index": 0, "item": msg})
	output := []any{msg}
	for i, tc := range s.opts.ToolCalls {
		itemID := fmt.Sprintf("fc_%s_%d", id, i)
		idx := i + 1
		add(map[string]any{"type": "response.output_item.added", "output_index": idx, "item": map[string]any{"type": "function_call", "id": itemID, "call_id": tc.ID, "name": tc.Name, "arguments": "", "status": "in_progress"}})
		for _, a := range s.chunks(tc.Arguments) {
			add(map[string]any{"type": "response.function_call_arguments.delta", "item_id": itemID, "output_index": idx, "delta": a})
		}
		add(map[string]any{"type": "response.function_call_arguments.done", "item_id": itemID, "output_index": idx, "arguments": tc.Arguments})
		item := map[string]any{"type": "function_call", "id": itemID, "call_id": tc.ID, "name": tc.Name, "arguments": tc.Arguments, "status": "completed"}
		add(map[string]any{"type": "response.output_item.done", "output_index": idx, "item": item})
		output = append(output, item)
	}
	resp.final = obj("completed", output)
	add(map[string]any{"type": "response.completed", "response": resp.final})
	s.mu.Lock()
	s.responses[id] = resp
	s.mu.Unlock()
	return resp
}

// play streams the events after sequence number after.
func (s *Server) play(st *streamer, resp *response, after int) {
	for i, ev := range resp.events {
		if i <= after {
			continue
		}
		s.mu.Lock()
		cancelled := resp.status == "cancelled"
		s.mu.Unlock()
		if cancelled {
			return
		}
		if !st.send(ev["type"].(string), mustJSON(ev)) {
			return
		}
	}
}

// getResponse serves GET /v1/responses/{id}, streaming with stream=true.
func (s *Server) getResponse(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	resp := s.responses[r.PathValue("id")]
	s.gets++
	fail := s.gets <= s.opts.GetFailures
	s.mu.Unlock()
	if fail {
		writeError(w, Failure{Status: 500, Type: "server_error", Message: "The server had an error while processing your request."})
		return
	}
	if resp == nil {
		writeError(w, Failure{Status: 404, Type: "invalid_request_error", Message: "No response found with id '" + r.PathValue("id") + "'."})
		return
	}
	if r.URL.Query().Get("stream") == "true" {
		if s.opts.NoResumeStream {
			writeError(w, Failure{Status: 400, Type: "invalid_request_error", Message: "This response cannot be streamed."})
			return
		}
		after := -1
		if v := r.URL.Query().Get("starting_after"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				writeError(w, Failure{Status: 400, Type: "invalid_request_error", Message: "starting_after must be an integer"})
				return
			}
			after = n
		}
		s.play(newStreamer(w, r, &s.opts, false), resp, after)
		return
	}
	s.mu.Lock()
	var obj map[string]any
	switch {
	case resp.status == "cancelled":
		obj = map[string]any{"id": resp.id, "object": "response", "status": "cancelled", "output": []any{}}
	case resp.polls < s.opts.PollsInProgress:
		resp.polls++
		obj = map[string]any{"id": resp.id, "object": "response", "status": "in_progress", "output": []any{}}
	default:
		obj = resp.final
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(obj)
}

// cancel serves POST /v1/responses/{id}/cancel.
func (s *Server) cancel(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	resp := s.responses[r.PathValue("id")]
	if resp != nil {
		resp.status = "cancelled"
		s.cancelled = append(s.cancelled, resp.id)
	}
	s.mu.Unlock()
	if resp == nil {
		writeError(w, Failure{Status: 404, Type: "invalid_request_error", Message: "No response found."})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"id": resp.id, "object": "response", "status": "cancelled"})
}
