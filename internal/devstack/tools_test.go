package devstack_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/devstack"
	"github.com/warren-mesh/warren/internal/modelserver"
	"github.com/warren-mesh/warren/internal/testenv"
	"github.com/warren-mesh/warren/internal/token"
	"github.com/warren-mesh/warren/internal/wire"
	warren "github.com/warren-mesh/warren/sdk"
)

// toolStack is the dev platform with the real CLI talking to a model server the test reads.
func toolStack(t *testing.T) (*devstack.Stack, *modelserver.Server) {
	t.Helper()
	ms := modelserver.New(modelserver.Options{})
	url, err := ms.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ms.Close() })
	return agentStack(t, agentOpts{apiKey: "sk-warren-tools-test", upstream: url}), ms
}

// lastToolResult is the last message the model was given: after a tool call, its tool_result.
func lastToolResult(t *testing.T, ms *modelserver.Server) string {
	t.Helper()
	msg, n := ms.LastMessage()
	if n < 2 || !strings.Contains(string(msg), `"tool_result"`) {
		t.Fatalf("%d model requests, the last ending with %s: want a tool_result after the tool call", n, msg)
	}
	return string(msg)
}

// lookupServer is a client tool server whose one tool answers "E2E-TOOL-ANSWER:<q>".
func lookupServer(calls *[]string, mu *sync.Mutex) *warren.ToolServer {
	return &warren.ToolServer{Name: "app", Tools: []warren.Tool{{
		Name: "lookup", Description: "Looks a word up",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}`),
		Handler: func(_ context.Context, input json.RawMessage) (warren.ToolResult, error) {
			var in struct{ Q string }
			if err := json.Unmarshal(input, &in); err != nil {
				return warren.ToolResult{}, err
			}
			mu.Lock()
			*calls = append(*calls, in.Q)
			mu.Unlock()
			return warren.TextResult("E2E-TOOL-ANSWER:" + in.Q), nil
		},
	}}}
}

// untilResult reads s until the turn's result, passing each event to each(); it returns the events.
func untilResult(t *testing.T, ctx context.Context, s *warren.Session, each func(warren.Event)) []warren.Event {
	t.Helper()
	var evs []warren.Event
	for {
		ev, err := s.Next(ctx)
		if err != nil {
			t.Fatalf("after %d events: %v", len(evs), err)
		}
		evs = append(evs, ev)
		if each != nil {
			each(ev)
		}
		if ev.Type == warren.EventResult {
			return evs
		}
	}
}

// nextError reads s until an error event and returns its error.
func nextError(t *testing.T, ctx context.Context, s *warren.Session) *warren.Error {
	t.Helper()
	for {
		ev, err := s.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if e := ev.Err(); e != nil {
			return e
		}
	}
}

func sawState(evs []warren.Event, state string) bool {
	for _, ev := range evs {
		if info, ok := ev.SessionInfo(); ok && info.State == state {
			return true
		}
	}
	return false
}

// TestClientToolsEndToEnd: a client declares a tool; the real CLI calls it as mcp__app__lookup through the
// runner's bridge; the client gets tool_call naming it as declared (lookup, of server app; the session
// waiting_tool), its SDK handler answers, and the answer is the tool_result of the next model request.
// Then, on the same session: with two clients attached the first answer wins and the second gets
// conflict; a hostile answer is refused and the call stays pending; a client that leaves mid-call gets
// the call again when it comes back and answers it.
func TestClientToolsEndToEnd(t *testing.T) {
	st, ms := toolStack(t)
	ctx := agentCtx(t)
	var (
		mu    sync.Mutex
		calls []string
	)
	srv := lookupServer(&calls, &mu)
	c := client(t, st, "tess", withBudget(5_000_000))
	a, err := c.Dial(ctx, &warren.SessionOptions{MCPServers: warren.MCPServerList{srv.MCPServer()}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()

	// One client: the SDK's handler answers.
	if err := a.Send(ctx, `call mcp__app__lookup {"q":"alpha"}`); err != nil {
		t.Fatal(err)
	}
	var toolCall *warren.ToolCall
	evs := untilResult(t, ctx, a, func(ev warren.Event) {
		if call, ok := ev.ToolCall(); ok {
			toolCall = &call
		}
		if _, err := a.HandleToolCall(ctx, ev, srv); err != nil {
			t.Fatal(err)
		}
	})
	if toolCall == nil || toolCall.ToolName != "lookup" || toolCall.ServerName != "app" || toolCall.QualifiedName != "mcp__app__lookup" ||
		!strings.Contains(string(toolCall.Input), "alpha") {
		t.Fatalf("tool_call %+v", toolCall)
	}
	if !sawState(evs, warren.StateWaitingTool) {
		t.Error("the session never reported waiting_tool")
	}
	if r, _ := evs[len(evs)-1].Result(); r.IsError {
		t.Fatalf("result %+v", r)
	}
	if msg := lastToolResult(t, ms); !strings.Contains(msg, "E2E-TOOL-ANSWER:alpha") {
		t.Fatalf("tool_result given to the model: %s", msg)
	}

	// Two clients: b answers first, a's later answer is a conflict.
	b, err := c.Dial(ctx, &warren.SessionOptions{SessionID: a.ID()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := a.Send(ctx, `call mcp__app__lookup {"q":"beta"}`); err != nil {
		t.Fatal(err)
	}
	untilResult(t, ctx, b, func(ev warren.Event) {
		if _, err := b.HandleToolCall(ctx, ev, srv); err != nil {
			t.Fatal(err)
		}
	})
	untilResult(t, ctx, a, func(ev warren.Event) {
		if call, ok := ev.ToolCall(); ok {
			if err := a.SendToolResult(ctx, call.CallID, warren.TextResult("too late").Content, false); err != nil {
				t.Fatal(err)
			}
		}
	})
	// The answer to a's late tool_result may come after the turn's result.
	if conflict := nextError(t, ctx, a); conflict.Code != wire.Conflict {
		t.Fatalf("late answer: %v, want conflict", conflict)
	}
	if msg := lastToolResult(t, ms); !strings.Contains(msg, "E2E-TOOL-ANSWER:beta") || strings.Contains(msg, "too late") {
		t.Fatalf("tool_result given to the model: %s", msg)
	}
	_ = b.Close()

	// A hostile answer is refused (the connection and the call survive); then the client leaves mid-call,
	// comes back without lastSeq, gets the call again and answers it.
	if err := a.Send(ctx, `call mcp__app__lookup {"q":"gamma"}`); err != nil {
		t.Fatal(err)
	}
	var pending warren.ToolCall
	for pending.CallID == "" {
		ev, err := a.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		pending, _ = ev.ToolCall()
	}
	if err := a.SendMessage(ctx, map[string]any{"type": "tool_result", "payload": map[string]any{
		"callId": pending.CallID, "result": map[string]any{"content": []any{map[string]any{"type": "script", "src": "x"}}}}}); err != nil {
		t.Fatal(err)
	}
	if e := nextError(t, ctx, a); e.Code != wire.InvalidArgument || !strings.Contains(e.Message, "content[0]") {
		t.Fatalf("hostile answer: %v, want invalid_argument naming content[0]", e)
	}
	_ = a.Close()
	back, err := c.Dial(ctx, &warren.SessionOptions{SessionID: a.ID()})
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	var again warren.ToolCall
	untilResult(t, ctx, back, func(ev warren.Event) {
		if call, ok := ev.ToolCall(); ok {
			again = call
		}
		if _, err := back.HandleToolCall(ctx, ev, srv); err != nil {
			t.Fatal(err)
		}
	})
	if again.CallID != pending.CallID {
		t.Fatalf("after reattach the call was %q, want the pending %q", again.CallID, pending.CallID)
	}
	if msg := lastToolResult(t, ms); !strings.Contains(msg, "E2E-TOOL-ANSWER:gamma") {
		t.Fatalf("tool_result given to the model: %s", msg)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(calls, ",") != "alpha,beta,gamma" {
		t.Errorf("handler calls %v", calls)
	}
}

// TestClientToolTimeoutEndToEnd: a client that never answers: past the tool's timeout the client gets an
// error event with code timeout naming the call, the agent an error result (the next model request's
// tool_result), and the turn ends normally; a late answer is then a conflict.
func TestClientToolTimeoutEndToEnd(t *testing.T) {
	st, ms := toolStack(t)
	ctx := agentCtx(t)
	srv := &warren.ToolServer{Name: "slow", Tools: []warren.Tool{{Name: "wait", Timeout: time.Second}}}
	s, err := client(t, st, "val", withBudget(5_000_000)).Dial(ctx, &warren.SessionOptions{MCPServers: warren.MCPServerList{srv.MCPServer()}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Send(ctx, `call mcp__slow__wait {}`); err != nil {
		t.Fatal(err)
	}
	var (
		call     warren.ToolCall
		timedOut *warren.Error
	)
	evs := untilResult(t, ctx, s, func(ev warren.Event) {
		if c, ok := ev.ToolCall(); ok {
			call = c
		}
		if e := ev.Err(); e != nil {
			timedOut = e
		}
	})
	if call.CallID == "" || timedOut == nil || timedOut.Code != wire.Timeout || !strings.Contains(timedOut.Message, call.CallID) {
		t.Fatalf("call %+v, error %v: want a timeout error naming the call", call, timedOut)
	}
	if r, _ := evs[len(evs)-1].Result(); r.IsError {
		t.Fatalf("the turn failed: %+v", r)
	}
	if msg := lastToolResult(t, ms); !strings.Contains(msg, "did not answer") || !strings.Contains(msg, `"is_error":true`) {
		t.Fatalf("tool_result given to the model: %s", msg)
	}
	if err := s.SendToolResult(ctx, call.CallID, warren.TextResult("late").Content, false); err != nil {
		t.Fatal(err)
	}
	if e := nextError(t, ctx, s); e.Code != wire.Conflict {
		t.Fatalf("late answer: %v, want conflict", e)
	}
}

// TestClientMCPServersEndToEnd: a stdio MCP server the client declares and one the token's sdkConfig
// declares run inside the sandbox; the model calls their tools and the answers reach the next model
// request. The token's permissions bind them: a blocked server is refused at init, and so are a hostile
// config and a client server taking the token's server's name.
func TestClientMCPServersEndToEnd(t *testing.T) {
	testenv.NeedPython3(t)
	st, ms := toolStack(t)
	ctx := agentCtx(t)
	sdkConfig := json.RawMessage(`{"mcpServers":{"tok":{"command":"python3","args":["/workspace/shout_mcp.py"]}}}`)
	c := client(t, st, "uma", withBudget(5_000_000), func(cl *token.Claims) {
		cl.SDKConfig = sdkConfig
		cl.Permissions = token.Permissions{BlockedTools: []string{"mcp__evil"}}
	})
	if _, err := c.Sandbox().WriteFile(ctx, "shout_mcp.py", strings.NewReader(testenv.ShoutMCPScript)); err != nil {
		t.Fatal(err)
	}
	for name, servers := range map[string]warren.MCPServerList{
		"blocked":      {{Name: "evil", Command: "python3", Args: []string{"/workspace/shout_mcp.py"}}},
		"hostile":      {{Name: "../x", Command: "python3"}},
		"file url":     {{Name: "f", Type: "http", URL: "file:///etc/passwd"}},
		"token's name": {{Name: "tok", Command: "sh"}},
	} {
		if _, err := c.Dial(ctx, &warren.SessionOptions{MCPServers: servers}); !warren.IsCode(err, warren.CodeInvalidArgument) {
			t.Errorf("%s server: %v, want invalid_argument at init", name, err)
		}
	}

	s, err := c.Dial(ctx, &warren.SessionOptions{MCPServers: warren.MCPServerList{
		{Name: "loud", Command: "python3", Args: []string{"/workspace/shout_mcp.py"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, tc := range []struct{ tool, want string }{
		{"mcp__loud__shout", "stdio-mcp:CLIENT!"},
		{"mcp__tok__shout", "stdio-mcp:TOKEN!"},
	} {
		word := strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(tc.want, "stdio-mcp:"), "!"))
		evs, r := turn(t, ctx, s, `call `+tc.tool+` {"text":"`+word+`"}`)
		if r.IsError {
			t.Fatalf("%s: result %+v", tc.tool, r)
		}
		for _, ev := range evs {
			if ev.Type == warren.EventToolCall {
				t.Fatalf("%s is a server's tool, not the client's: %s", tc.tool, ev.Raw)
			}
		}
		if msg := lastToolResult(t, ms); !strings.Contains(msg, tc.want) {
			t.Fatalf("%s: tool_result given to the model: %s", tc.tool, msg)
		}
	}
}

// TestChuckyClientToolsEndToEnd: a client shaped like Chucky's TypeScript SDK declares its tools without
// a server type (executeIn "client") and keys its handlers by the declared name, answering nothing else;
// its token lists the tools by those names and the client blocks one (disallowedTools). The real CLI
// lacks the blocked tool, and a model turn calling it ends at once with an error result and no tool_call;
// the other tool's tool_call names it as declared, the handler runs and its answer completes the turn. A
// client that declares its server with type "client" (Warren's SDKs before declared names) still gets
// mcp__<server>__<tool> and answers. A token blocking a declared tool by its name refuses the session at
// init, and a name that is no tool is invalid_argument naming it. Before: the tool_call named
// mcp__client-tools__get_time, so nothing answered and the turn waited out the tool timeout; the token's
// list refused the session; the block did nothing.
func TestChuckyClientToolsEndToEnd(t *testing.T) {
	st, ms := toolStack(t)
	ctx := agentCtx(t)
	schema := json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}}}`)
	declared := warren.MCPServerList{{Name: "client-tools", Version: "1.0.0", Tools: []wire.MCPTool{
		{Name: "get_weather", Description: "The weather in a city", InputSchema: schema, ExecuteIn: "client"},
		{Name: "get_time", Description: "The time in a city", InputSchema: schema, ExecuteIn: "client"},
	}}}
	var ran []string
	handlers := map[string]func(json.RawMessage) warren.ToolResult{
		"get_weather": func(json.RawMessage) warren.ToolResult {
			ran = append(ran, "get_weather")
			return warren.TextResult("SUNNY")
		},
		"get_time": func(json.RawMessage) warren.ToolResult {
			ran = append(ran, "get_time")
			return warren.TextResult("CHUCKY-TIME:noon")
		},
	}
	c := client(t, st, "chucky", withBudget(5_000_000), func(cl *token.Claims) {
		cl.Permissions = token.Permissions{Tools: []string{"Read", "get_weather", "get_time"}}
	})
	s, err := c.Dial(ctx, &warren.SessionOptions{DisallowedTools: []string{"get_weather"}, MCPServers: declared})
	if err != nil {
		t.Fatalf("the token's tools by declared name: %v", err)
	}
	defer s.Close()
	var calls []warren.ToolCall
	answer := func(ev warren.Event) {
		call, ok := ev.ToolCall()
		if !ok {
			return
		}
		calls = append(calls, call)
		if h, ok := handlers[call.ToolName]; ok { // as Chucky's SDK looks its handlers up
			r := h(call.Input)
			if err := s.SendToolResult(ctx, call.CallID, r.Content, r.IsError); err != nil {
				t.Fatal(err)
			}
		}
	}

	if err := s.Send(ctx, `call mcp__client-tools__get_weather {"city":"Paris"}`); err != nil {
		t.Fatal(err)
	}
	evs := untilResult(t, ctx, s, answer)
	for _, ev := range evs {
		if sys, ok := ev.System(); ok && sys.Subtype == "init" &&
			(slices.Contains(sys.Tools, "mcp__client-tools__get_weather") || !slices.Contains(sys.Tools, "mcp__client-tools__get_time")) {
			t.Fatalf("the agent's tools %v: want get_time and not the blocked get_weather", sys.Tools)
		}
	}
	if len(calls) != 0 || len(ran) != 0 {
		t.Fatalf("the blocked tool reached the client: calls %+v, ran %v", calls, ran)
	}
	if msg := lastToolResult(t, ms); !strings.Contains(msg, `"is_error":true`) || strings.Contains(msg, "SUNNY") {
		t.Fatalf("tool_result given to the model for the blocked tool: %s", msg)
	}

	if err := s.Send(ctx, `call mcp__client-tools__get_time {"city":"Paris"}`); err != nil {
		t.Fatal(err)
	}
	evs = untilResult(t, ctx, s, answer)
	if len(calls) != 1 || calls[0].ToolName != "get_time" || calls[0].ServerName != "client-tools" || calls[0].QualifiedName != "mcp__client-tools__get_time" {
		t.Fatalf("tool_calls %+v: want get_time of client-tools", calls)
	}
	if r, _ := evs[len(evs)-1].Result(); r.IsError {
		t.Fatalf("result %+v", r)
	}
	if msg := lastToolResult(t, ms); !strings.Contains(msg, "CHUCKY-TIME:noon") {
		t.Fatalf("tool_result given to the model: %s", msg)
	}

	// A client that declares type "client" and looks its tools up by mcp__<server>__<tool>, as Warren's
	// SDKs did: the runner still names its calls so.
	legacy, err := client(t, st, "legacy", withBudget(5_000_000)).Dial(ctx, &warren.SessionOptions{MCPServers: warren.MCPServerList{
		{Name: "app", Type: wire.MCPClient, Tools: []wire.MCPTool{{Name: "lookup"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer legacy.Close()
	if err := legacy.Send(ctx, `call mcp__app__lookup {"q":"old"}`); err != nil {
		t.Fatal(err)
	}
	var legacyCall warren.ToolCall
	untilResult(t, ctx, legacy, func(ev warren.Event) {
		if call, ok := ev.ToolCall(); ok && call.ToolName == "mcp__app__lookup" {
			legacyCall = call
			if err := legacy.SendToolResult(ctx, call.CallID, warren.TextResult("LEGACY-ANSWER").Content, false); err != nil {
				t.Fatal(err)
			}
		}
	})
	if legacyCall.CallID == "" || !strings.Contains(lastToolResult(t, ms), "LEGACY-ANSWER") {
		t.Fatalf("the legacy client's call %+v was not named mcp__app__lookup or not answered", legacyCall)
	}

	for name, perm := range map[string]struct {
		perm token.Permissions
		want string
	}{
		"blocked by declared name": {token.Permissions{BlockedTools: []string{"get_weather"}}, "mcp__client-tools__get_weather is blocked"},
		"no such tool":             {token.Permissions{BlockedTools: []string{"get_wether"}}, `"get_wether" names no tool`},
	} {
		tc := client(t, st, "chucky", withBudget(5_000_000), func(cl *token.Claims) { cl.Permissions = perm.perm })
		if _, err := tc.Dial(ctx, &warren.SessionOptions{MCPServers: declared}); !warren.IsCode(err, warren.CodeInvalidArgument) || !strings.Contains(err.Error(), perm.want) {
			t.Errorf("%s: %v, want invalid_argument at init with %q", name, err, perm.want)
		}
	}
}
