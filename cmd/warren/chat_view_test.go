package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	warren "github.com/warren-mesh/warren/sdk"
)

// The recorded turns below are Claude Code stream-json lines (--verbose --include-partial-messages),
// written by hand from the documented shapes and relayed as Warren does: session_info processing before
// the turn's first event and ready after its result (runner/session's hub; the SDKs end a turn at a
// result only after its processing), the cost extension on the result, and seq (added when missing).

// turnStreamed: the model says what it will do, writes a file, runs a command after thinking, then
// answers. Its text arrives as deltas and again in the complete assistant messages.
const turnStreamed = `
{"seq":3,"type":"control","payload":{"action":"session_info","data":{"state":"processing","sessionId":"s1"}}}
{"seq":4,"type":"system","subtype":"init","cwd":"/workspace","session_id":"5d0c7a52","tools":["Task","Bash","Glob","Grep","Read","Edit","Write"],"mcp_servers":[],"model":"claude-sonnet-4-5-20250929","permissionMode":"bypassPermissions","apiKeySource":"ANTHROPIC_API_KEY","claude_code_version":"2.0.14","uuid":"u0"}
{"seq":5,"type":"stream_event","event":{"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"usage":{"input_tokens":3,"cache_creation_input_tokens":1024,"cache_read_input_tokens":12000,"output_tokens":1}}},"session_id":"5d0c7a52","parent_tool_use_id":null,"uuid":"u1"}
{"seq":6,"type":"stream_event","event":{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}},"session_id":"5d0c7a52","parent_tool_use_id":null,"uuid":"u2"}
{"seq":7,"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"I'll create "}},"session_id":"5d0c7a52","parent_tool_use_id":null,"uuid":"u3"}
{"seq":8,"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"the file."}},"session_id":"5d0c7a52","parent_tool_use_id":null,"uuid":"u4"}
{"seq":9,"type":"stream_event","event":{"type":"content_block_stop","index":0},"session_id":"5d0c7a52","parent_tool_use_id":null,"uuid":"u5"}
{"seq":10,"type":"assistant","message":{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{"type":"text","text":"I'll create the file."}],"stop_reason":null,"usage":{"input_tokens":3,"output_tokens":1}},"parent_tool_use_id":null,"session_id":"5d0c7a52","uuid":"u6"}
{"seq":11,"type":"stream_event","event":{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01","name":"Write","input":{}}},"session_id":"5d0c7a52","parent_tool_use_id":null,"uuid":"u7"}
{"seq":12,"type":"stream_event","event":{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"file_path\": \"/workspace/hello.txt\", \"content\": \"hello\\n\"}"}},"session_id":"5d0c7a52","parent_tool_use_id":null,"uuid":"u8"}
{"seq":13,"type":"assistant","message":{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{"type":"tool_use","id":"toolu_01","name":"Write","input":{"file_path":"/workspace/hello.txt","content":"hello\n"}}],"stop_reason":null,"usage":{"input_tokens":3,"output_tokens":1}},"parent_tool_use_id":null,"session_id":"5d0c7a52","uuid":"u9"}
{"seq":14,"type":"stream_event","event":{"type":"content_block_stop","index":1},"session_id":"5d0c7a52","parent_tool_use_id":null,"uuid":"v1"}
{"seq":15,"type":"stream_event","event":{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":87}},"session_id":"5d0c7a52","parent_tool_use_id":null,"uuid":"v2"}
{"seq":16,"type":"stream_event","event":{"type":"message_stop"},"session_id":"5d0c7a52","parent_tool_use_id":null,"uuid":"v3"}
{"seq":17,"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_01","type":"tool_result","content":"File created successfully at: /workspace/hello.txt"}]},"parent_tool_use_id":null,"session_id":"5d0c7a52","uuid":"v4","tool_use_result":{"type":"create","filePath":"/workspace/hello.txt","content":"hello\n"}}
{"seq":18,"type":"stream_event","event":{"type":"message_start","message":{"id":"msg_02","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"usage":{"input_tokens":3,"output_tokens":1}}},"session_id":"5d0c7a52","parent_tool_use_id":null,"uuid":"v5"}
{"seq":19,"type":"stream_event","event":{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}},"session_id":"5d0c7a52","parent_tool_use_id":null,"uuid":"v6"}
{"seq":20,"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Check it."}},"session_id":"5d0c7a52","parent_tool_use_id":null,"uuid":"v7"}
{"seq":21,"type":"stream_event","event":{"type":"content_block_stop","index":0},"session_id":"5d0c7a52","parent_tool_use_id":null,"uuid":"v8"}
{"seq":22,"type":"assistant","message":{"id":"msg_02","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{"type":"thinking","thinking":"Check it.","signature":"EqQB"}],"stop_reason":null,"usage":{"input_tokens":3,"output_tokens":1}},"parent_tool_use_id":null,"session_id":"5d0c7a52","uuid":"v9"}
{"seq":23,"type":"assistant","message":{"id":"msg_02","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{"type":"tool_use","id":"toolu_02","name":"Bash","input":{"command":"cat hello.txt && ls","description":"Show the file"}}],"stop_reason":null,"usage":{"input_tokens":3,"output_tokens":1}},"parent_tool_use_id":null,"session_id":"5d0c7a52","uuid":"w1"}
{"seq":24,"type":"stream_event","event":{"type":"message_stop"},"session_id":"5d0c7a52","parent_tool_use_id":null,"uuid":"w2"}
{"seq":25,"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_02","type":"tool_result","content":"hello\nhello.txt\nnotes.md","is_error":false}]},"parent_tool_use_id":null,"session_id":"5d0c7a52","uuid":"w3","tool_use_result":{"stdout":"hello\nhello.txt\nnotes.md","stderr":"","interrupted":false,"isImage":false}}
{"seq":26,"type":"stream_event","event":{"type":"message_start","message":{"id":"msg_03","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"usage":{"input_tokens":3,"output_tokens":1}}},"session_id":"5d0c7a52","parent_tool_use_id":null,"uuid":"w4"}
{"seq":27,"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Done: hello.txt "}},"session_id":"5d0c7a52","parent_tool_use_id":null,"uuid":"w5"}
{"seq":28,"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"says hello."}},"session_id":"5d0c7a52","parent_tool_use_id":null,"uuid":"w6"}
{"seq":29,"type":"stream_event","event":{"type":"content_block_stop","index":0},"session_id":"5d0c7a52","parent_tool_use_id":null,"uuid":"w7"}
{"seq":30,"type":"stream_event","event":{"type":"message_stop"},"session_id":"5d0c7a52","parent_tool_use_id":null,"uuid":"w8"}
{"seq":31,"type":"assistant","message":{"id":"msg_03","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{"type":"text","text":"Done: hello.txt says hello."}],"stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":9}},"parent_tool_use_id":null,"session_id":"5d0c7a52","uuid":"w9"}
{"seq":32,"type":"result","subtype":"success","is_error":false,"duration_ms":8123,"duration_api_ms":7450,"num_turns":3,"result":"Done: hello.txt says hello.","session_id":"5d0c7a52","total_cost_usd":0.0131,"usage":{"input_tokens":9,"cache_creation_input_tokens":1024,"cache_read_input_tokens":36000,"output_tokens":210,"server_tool_use":{"web_search_requests":0},"service_tier":"standard"},"modelUsage":{"claude-sonnet-4-5-20250929":{"inputTokens":9,"outputTokens":210,"cacheReadInputTokens":36000,"cacheCreationInputTokens":1024,"webSearchRequests":0,"costUSD":0.0131,"contextWindow":200000}},"permission_denials":[],"uuid":"x1","cost":{"ai_microdollars":12300,"compute_seconds":3.2,"models":{"claude-sonnet-4-5-20250929":{"input_tokens":9,"output_tokens":210,"cache_read_input_tokens":36000,"cache_creation_input_tokens":1024,"microdollars":12300}}}}
{"seq":33,"type":"control","payload":{"action":"session_info","data":{"state":"ready","sessionId":"s1"}}}
`

