package warren

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/warren-mesh/warren/internal/wire"
)

// recordedTurn is one turn as Claude Code prints it with --output-format stream-json --verbose
// --include-partial-messages (written by hand from the documented shapes), relayed by Warren with seq and
// the cost extension: the model says something, writes a file, then answers.
const recordedTurn = `{"seq":3,"type":"control","payload":{"action":"session_info","data":{"state":"processing","sessionId":"s1"}}}
{"seq":4,"type":"system","subtype":"init","cwd":"/workspace","session_id":"5d0c7a52-8d0e-4b8e-9d39-0b8f0f3b7a11","tools":["Task","Bash","Glob","Grep","Read","Edit","Write","WebFetch","TodoWrite","WebSearch","mcp__warren__lookup"],"mcp_servers":[{"name":"warren","status":"connected"}],"model":"claude-sonnet-4-5-20250929","permissionMode":"bypassPermissions","slash_commands":["compact","context","cost"],"apiKeySource":"ANTHROPIC_API_KEY","claude_code_version":"2.0.14","output_style":"default","agents":["general-purpose"],"uuid":"6c9d3a9e-1f7e-4f54-8d8a-1a2b3c4d5e6f"}
{"seq":5,"type":"stream_event","event":{"type":"message_start","message":{"id":"msg_01AbC","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":3,"cache_creation_input_tokens":1024,"cache_read_input_tokens":12000,"output_tokens":1,"service_tier":"standard"}}},"session_id":"5d0c7a52-8d0e-4b8e-9d39-0b8f0f3b7a11","parent_tool_use_id":null,"uuid":"a1"}
{"seq":6,"type":"stream_event","event":{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}},"session_id":"5d0c7a52-8d0e-4b8e-9d39-0b8f0f3b7a11","parent_tool_use_id":null,"uuid":"a2"}
{"seq":7,"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"I'll create "}},"session_id":"5d0c7a52-8d0e-4b8e-9d39-0b8f0f3b7a11","parent_tool_use_id":null,"uuid":"a3"}
{"seq":8,"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"the file."}},"session_id":"5d0c7a52-8d0e-4b8e-9d39-0b8f0f3b7a11","parent_tool_use_id":null,"uuid":"a4"}
{"seq":9,"type":"stream_event","event":{"type":"content_block_stop","index":0},"session_id":"5d0c7a52-8d0e-4b8e-9d39-0b8f0f3b7a11","parent_tool_use_id":null,"uuid":"a5"}
{"seq":10,"type":"assistant","message":{"id":"msg_01AbC","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{"type":"text","text":"I'll create the file."}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":3,"cache_creation_input_tokens":1024,"cache_read_input_tokens":12000,"output_tokens":1,"service_tier":"standard"}},"parent_tool_use_id":null,"session_id":"5d0c7a52-8d0e-4b8e-9d39-0b8f0f3b7a11","uuid":"a6"}
{"seq":11,"type":"stream_event","event":{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01Wr","name":"Write","input":{}}},"session_id":"5d0c7a52-8d0e-4b8e-9d39-0b8f0f3b7a11","parent_tool_use_id":null,"uuid":"a7"}
{"seq":12,"type":"stream_event","event":{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"file_path\": \"/workspace/hello.txt\", \"content\": \"hello\\n\"}"}},"session_id":"5d0c7a52-8d0e-4b8e-9d39-0b8f0f3b7a11","parent_tool_use_id":null,"uuid":"a8"}
{"seq":13,"type":"assistant","message":{"id":"msg_01AbC","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{"type":"tool_use","id":"toolu_01Wr","name":"Write","input":{"file_path":"/workspace/hello.txt","content":"hello\n"}}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":3,"cache_creation_input_tokens":1024,"cache_read_input_tokens":12000,"output_tokens":1,"service_tier":"standard"}},"parent_tool_use_id":null,"session_id":"5d0c7a52-8d0e-4b8e-9d39-0b8f0f3b7a11","uuid":"a9"}
{"seq":14,"type":"stream_event","event":{"type":"content_block_stop","index":1},"session_id":"5d0c7a52-8d0e-4b8e-9d39-0b8f0f3b7a11","parent_tool_use_id":null,"uuid":"b1"}
{"seq":15,"type":"stream_event","event":{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":87}},"session_id":"5d0c7a52-8d0e-4b8e-9d39-0b8f0f3b7a11","parent_tool_use_id":null,"uuid":"b2"}
{"seq":16,"type":"stream_event","event":{"type":"message_stop"},"session_id":"5d0c7a52-8d0e-4b8e-9d39-0b8f0f3b7a11","parent_tool_use_id":null,"uuid":"b3"}
{"seq":17,"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_01Wr","type":"tool_result","content":"File created successfully at: /workspace/hello.txt"}]},"parent_tool_use_id":null,"session_id":"5d0c7a52-8d0e-4b8e-9d39-0b8f0f3b7a11","uuid":"b4","tool_use_result":{"type":"create","filePath":"/workspace/hello.txt","content":"hello\n","structuredPatch":[]}}
{"seq":18,"type":"assistant","message":{"id":"msg_01DeF","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{"type":"thinking","thinking":"Done; say so.","signature":"EqQBCkYIBxgCKkB"},{"type":"text","text":"Created "},{"type":"text","text":"hello.txt."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":6,"cache_creation_input_tokens":0,"cache_read_input_tokens":24000,"output_tokens":123}},"parent_tool_use_id":null,"session_id":"5d0c7a52-8d0e-4b8e-9d39-0b8f0f3b7a11","uuid":"b5"}
{"seq":19,"type":"result","subtype":"success","is_error":false,"duration_ms":8123,"duration_api_ms":7450,"num_turns":3,"result":"Created hello.txt.","session_id":"5d0c7a52-8d0e-4b8e-9d39-0b8f0f3b7a11","total_cost_usd":0.0131,"usage":{"input_tokens":9,"cache_creation_input_tokens":1024,"cache_read_input_tokens":36000,"output_tokens":210,"server_tool_use":{"web_search_requests":0},"service_tier":"standard"},"modelUsage":{"claude-sonnet-4-5-20250929":{"inputTokens":9,"outputTokens":210,"cacheReadInputTokens":36000,"cacheCreationInputTokens":1024,"webSearchRequests":0,"costUSD":0.0131,"contextWindow":200000}},"permission_denials":[],"uuid":"b6","cost":{"ai_microdollars":12345,"compute_seconds":3.2,"models":{"claude-sonnet-4-5-20250929":{"input_tokens":9,"output_tokens":210,"cache_read_input_tokens":36000,"cache_creation_input_tokens":1024,"microdollars":12345}}}}
{"seq":20,"type":"control","payload":{"action":"session_info","data":{"state":"ready","sessionId":"s1"}}}`

