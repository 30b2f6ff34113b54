package modelserver_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/modelserver"
)

const envReminder = "<system-reminder>\n# Environment\nYou have been invoked in the following environment: \n - Primary working directory: /work/dir\n - Platform: linux\n</system-reminder>"

// body builds a Messages API request body.
func body(t testing.TB, stream bool, messages ...any) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"model":      "claude-sonnet-4-5",
		"max_tokens": 32000,
		"stream":     stream,
		"system":     []any{map[string]any{"type": "text", "text": "You are a test."}},
		"tools":      []any{map[string]any{"name": "Write"}, map[string]any{"name": "Bash"}},
		"messages":   messages,
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func userText(texts ...string) map[string]any {
	var blocks []any
	for _, t := range texts {
		blocks = append(blocks, map[string]any{"type": "text", "text": t})
	}
	return map[string]any{"role": "user", "content": blocks}
}

func assistant(blocks ...any) map[string]any {
	return map[string]any{"role": "assistant", "content": blocks}
}

func toolResults(ids ...string) map[string]any {
	var blocks []any
	for _, id := range ids {
		blocks = append(blocks, map[string]any{"type": "tool_result", "tool_use_id": id, "content": "ok"})
	}
	return map[string]any{"role": "user", "content": blocks}
}

// post sends one request through the handler.
func post(t testing.TB, s *modelserver.Server, path, scenario, body string, header ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	req.Header.Set("X-Api-Key", "test-key")
	req.Header.Set("Content-Type", "application/json")
	if scenario != "" {
		req.Header.Set(modelserver.HeaderScenario, scenario)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i+1] == "" {
			req.Header.Del(header[i])
		} else {
			req.Header.Set(header[i], header[i+1])
		}
	}
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	return rec
}

type sseEvent struct {
	name string
	data map[string]any
}

// parseSSE reads a whole event stream, checking that every event's data is JSON naming the event's type.
func parseSSE(t testing.TB, r io.Reader) []sseEvent {
	t.Helper()
	var events []sseEvent
	var name string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var data map[string]any
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &data); err != nil {
				t.Fatalf("event %s: data is not JSON: %v: %s", name, err, line)
			}
			if data["type"] != name {
				t.Fatalf("event %s carries type %v", name, data["type"])
			}
			events = append(events, sseEvent{name, data})
		case line == "":
		default:
			t.Fatalf("unexpected SSE line %q", line)
		}
	}
	return events
}

// message is what a stream adds up to, assembled as a client would.
type message struct {
	start      map[string]any
	blocks     []map[string]any // text blocks get "text", tool_use blocks get "input" parsed from partial_json
	stopReason string
	output     float64
	names      []string
}

func assemble(t testing.TB, events []sseEvent) message {
	t.Helper()
	var m message
	partial := map[int]string{}
	for _, e := range events {
		m.names = append(m.names, e.name)
		switch e.name {
		case "message_start":
			m.start = e.data["message"].(map[string]any)
		case "content_block_start":
			m.blocks = append(m.blocks, e.data["content_block"].(map[string]any))
		case "content_block_delta":
			i := int(e.data["index"].(float64))
			d := e.data["delta"].(map[string]any)
			switch d["type"] {
			case "text_delta":
				m.blocks[i]["text"] = m.blocks[i]["text"].(string) + d["text"].(string)
			case "input_json_delta":
				partial[i] += d["partial_json"].(string)
			default:
				t.Fatalf("unknown delta %v", d)
			}
		case "content_block_stop":
			i := int(e.data["index"].(float64))
			if p, ok := partial[i]; ok {
				var in map[string]any
				if err := json.Unmarshal([]byte(p), &in); err != nil {
					t.Fatalf("tool input %q: %v", p, err)
				}
				m.blocks[i]["input"] = in
			}
		case "message_delta":
			m.stopReason = e.data["delta"].(map[string]any)["stop_reason"].(string)
			m.output = e.data["usage"].(map[string]any)["output_tokens"].(float64)
		}
	}
	return m
}

func streamMessage(t testing.TB, s *modelserver.Server, scenario, body string) message {
	t.Helper()
	rec := post(t, s, "/v1/messages", scenario, body)
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("content type %q", ct)
	}
	return assemble(t, parseSSE(t, rec.Body))
}