const turnStreamedOut = `I'll create the file.
⏺ Write(hello.txt)
  ⎿  File created successfully at: /workspace/hello.txt
⏺ Bash(cat hello.txt && ls)
  ⎿  hello … +2 lines
Done: hello.txt says hello.
`

// turnFailed: no partial messages (only complete ones), a failing command, and a turn that ends in
// error_during_execution; the result has no cost extension, so the cost comes from total_cost_usd.
const turnFailed = `
{"type":"control","payload":{"action":"session_info","data":{"state":"processing","sessionId":"s1"}}}
{"type":"system","subtype":"init","cwd":"/workspace/","session_id":"5d0c7a52","tools":["Bash"],"model":"claude-sonnet-4-5-20250929"}
{"type":"assistant","message":{"id":"msg_10","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{"type":"text","text":"Let me run the tests."},{"type":"tool_use","id":"toolu_10","name":"Bash","input":{"command":"go test ./...\ngo vet ./..."}}],"stop_reason":"tool_use","usage":{"input_tokens":1200,"output_tokens":20}},"parent_tool_use_id":null,"session_id":"5d0c7a52"}
{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_10","is_error":true,"content":"Exit code 1\n--- FAIL: TestX (0.00s)\nFAIL"}]},"parent_tool_use_id":null,"session_id":"5d0c7a52"}
{"type":"result","subtype":"error_during_execution","is_error":true,"duration_ms":4000,"duration_api_ms":3000,"num_turns":2,"session_id":"5d0c7a52","total_cost_usd":0.0042,"usage":{"input_tokens":1200,"cache_read_input_tokens":300,"output_tokens":20},"errors":["API Error: 529 overloaded"]}
{"type":"control","payload":{"action":"session_info","data":{"state":"ready","sessionId":"s1"}}}
`

