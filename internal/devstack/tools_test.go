package devstack_test

import (
	"context"
	"encoding/json"
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