func TestStreamShape(t *testing.T) {
	s := modelserver.New(modelserver.Options{})
	b := body(t, true, userText(envReminder, "hello"))
	m := streamMessage(t, s, "plain", b)

	want := []string{"message_start", "ping", "content_block_start"}
	if !slices.Equal(m.names[:3], want) {
		t.Errorf("events start %v, want %v", m.names[:3], want)
	}
	if tail := m.names[len(m.names)-3:]; !slices.Equal(tail, []string{"content_block_stop", "message_delta", "message_stop"}) {
		t.Errorf("events end %v", tail)
	}
	if n := strings.Count(strings.Join(m.names, " "), "content_block_delta"); n < 3 {
		t.Errorf("%d text deltas, want several", n)
	}
	for _, k := range []string{"id", "model", "role", "content", "usage"} {
		if _, ok := m.start[k]; !ok {
			t.Errorf("message_start lacks %q: %v", k, m.start)
		}
	}
	if m.start["model"] != "claude-sonnet-4-5" || m.start["role"] != "assistant" || m.start["stop_reason"] != nil {
		t.Errorf("message_start = %v", m.start)
	}
	u := m.start["usage"].(map[string]any)
	if u["input_tokens"] != float64(len(b)/4) || u["output_tokens"] != 1.0 || u["cache_read_input_tokens"] != 0.0 || u["cache_creation_input_tokens"] != 0.0 {
		t.Errorf("message_start usage = %v", u)
	}
	if m.stopReason != "end_turn" || m.output < 1 {
		t.Errorf("stop %q output %v", m.stopReason, m.output)
	}
	if len(m.blocks) != 1 || !strings.HasPrefix(m.blocks[0]["text"].(string), "Hello from the Warren model server.") {
		t.Errorf("blocks = %v", m.blocks)
	}
}

func TestScenarioSteps(t *testing.T) {
	write := func(path, content string) map[string]any {
		return map[string]any{"name": "Write", "input": map[string]any{"file_path": path, "content": content}}
	}
	bash := func(cmd string) map[string]any { return map[string]any{"name": "Bash", "command": cmd} }
	text := func(s string) map[string]any { return map[string]any{"text": s} }
	tests := []struct {
		scenario string
		prompt   string
		want     []map[string]map[string]any // per step, the blocks by index
	}{
		{"write", "anything", []map[string]map[string]any{{"0": write("/work/dir/hello.txt", "hi")}, {"0": text("Done.")}}},
		{"bash", "anything", []map[string]map[string]any{{"0": bash("echo from-bash > bash.txt && cat bash.txt")}, {"0": text("Done.")}}},
		{"write_bash", "anything", []map[string]map[string]any{
			{"0": write("/work/dir/hello.txt", "hi")}, {"0": bash("cat hello.txt")}, {"0": text("Done.")},
		}},
		{"two_tools", "anything", []map[string]map[string]any{
			{"0": write("/work/dir/a.txt", "a"), "1": write("/work/dir/b.txt", "b")}, {"0": text("Done.")},
		}},
		{"auto", "create notes/todo.txt containing buy milk", []map[string]map[string]any{{"0": write("/work/dir/notes/todo.txt", "buy milk")}, {"0": text("Done.")}}},
		{"auto", `create /abs/x.txt containing "quoted text"`, []map[string]map[string]any{{"0": write("/abs/x.txt", "quoted text")}, {"0": text("Done.")}}},
		{"auto", "run ls -la | wc -l", []map[string]map[string]any{{"0": bash("ls -la | wc -l")}, {"0": text("Done.")}}},
		{"auto", "what is 2+2?", []map[string]map[string]any{{"0": text("You said: what is 2+2?")}}},
		{"huge_usage", "x", []map[string]map[string]any{{"0": text("This short answer reports an enormous usage.")}}},
	}
	for _, tt := range tests {
		t.Run(tt.scenario+"/"+tt.prompt, func(t *testing.T) {
			s := modelserver.New(modelserver.Options{})
			// An earlier finished turn in the history must not disturb the new one.
			history := []any{
				map[string]any{"role": "system", "content": "tolerated"},
				userText(envReminder, "an earlier prompt"),
				assistant(map[string]any{"type": "text", "text": "an earlier answer"}),
				userText("<system-reminder>\nnoise\n</system-reminder>", tt.prompt),
			}
			for step, want := range tt.want {
				m := streamMessage(t, s, tt.scenario, body(t, true, history...))
				if len(m.blocks) != len(want) {
					t.Fatalf("step %d: %d blocks %v, want %d", step, len(m.blocks), m.blocks, len(want))
				}
				var ids []string
				var content []any
				for i, b := range m.blocks {
					w := want[fmt.Sprint(i)]
					switch b["type"] {
					case "text":
						if b["text"] != w["text"] {
							t.Errorf("step %d block %d: text %q, want %q", step, i, b["text"], w["text"])
						}
					case "tool_use":
						id := b["id"].(string)
						ids = append(ids, id)
						in := b["input"].(map[string]any)
						if b["name"] != w["name"] {
							t.Errorf("step %d block %d: tool %v, want %v", step, i, b["name"], w["name"])
						}
						if cmd, ok := w["command"]; ok && in["command"] != cmd {
							t.Errorf("step %d block %d: command %v, want %v", step, i, in["command"], cmd)
						}
						if wi, ok := w["input"]; ok && fmt.Sprint(in) != fmt.Sprint(wi) {
							t.Errorf("step %d block %d: input %v, want %v", step, i, in, wi)
						}
					}
					content = append(content, b)
				}
				wantStop := "end_turn"
				if len(ids) > 0 {
					wantStop = "tool_use"
				}
				if m.stopReason != wantStop {
					t.Errorf("step %d: stop_reason %q, want %q", step, m.stopReason, wantStop)
				}
				history = append(history, assistant(content...), toolResults(ids...))
			}
		})
	}
}