// turnBudget: the budget runs out while the model is writing.
const turnBudget = `
{"type":"control","payload":{"action":"session_info","data":{"state":"processing","sessionId":"s1"}}}
{"type":"stream_event","event":{"type":"message_start","message":{"id":"msg_20","content":[]}},"parent_tool_use_id":null}
{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Refactoring the par"}},"parent_tool_use_id":null}
{"type":"result","subtype":"error_max_budget_usd","is_error":true,"duration_ms":61000,"num_turns":7,"session_id":"5d0c7a52","total_cost_usd":1.02,"usage":{"input_tokens":50000,"output_tokens":4000},"cost":{"ai_microdollars":1000000,"compute_seconds":61,"models":{"claude-sonnet-4-5-20250929":{"input_tokens":50000,"output_tokens":4000,"microdollars":1000000}}}}
{"type":"control","payload":{"action":"session_info","data":{"state":"ready","sessionId":"s1"}}}
`

// turnSubagent: a Task tool starts a subagent whose calls are shown indented, and a client tool_call.
const turnSubagent = `
{"type":"control","payload":{"action":"session_info","data":{"state":"processing","sessionId":"s1"}}}
{"type":"system","subtype":"init","cwd":"/workspace","session_id":"5d0c7a52","tools":["Task","Grep","TodoWrite","mcp__warren__lookup"]}
{"type":"assistant","message":{"id":"msg_30","content":[{"type":"tool_use","id":"toolu_task","name":"Task","input":{"description":"Find TODOs","prompt":"List every TODO","subagent_type":"general-purpose"}}]},"parent_tool_use_id":null}
{"type":"assistant","message":{"id":"msg_31","content":[{"type":"text","text":"Searching."},{"type":"tool_use","id":"toolu_grep","name":"Grep","input":{"pattern":"TODO","path":"/workspace/src","output_mode":"files_with_matches"}}]},"parent_tool_use_id":"toolu_task"}
{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_grep","content":[{"type":"text","text":"Found 2 files\nsrc/a.go\nsrc/b.go"}]}]},"parent_tool_use_id":"toolu_task"}
{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_task","content":[{"type":"text","text":"Two TODOs, in src/a.go and src/b.go."}]}]},"parent_tool_use_id":null}
{"type":"assistant","message":{"id":"msg_32","content":[{"type":"tool_use","id":"toolu_mcp","name":"mcp__warren__lookup","input":{"q":"TODO owners"}},{"type":"tool_use","id":"toolu_todo","name":"TodoWrite","input":{"todos":[{"content":"a","status":"pending"},{"content":"b","status":"pending"}]}}]},"parent_tool_use_id":null}
{"type":"tool_call","payload":{"callId":"c1","toolName":"lookup","serverName":"warren","qualifiedName":"mcp__warren__lookup","input":{"q":"TODO owners"}}}
{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_mcp","is_error":true,"content":"<tool_use_error>not found</tool_use_error>"},{"type":"tool_result","tool_use_id":"toolu_todo","content":""}]},"parent_tool_use_id":null}
{"type":"assistant","message":{"id":"msg_33","content":[{"type":"text","text":"Two TODOs found.\n"}]},"parent_tool_use_id":null}
{"type":"result","subtype":"success","is_error":false,"num_turns":4,"result":"Two TODOs found.","total_cost_usd":0.001,"usage":{"input_tokens":1234567,"output_tokens":567},"cost":{"ai_microdollars":1000,"compute_seconds":0,"models":{}}}
{"type":"control","payload":{"action":"session_info","data":{"state":"ready","sessionId":"s1"}}}
`