func recordedEvents(t testing.TB) []Event {
	t.Helper()
	var evs []Event
	for line := range strings.SplitSeq(recordedTurn, "\n") {
		ev, err := decodeEvent([]byte(line))
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		evs = append(evs, ev)
	}
	return evs
}

func TestTypedEventsRecordedTurn(t *testing.T) {
	evs := recordedEvents(t)

	info, ok := evs[0].SessionInfo()
	if !ok || info.State != StateProcessing || info.SessionID != "s1" {
		t.Fatalf("SessionInfo = %+v, %v", info, ok)
	}
	if _, ok := evs[0].Ready(); ok {
		t.Error("session_info decoded as ready")
	}

	sys, ok := evs[1].System()
	if !ok || sys.Subtype != "init" || sys.Cwd != "/workspace" || sys.Model != "claude-sonnet-4-5-20250929" ||
		len(sys.Tools) != 11 || sys.Tools[1] != "Bash" || sys.SessionID != "5d0c7a52-8d0e-4b8e-9d39-0b8f0f3b7a11" ||
		sys.ClaudeCodeVersion != "2.0.14" || sys.PermissionMode != "bypassPermissions" ||
		!reflect.DeepEqual(sys.MCPServers, []MCPServerStatus{{"warren", "connected"}}) {
		t.Fatalf("System = %+v, %v", sys, ok)
	}

	start, ok := evs[2].StreamEvent()
	if !ok || start.Event.Type != "message_start" || start.Event.Message == nil || start.Event.Message.ID != "msg_01AbC" ||
		start.Event.Message.Usage.CacheReadInputTokens != 12000 || start.ParentToolUseID != "" {
		t.Fatalf("message_start = %+v, %v", start, ok)
	}
	if _, ok := start.TextDelta(); ok {
		t.Error("message_start has a text delta")
	}
	var deltas string
	for _, ev := range evs {
		if se, ok := ev.StreamEvent(); ok {
			if d, ok := se.TextDelta(); ok {
				deltas += d
			}
		}
	}
	if deltas != "I'll create the file." {
		t.Errorf("text deltas = %q", deltas)
	}
	inputDelta, _ := evs[9].StreamEvent()
	if d := inputDelta.Event.Delta; d == nil || d.Type != "input_json_delta" || !json.Valid([]byte(d.PartialJSON)) {
		t.Errorf("input_json_delta = %+v", d)
	}
	blockStart, _ := evs[8].StreamEvent()
	if cb := blockStart.Event.ContentBlock; cb == nil || cb.Type != BlockToolUse || cb.Name != "Write" || cb.ID != "toolu_01Wr" {
		t.Errorf("content_block_start = %+v", cb)
	}
	msgDelta, _ := evs[12].StreamEvent()
	if msgDelta.Event.Delta.StopReason != "tool_use" || msgDelta.Event.Usage.OutputTokens != 87 ||
		!strings.Contains(string(msgDelta.Event.Raw), `"message_delta"`) {
		t.Errorf("message_delta = %+v", msgDelta.Event)
	}

	text, ok := evs[7].Assistant()
	if !ok || text.Text() != "I'll create the file." || text.Message.ID != "msg_01AbC" || len(text.ToolUses()) != 0 ||
		text.Message.Usage == nil || text.Message.Usage.CacheCreationInputTokens != 1024 {
		t.Fatalf("Assistant text = %+v, %v", text, ok)
	}
	tool, _ := evs[10].Assistant()
	uses := tool.ToolUses()
	if len(uses) != 1 || uses[0].Name != "Write" || uses[0].ID != "toolu_01Wr" || tool.Text() != "" {
		t.Fatalf("ToolUses = %+v", uses)
	}
	var input struct {
		FilePath string `json:"file_path"`
	}
	if err := json.Unmarshal(uses[0].Input, &input); err != nil || input.FilePath != "/workspace/hello.txt" {
		t.Errorf("tool input %s: %v", uses[0].Input, err)
	}
	final, _ := evs[15].Assistant()
	if final.Text() != "Created hello.txt." || final.Message.StopReason != "end_turn" ||
		final.Message.Content[0].Type != BlockThinking || final.Message.Content[0].Thinking != "Done; say so." ||
		final.Message.Content[0].Signature == "" {
		t.Errorf("final assistant = %+v", final.Message)
	}

	user, ok := evs[14].User()
	if !ok {
		t.Fatal("User not ok")
	}
	results := user.ToolResults()
	if len(results) != 1 || results[0].ToolUseID != "toolu_01Wr" || results[0].IsError ||
		results[0].ResultText() != "File created successfully at: /workspace/hello.txt" {
		t.Fatalf("ToolResults = %+v", results)
	}
	if !strings.Contains(string(user.ToolUseResult), `"filePath"`) {
		t.Errorf("ToolUseResult = %s", user.ToolUseResult)
	}

	res, ok := evs[16].Result()
	if !ok || res.Subtype != ResultSuccess || res.IsError || res.Result != "Created hello.txt." || res.DurationMs != 8123 ||
		res.DurationAPIMs != 7450 || res.NumTurns != 3 || res.TotalCostUSD != 0.0131 || res.Usage.OutputTokens != 210 ||
		res.Usage.CacheReadInputTokens != 36000 || res.ModelUsage["claude-sonnet-4-5-20250929"].ContextWindow != 200000 {
		t.Fatalf("Result = %+v, %v", res, ok)
	}
	want := &Cost{AIMicrodollars: 12345, ComputeSeconds: 3.2, Models: map[string]ModelCost{
		"claude-sonnet-4-5-20250929": {InputTokens: 9, OutputTokens: 210, CacheReadInputTokens: 36000,
			CacheCreationInputTokens: 1024, Microdollars: 12345},
	}}
	if !reflect.DeepEqual(res.Cost, want) {
		t.Fatalf("Cost = %+v, want %+v", res.Cost, want)
	}
	if res.CostUSD() != 0.012345 || res.Cost.Total() != want.Models["claude-sonnet-4-5-20250929"] {
		t.Errorf("CostUSD = %v, Total = %+v", res.CostUSD(), res.Cost.Total())
	}

	// Each accessor answers only for its own type.
	for i, ev := range evs {
		n := 0
		for _, ok := range []bool{ok1(ev.System()), ok1(ev.Assistant()), ok1(ev.User()), ok1(ev.StreamEvent()),
			ok1(ev.Result()), ok1(ev.SessionInfo()), ok1(ev.Ready())} {
			if ok {
				n++
			}
		}
		if n != 1 {
			t.Errorf("event %d (%s) decoded by %d accessors", i, ev.Type, n)
		}
	}
}