func TestHugeUsage(t *testing.T) {
	s := modelserver.New(modelserver.Options{})
	m := streamMessage(t, s, "huge_usage", body(t, true, userText("x")))
	if m.output != modelserver.HugeOutputTokens {
		t.Errorf("output_tokens = %v, want %d", m.output, modelserver.HugeOutputTokens)
	}
}

func TestLong(t *testing.T) {
	s := modelserver.New(modelserver.Options{Delay: time.Microsecond})
	m := streamMessage(t, s, "long", body(t, true, userText("x")))
	if words := len(strings.Fields(m.blocks[0]["text"].(string))); words != 200 {
		t.Errorf("%d words", words)
	}
	// auto streams the same answer to modelserver.LongPrompt.
	if a := streamMessage(t, s, "auto", body(t, true, userText(modelserver.LongPrompt))); a.blocks[0]["text"] != m.blocks[0]["text"] {
		t.Errorf("auto answered %q to %q", a.blocks[0]["text"], modelserver.LongPrompt)
	}
	if n := len(m.names); n < 200 {
		t.Errorf("%d events, want one per word", n)
	}
}

// TestLongStopsWhenClientGoes checks that a long stream ends as soon as the client disconnects.
func TestLongStopsWhenClientGoes(t *testing.T) {
	s := modelserver.New(modelserver.Options{Delay: time.Hour})
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(done)
		s.Handler().ServeHTTP(w, r)
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/messages", strings.NewReader(body(t, true, userText("x"))))
	req.Header.Set("X-Api-Key", "k")
	req.Header.Set(modelserver.HeaderScenario, "long")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "event: message_start\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler kept streaming after the client left")
	}
}

func TestNonStreaming(t *testing.T) {
	s := modelserver.New(modelserver.Options{})
	rec := post(t, s, "/v1/messages", "two_tools", body(t, false, userText(envReminder, "x")))
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("status %d %q: %s", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
	var m struct {
		StopReason string `json:"stop_reason"`
		Content    []struct {
			Type, ID, Name string
			Input          map[string]string
		}
		Usage struct {
			InputTokens  int `json:"input_tokens"`
			OutputTokens int `json:"output_tokens"`
		}
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	if m.StopReason != "tool_use" || len(m.Content) != 2 || m.Content[1].Input["file_path"] != "/work/dir/b.txt" || m.Usage.InputTokens == 0 || m.Usage.OutputTokens == 0 {
		t.Errorf("message = %+v", m)
	}
	if m.Content[0].ID == m.Content[1].ID {
		t.Errorf("tool use ids repeat: %s", m.Content[0].ID)
	}
}

func TestErrors(t *testing.T) {
	valid := body(t, true, userText("x"))
	tests := []struct {
		name, scenario, body string
		header               []string
		status               int
		typ                  string
	}{
		{"no key", "plain", valid, []string{"X-Api-Key", ""}, 401, "authentication_error"},
		{"bearer is enough", "plain", valid, []string{"X-Api-Key", "", "Authorization", "Bearer x"}, 200, ""},
		{"not json", "plain", "{", nil, 400, "invalid_request_error"},
		{"null", "plain", "null", nil, 400, "invalid_request_error"},
		{"wrong type", "plain", `{"messages":"no"}`, nil, 400, "invalid_request_error"},
		{"unknown scenario", "nope", valid, nil, 400, "invalid_request_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := modelserver.New(modelserver.Options{})
			rec := post(t, s, "/v1/messages", tt.scenario, tt.body, tt.header...)
			if rec.Code != tt.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tt.status, rec.Body)
			}
			if tt.typ != "" {
				checkError(t, rec, tt.typ)
			}
			if got := len(s.Requests()); got != 1 {
				t.Errorf("%d requests recorded, want 1", got)
			}
		})
	}
}