// chatEvents turns recorded lines into events as the SDK would deliver them.
func chatEvents(t testing.TB, lines string) []warren.Event {
	t.Helper()
	var evs []warren.Event
	for line := range strings.SplitSeq(strings.TrimSpace(lines), "\n") {
		var env struct {
			Type    string `json:"type"`
			Subtype string `json:"subtype"`
			Seq     int64  `json:"seq"`
		}
		if err := json.Unmarshal([]byte(line), &env); err != nil {
			t.Fatalf("bad recorded line %s: %v", line, err)
		}
		evs = append(evs, warren.Event{Type: env.Type, Subtype: env.Subtype, Seq: env.Seq, Raw: json.RawMessage(line)})
	}
	return evs
}

func renderTurn(t testing.TB, cfg chatViewConfig, lines string) (out, info string) {
	t.Helper()
	var o, i bytes.Buffer
	v := newChatView(&o, &i, cfg)
	v.Begin()
	for _, ev := range chatEvents(t, lines) {
		v.Event(ev)
	}
	v.End()
	if err := v.Err(); err != nil {
		t.Fatal(err)
	}
	return o.String(), i.String()
}

func TestChatViewTurns(t *testing.T) {
	tests := []struct {
		name     string
		cfg      chatViewConfig
		lines    string
		out      string
		info     string
		isError  bool
		fromJSON bool
	}{
		{"deltas, then complete messages, are printed once", chatViewConfig{}, turnStreamed, turnStreamedOut,
			"cost: $0.0123 (37,033 in / 210 out tokens, 3.2 s compute)\n", false, false},
		{"complete messages only and an error result", chatViewConfig{}, turnFailed,
			"Let me run the tests.\n⏺ Bash(go test ./... …)\n  ⎿  Error: Exit code 1 … +2 lines\n",
			"warren chat: the agent failed: API Error: 529 overloaded\ncost: $0.0042 (1,500 in / 20 out tokens)\n", true, false},
		{"budget exhausted mid-sentence", chatViewConfig{}, turnBudget,
			"Refactoring the par\n",
			"warren chat: the budget ran out during this turn (raise the user's quota or wait for the budget window to reset)\n" +
				"cost: $1.0000 (50,000 in / 4,000 out tokens, 61.0 s compute)\n", true, false},
		{"subagents, MCP and client tools", chatViewConfig{}, turnSubagent,
			"⏺ Task(Find TODOs)\n" +
				"  ⏺ Grep(TODO in src)\n" +
				"    ⎿  Found 2 files … +2 lines\n" +
				"  ⎿  Two TODOs, in src/a.go and src/b.go.\n" +
				"⏺ warren.lookup(TODO owners)\n" +
				"⏺ TodoWrite(2 todos)\n" +
				"⏺ warren.lookup(TODO owners)\n" +
				"  ⎿  runs in the client that declared it\n" +
				"  ⎿  Error: not found\n" +
				"  ⎿  (no output)\n" +
				"Two TODOs found.\n",
			"cost: $0.0010 (1,234,567 in / 567 out tokens)\n", false, false},
		{"quiet prints only the text", chatViewConfig{quiet: true}, turnStreamed,
			"I'll create the file.\nDone: hello.txt says hello.\n", "", false, false},
		{"quiet still reports problems", chatViewConfig{quiet: true}, turnBudget, "Refactoring the par\n",
			"warren chat: the budget ran out during this turn (raise the user's quota or wait for the budget window to reset)\n", true, false},
		{"json prints the events as they came", chatViewConfig{json: true}, turnFailed, "",
			"warren chat: the agent failed: API Error: 529 overloaded\n", true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, info := renderTurn(t, tt.cfg, tt.lines)
			want := tt.out
			if tt.fromJSON {
				want = strings.TrimSpace(tt.lines) + "\n"
			}
			if out != want {
				t.Errorf("transcript:\n%s\nwant:\n%s", out, want)
			}
			if info != tt.info {
				t.Errorf("info:\n%q\nwant:\n%q", info, tt.info)
			}
		})
	}
}