func ok1[T any](_ T, ok bool) bool { return ok }

func TestTypedEventsLenient(t *testing.T) {
	tests := []struct {
		name  string
		line  string
		check func(t *testing.T, ev Event)
	}{
		{"result with error subtype and no cost", `{"type":"result","subtype":"error_max_budget_usd","is_error":true,"duration_ms":61000,"duration_api_ms":58000,"num_turns":7,"session_id":"x","total_cost_usd":0.5,"usage":{"input_tokens":10,"output_tokens":20},"errors":["Reached maximum budget ($0.50)"],"permission_denials":[{"tool_name":"Bash","tool_use_id":"toolu_9","tool_input":{"command":"rm -rf /"}}]}`,
			func(t *testing.T, ev Event) {
				r, ok := ev.Result()
				if !ok || r.Subtype != ResultErrorMaxBudget || !r.IsError || r.Cost != nil || r.CostUSD() != 0.5 ||
					len(r.Errors) != 1 || len(r.PermissionDenials) != 1 || r.PermissionDenials[0].ToolName != "Bash" {
					t.Fatalf("Result = %+v, %v", r, ok)
				}
			}},
		{"fields of unexpected types are left empty", `{"type":"result","subtype":"success","duration_ms":"soon","num_turns":2.5,"result":{"text":"x"},"total_cost_usd":0.25,"cost":{"ai_microdollars":250000,"models":[1,2]},"usage":null,"brand_new_field":{"a":[1]}}`,
			func(t *testing.T, ev Event) {
				r, ok := ev.Result()
				if !ok || r.Subtype != ResultSuccess || r.DurationMs != 0 || r.NumTurns != 0 || r.Result != "" ||
					r.TotalCostUSD != 0.25 || r.Cost == nil || r.Cost.AIMicrodollars != 250000 || r.Cost.Models != nil {
					t.Fatalf("Result = %+v, %v", r, ok)
				}
			}},
		{"user prompt with string content", `{"type":"user","message":{"role":"user","content":"hello"},"parent_tool_use_id":null,"session_id":"x"}`,
			func(t *testing.T, ev Event) {
				u, ok := ev.User()
				if !ok || u.Text() != "hello" || len(u.ToolResults()) != 0 {
					t.Fatalf("User = %+v, %v", u, ok)
				}
			}},
		{"tool result with blocks and error", `{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","is_error":true,"content":[{"type":"text","text":"line 1"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}},{"type":"text","text":"line 2"}]}]},"parent_tool_use_id":"toolu_task","session_id":"x"}`,
			func(t *testing.T, ev Event) {
				u, _ := ev.User()
				rs := u.ToolResults()
				if len(rs) != 1 || !rs[0].IsError || rs[0].ResultText() != "line 1\n[image]\nline 2" || u.ParentToolUseID != "toolu_task" {
					t.Fatalf("ToolResults = %+v", rs)
				}
			}},
		{"unknown and malformed blocks survive", `{"type":"assistant","message":{"id":"m","content":[{"type":"server_tool_use","id":"s1","name":"web_search","input":{"query":"go"}},"stray string",{"type":"text","text":7},{"type":"text","text":"ok"}]}}`,
			func(t *testing.T, ev Event) {
				a, ok := ev.Assistant()
				if !ok || len(a.Message.Content) != 4 || a.Text() != "ok" || a.Message.Content[0].Type != "server_tool_use" ||
					string(a.Message.Content[1].Raw) != `"stray string"` || !strings.Contains(string(a.Message.Content[0].Raw), "web_search") {
					t.Fatalf("Assistant = %+v, %v", a, ok)
				}
			}},
		{"assistant whose message is not an object", `{"type":"assistant","message":"oops"}`,
			func(t *testing.T, ev Event) {
				a, ok := ev.Assistant()
				if !ok || a.Text() != "" || a.Message.Content != nil {
					t.Fatalf("Assistant = %+v, %v", a, ok)
				}
			}},
		{"session_info in the flat form", `{"type":"control","action":"session_info","data":{"state":"waiting_tool"}}`,
			func(t *testing.T, ev Event) {
				if info, ok := ev.SessionInfo(); !ok || info.State != StateWaitingTool {
					t.Fatalf("SessionInfo = %+v, %v", info, ok)
				}
			}},
		{"ready", `{"type":"control","payload":{"action":"ready","data":{"sessionId":"s9","region":"eu","model":"m"}}}`,
			func(t *testing.T, ev Event) {
				if rd, ok := ev.Ready(); !ok || *rd != (ReadyInfo{SessionID: "s9", Region: "eu", Model: "m"}) {
					t.Fatalf("Ready = %+v, %v", rd, ok)
				}
			}},
		{"other types are not agent events", `{"type":"tool_call","payload":{"callId":"c"}}`,
			func(t *testing.T, ev Event) {
				if ok1(ev.Result()) || ok1(ev.Assistant()) || ok1(ev.SessionInfo()) || ok1(ev.System()) {
					t.Fatal("a tool_call decoded as an agent event")
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, err := decodeEvent([]byte(tt.line))
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, ev)
		})
	}
	// An Event built by hand with a Raw that is not an object.
	if ok1(Event{Type: EventResult, Raw: json.RawMessage(`[1]`)}.Result()) {
		t.Error("Result accepted a non-object")
	}
}