func checkError(t testing.TB, rec *httptest.ResponseRecorder, typ string) {
	t.Helper()
	var e struct {
		Type  string
		Error struct{ Type, Message string }
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Type != "error" || e.Error.Type != typ || e.Error.Message == "" {
		t.Errorf("error body %s (%v), want type %s", rec.Body, err, typ)
	}
}

func TestFaults(t *testing.T) {
	s := modelserver.New(modelserver.Options{})
	s.Inject(modelserver.Fault{Status: 429, Count: 2, Header: http.Header{"Retry-After": {"7"}}})
	s.Inject(modelserver.Fault{Status: 400, Type: "overloaded_error", Message: "busy"})
	s.Inject(modelserver.Fault{Status: 529})
	b := body(t, true, userText("x"))

	// Side requests do not consume faults.
	side := post(t, s, "/v1/messages", "plain", `{"max_tokens":1,"messages":[{"role":"user","content":"quota"}]}`)
	if side.Code != http.StatusOK {
		t.Fatalf("side request: %d", side.Code)
	}
	for i, want := range []struct {
		status int
		typ    string
	}{{429, "rate_limit_error"}, {429, "rate_limit_error"}, {400, "overloaded_error"}, {529, "overloaded_error"}, {200, ""}} {
		rec := post(t, s, "/v1/messages", "plain", b)
		if rec.Code != want.status {
			t.Fatalf("request %d: status %d, want %d", i, rec.Code, want.status)
		}
		if want.typ != "" {
			checkError(t, rec, want.typ)
		}
		if want.status == 429 && rec.Header().Get("Retry-After") != "7" {
			t.Errorf("request %d: fault header missing", i)
		}
	}

	s.Inject(modelserver.Fault{Status: 500})
	s.Reset()
	if rec := post(t, s, "/v1/messages", "plain", b); rec.Code != http.StatusOK || len(s.Requests()) != 1 {
		t.Errorf("after Reset: status %d, %d requests", rec.Code, len(s.Requests()))
	}
}

func TestDrop(t *testing.T) {
	for _, stream := range []bool{true, false} {
		t.Run(fmt.Sprint("stream=", stream), func(t *testing.T) {
			s := modelserver.New(modelserver.Options{})
			srv := httptest.NewServer(s.Handler())
			defer srv.Close()
			s.Inject(modelserver.Fault{Drop: true})
			do := func() (*http.Response, []byte, error) {
				req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/messages", strings.NewReader(body(t, stream, userText("x"))))
				req.Header.Set("X-Api-Key", "k")
				req.Header.Set(modelserver.HeaderScenario, "plain")
				resp, err := srv.Client().Do(req)
				if err != nil {
					return nil, nil, err
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				return resp, b, err
			}
			resp, b, err := do()
			if err == nil {
				t.Fatalf("dropped request succeeded: %d %s", resp.StatusCode, b)
			}
			if stream && !strings.Contains(string(b), "event: message_start") {
				t.Errorf("the stream did not start before the cut: %q", b)
			}
			if _, _, err := do(); err != nil {
				t.Errorf("request after the fault: %v", err)
			}
		})
	}
}

func TestSideRequests(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		header []string
		main   bool
	}{
		{"probe", `{"model":"claude-haiku-4-5","max_tokens":1,"messages":[{"role":"user","content":"quota"}]}`, nil, false},
		{"cli without tools", `{"model":"claude-haiku-4-5","max_tokens":512,"system":"Generate a title","messages":[{"role":"user","content":"hi"}]}`, []string{"User-Agent", "claude-cli/2.1.330 (external, sdk-cli)"}, false},
		{"other client without tools", `{"model":"claude-haiku-4-5","max_tokens":512,"messages":[{"role":"user","content":"hi"}]}`, nil, true},
		{"cli with tools", body(t, true, userText("hi")), []string{"X-App", "cli"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := modelserver.New(modelserver.Options{})
			rec := post(t, s, "/v1/messages", "write", tt.body, tt.header...)
			if rec.Code != http.StatusOK {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			reqs := s.Requests()
			if len(reqs) != 1 || reqs[0].Main != tt.main {
				t.Fatalf("requests %+v, want one with Main=%v", reqs, tt.main)
			}
			usedTool := strings.Contains(rec.Body.String(), "tool_use")
			if usedTool != tt.main {
				t.Errorf("main=%v but the answer used a tool: %v: %s", tt.main, usedTool, rec.Body)
			}
		})
	}
}

func TestRequestsRecorded(t *testing.T) {
	s := modelserver.New(modelserver.Options{DefaultScenario: "plain"})
	b := `{"model":"m","max_tokens":9,"stream":true,"system":"sys","tools":[{"name":"A"},{"bad":1},{"name":"B"}],"messages":[{"role":"user","content":"hi"}]}`
	post(t, s, "/v1/messages?beta=true", "", b)
	rec := post(t, s, "/v1/messages/count_tokens", "", `{"model":"m","messages":[]}`)
	var ct map[string]int
	if err := json.Unmarshal(rec.Body.Bytes(), &ct); err != nil || ct["input_tokens"] < 1 {
		t.Errorf("count_tokens: %s", rec.Body)
	}
	reqs := s.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	r := reqs[0]
	if r.Path != "/v1/messages" || r.Scenario != "plain" || r.Model != "m" || !r.Stream || r.MaxTokens != 9 ||
		string(r.System) != `"sys"` || !slices.Equal(r.Tools, []string{"A", "B"}) || len(r.Messages) != 1 ||
		string(r.Body) != b || r.Header.Get("X-Api-Key") != "test-key" || !r.Main || r.Time.IsZero() {
		t.Errorf("recorded %+v", r)
	}
	if reqs[1].Path != "/v1/messages/count_tokens" || reqs[1].Main {
		t.Errorf("count_tokens recorded as %+v", reqs[1])
	}
	// Requests returns copies.
	reqs[0].Body[0] = 'X'
	reqs[0].Header.Set("X-Api-Key", "changed")
	if again := s.Requests()[0]; again.Body[0] != '{' || again.Header.Get("X-Api-Key") != "test-key" {
		t.Error("Requests shares memory with the server")
	}
}

func TestOtherPaths(t *testing.T) {
	s := modelserver.New(modelserver.Options{})
	for _, tt := range []struct {
		method, path string
		status       int
	}{
		{http.MethodHead, "/api/hello", 200},
		{http.MethodGet, "/api/hello", 200},
		{http.MethodGet, "/v1/models", 404},
		{http.MethodGet, "/v1/messages", 404},
		{http.MethodGet, "/", 404},
	} {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, nil))
		if rec.Code != tt.status {
			t.Errorf("%s %s: %d, want %d", tt.method, tt.path, rec.Code, tt.status)
		}
		if tt.method == http.MethodGet && !json.Valid(rec.Body.Bytes()) {
			t.Errorf("%s %s: body is not JSON: %s", tt.method, tt.path, rec.Body)
		}
	}
	if len(s.Requests()) != 0 {
		t.Error("other paths were recorded")
	}
}

func TestStartClose(t *testing.T) {
	s := modelserver.New(modelserver.Options{Delay: time.Hour})
	url, err := s.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if url != s.URL() || !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("url %q, URL() %q", url, s.URL())
	}
	if _, err := s.Start("127.0.0.1:0"); !errors.Is(err, modelserver.ErrStarted) {
		t.Errorf("second Start: %v", err)
	}
	// A long stream in flight must not hold Close up.
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/messages", strings.NewReader(body(t, true, userText("x"))))
	req.Header.Set("X-Api-Key", "k")
	req.Header.Set(modelserver.HeaderScenario, "long")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := s.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Error("the long stream ended cleanly after Close")
	}
	if err := s.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
	if _, err := s.Start("127.0.0.1:0"); !errors.Is(err, modelserver.ErrClosed) {
		t.Errorf("Start after Close: %v", err)
	}
}