// A message replayed with an id that was streamed is not printed again, even once the deltas were claimed.
func TestChatViewDedupeByMessageID(t *testing.T) {
	out, _ := renderTurn(t, chatViewConfig{quiet: true}, `
{"type":"stream_event","event":{"type":"message_start","message":{"id":"msg_A"}}}
{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"one"}}}
{"type":"assistant","message":{"id":"msg_A","content":[{"type":"text","text":"one"}]}}
{"type":"assistant","message":{"id":"msg_A","content":[{"type":"text","text":"one"}]}}
{"type":"assistant","message":{"id":"msg_B","content":[{"type":"text","text":"two"}]}}
{"type":"assistant","message":{"content":[{"type":"text","text":"three"}]}}
`)
	if want := "one\ntwo\nthree\n"; out != want {
		t.Fatalf("transcript %q, want %q", out, want)
	}
}

// fakeTerminal applies what a terminal does with the progress line's "erase line": the screen that the
// person ends up seeing.
func fakeTerminal(s string) string {
	var screen strings.Builder
	for i, part := range strings.Split(s, "\r\x1b[K") {
		if i > 0 {
			cur := screen.String()
			screen.Reset()
			screen.WriteString(cur[:strings.LastIndex(cur, "\n")+1])
		}
		screen.WriteString(part)
	}
	return screen.String()
}

func TestChatViewProgress(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var term bytes.Buffer // stdout and stderr on one terminal
	v := newChatView(&term, &term, chatViewConfig{progress: true, now: func() time.Time { return now }})
	evs := chatEvents(t, turnStreamed)

	v.Begin()
	if got := term.String(); got != "\r\x1b[K⠋ working… 0s (Ctrl-C to interrupt)" {
		t.Fatalf("progress line %q", got)
	}
	v.Event(evs[0]) // session_info processing
	now = now.Add(3 * time.Second)
	v.Tick()
	if !strings.HasSuffix(term.String(), "\r\x1b[K⠙ working… 3s (Ctrl-C to interrupt)") {
		t.Fatalf("after a tick: %q", term.String())
	}
	for _, ev := range evs[1:5] { // init, message_start, content_block_start, first delta
		v.Event(ev)
	}
	mark := term.Len()
	v.Tick() // mid-line: the progress line would overwrite the text
	if term.Len() != mark {
		t.Fatalf("progress drawn mid-line: %q", term.String()[mark:])
	}
	for _, ev := range evs[5:14] { // to the Write call
		v.Event(ev)
	}
	if !strings.HasSuffix(term.String(), "running Write… 3s (Ctrl-C to interrupt)") {
		t.Fatalf("while a tool runs: %q", term.String())
	}
	for _, ev := range evs[14:] {
		v.Event(ev)
	}
	v.End()
	if got, want := fakeTerminal(term.String()), turnStreamedOut+"cost: $0.0123 (37,033 in / 210 out tokens, 3.2 s compute)\n"; got != want {
		t.Fatalf("screen:\n%s\nwant:\n%s", got, want)
	}
}

func TestChatHelpers(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -1234: "-1,234"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
	long := strings.Repeat("é", 70)
	if got := clip(long, 60); got != strings.Repeat("é", 59)+"…" {
		t.Errorf("clip = %q", got)
	}
	tests := []struct {
		name, input, cwd, want string
	}{
		{"Bash", `{"command":"echo hi"}`, "", "Bash(echo hi)"},
		{"Read", `{"file_path":"/workspace/a/b.go"}`, "/workspace", "Read(a/b.go)"},
		{"Edit", `{"file_path":"/etc/hosts"}`, "/workspace", "Edit(/etc/hosts)"},
		{"HostBash", `{"command":"make"}`, "", "HostBash(make)"},
		{"WebFetch", `{"url":"https://go.dev","prompt":"summarise"}`, "", "WebFetch(https://go.dev)"},
		{"ExitPlanMode", `{}`, "", "ExitPlanMode"},
		{"custom", `{"b":"second","a":"first","n":1}`, "", "custom(first)"},
		{"broken", `not json`, "", "broken"},
	}
	for _, tt := range tests {
		if got := toolTitle(tt.name, json.RawMessage(tt.input), tt.cwd); got != tt.want {
			t.Errorf("toolTitle(%s, %s) = %q, want %q", tt.name, tt.input, got, tt.want)
		}
	}
	r := &warren.ResultEvent{Subtype: warren.ResultErrorMaxTurns, IsError: true, NumTurns: 10}
	if got := resultProblem(r); !strings.Contains(got, "after 10 turns") || !strings.Contains(got, "-max-turns") {
		t.Errorf("max turns problem = %q", got)
	}
}