func TestPrompt(t *testing.T) {
	lines := strings.Split(recordedTurn, "\n")
	srv := fakeEdge(t, func(ctx context.Context, c *websocket.Conn, r *http.Request) {
		readMsg(ctx, t, c)
		ready(ctx, t, c, 1)
		// Turn 1: the recorded turn, ending with a result and then session_info ready.
		if m := readMsg(ctx, t, c); m["type"] != "user" {
			t.Errorf("want the prompt, got %v", m)
		}
		for _, l := range lines {
			if err := c.Write(ctx, websocket.MessageText, []byte(l)); err != nil {
				t.Errorf("write: %v", err)
			}
		}
		// Turn 2: interrupted; no result, the session goes back to ready.
		readMsg(ctx, t, c)
		send(ctx, t, c, 21, wire.Control(wire.ActionSessionInfo, map[string]any{"state": "processing"}))
		send(ctx, t, c, 22, []byte(`{"type":"assistant","message":{"content":[{"type":"text","text":"part"}]}}`))
		if m := readMsg(ctx, t, c); payload(m)["action"] != "interrupt" {
			t.Errorf("want interrupt, got %v", m)
		}
		send(ctx, t, c, 23, wire.Control(wire.ActionSessionInfo, map[string]any{"state": "ready"}))
		// Turn 3: the agent fails.
		readMsg(ctx, t, c)
		send(ctx, t, c, 24, wire.Control(wire.ActionSessionInfo, map[string]any{"state": "processing"}))
		send(ctx, t, c, 25, wire.ErrorMessage(wire.Errorf(wire.Unavailable, "no agent configured")))
		send(ctx, t, c, 26, wire.Control(wire.ActionSessionInfo, map[string]any{"state": "ready"}))
		// Turn 4: the budget runs out and the server closes the channel.
		readMsg(ctx, t, c)
		c.Close(websocket.StatusCode(wire.BudgetExceeded.CloseCode()), `{"code":"budget_exceeded","message":"spent"}`)
	})
	s, err := dial(t, srv, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()

	var seqs []int64
	var res *ResultEvent
	for ev, err := range s.Prompt(ctx, "write hello.txt") {
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, ev.Seq)
		if r, ok := ev.Result(); ok {
			res = r
		}
	}
	if res == nil || seqs[0] != 1 || seqs[len(seqs)-1] != 19 || len(seqs) != 18 {
		t.Fatalf("turn 1 seqs %v, result %v", seqs, res)
	}

	var got []string
	for ev, err := range s.Prompt(ctx, "something long") {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev.Type)
		if ev.Type == EventAssistant {
			if err := s.Interrupt(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The session_info ready left over from turn 1 comes first and does not end turn 2.
	if want := []string{"control", "control", "assistant", "control"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("turn 2 events %v, want %v", got, want)
	}

	var errs []error
	for _, err := range s.Prompt(ctx, "fail") {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) != 1 || !IsCode(errs[0], CodeUnavailable) {
		t.Fatalf("turn 3 errors %v", errs)
	}

	errs = nil
	for _, err := range s.Prompt(ctx, "spend") {
		if err != nil {
			errs = append(errs, err)
		}
	}
	// The leftover session_info of turn 3 is yielded, then the close.
	if len(errs) != 1 || !IsCode(errs[0], CodeBudgetExceeded) {
		t.Fatalf("turn 4 errors %v", errs)
	}
	for _, err := range s.Prompt(ctx, "again") {
		if !IsCode(err, CodeBudgetExceeded) {
			t.Fatalf("Prompt after the close = %v", err)
		}
	}
}

func TestPromptStreamEndsEarly(t *testing.T) {
	srv := fakeEdge(t, func(ctx context.Context, c *websocket.Conn, r *http.Request) {
		readMsg(ctx, t, c)
		ready(ctx, t, c, 1)
		readMsg(ctx, t, c)
		send(ctx, t, c, 2, []byte(`{"type":"assistant","message":{"content":[]}}`))
		c.Close(websocket.StatusNormalClosure, "")
	})
	s, err := dial(t, srv, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var last error
	n := 0
	for _, err := range s.Prompt(context.Background(), "hi") {
		n++
		last = err
	}
	if n != 3 || !errors.Is(last, ErrClosed) {
		t.Fatalf("%d elements, last error %v; want ready, assistant, then ErrClosed", n, last)
	}
}

// FuzzTypedEvents feeds arbitrary server messages to every typed accessor and helper: none may panic, and
// an accessor answers only for its own event type.
func FuzzTypedEvents(f *testing.F) {
	for line := range strings.SplitSeq(recordedTurn, "\n") {
		f.Add([]byte(line))
	}
	for _, s := range []string{
		`{"type":"result","cost":null,"usage":null,"modelUsage":{"m":null}}`,
		`{"type":"result","cost":{"models":{"m":{"input_tokens":1e300}}}}`,
		`{"type":"stream_event","event":{"type":"content_block_delta","delta":null}}`,
		`{"type":"stream_event","event":[]}`,
		`{"type":"assistant","message":{"content":"text"}}`,
		`{"type":"assistant","message":{"content":[null,1,{"type":"tool_result","content":[[{"type":"text"}]]}]}}`,
		`{"type":"user","message":{"content":[{"type":"tool_result","content":{"type":"text","text":"x"}}]}}`,
		`{"type":"control","payload":null,"action":"session_info","data":"x"}`,
		`{"type":"system"}`,
		`{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, err := decodeEvent(b)
		if err != nil {
			return
		}
		if sys, ok := ev.System(); ok {
			_ = sys.Tools
		}
		if a, ok := ev.Assistant(); ok {
			_ = a.Text()
			for _, u := range a.ToolUses() {
				_ = u.ResultText()
			}
		}
		if u, ok := ev.User(); ok {
			_ = u.Text()
			for _, r := range u.ToolResults() {
				_ = r.ResultText()
			}
		}
		if s, ok := ev.StreamEvent(); ok {
			s.TextDelta()
			if s.Event.Message != nil {
				_ = s.Event.Message.Text()
			}
			if s.Event.ContentBlock != nil {
				_ = s.Event.ContentBlock.ResultText()
			}
		}
		if r, ok := ev.Result(); ok {
			_ = r.CostUSD()
			if r.Cost != nil {
				_ = r.Cost.Total()
			}
		}
		ev.SessionInfo()
		ev.Ready()
		ev.ToolCall()
		ev.Err()
		for typ, ok := range map[string]bool{
			EventSystem: ok1(ev.System()), EventAssistant: ok1(ev.Assistant()), EventUser: ok1(ev.User()),
			EventStream: ok1(ev.StreamEvent()), EventResult: ok1(ev.Result()),
			EventControl: ok1(ev.SessionInfo()) || ok1(ev.Ready()),
		} {
			if ok && ev.Type != typ {
				t.Fatalf("event of type %q decoded as %q", ev.Type, typ)
			}
		}
	})
}
