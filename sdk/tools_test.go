package warren

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/warren-mesh/warren/internal/wire"
)

// TestHandleToolCall: a declared tool's handler answers its tool_call (a handler error as an error
// result), whether the runner names it mcp__<server>__<tool> (a runner before declared tool names) or as
// declared with serverName and qualifiedName; a tool nobody declared, another server's of the same name
// included, is left to the application; the declaration passes init's validation and has no type, so the
// runner names its tools as declared.
func TestHandleToolCall(t *testing.T) {
	srv := &ToolServer{Name: "app", Tools: []Tool{
		{Name: "echo", InputSchema: json.RawMessage(`{"type":"object"}`), Handler: func(_ context.Context, in json.RawMessage) (ToolResult, error) {
			return TextResult("echo:" + string(in)), nil
		}},
		{Name: "fail", Handler: func(context.Context, json.RawMessage) (ToolResult, error) {
			return ToolResult{}, errors.New("no such customer")
		}},
	}}
	if _, err := wire.DecodeSessionOptions(mustMarshal(t, SessionOptions{MCPServers: MCPServerList{srv.MCPServer()}})); err != nil {
		t.Fatalf("the declaration is refused: %v", err)
	}
	if m := srv.MCPServer(); m.Type != "" || m.CallName("echo") != "echo" {
		t.Fatalf("declaration %+v: want no type, so that tool_calls carry declared names", m)
	}
	answers := make(chan map[string]any, 3)
	edge := fakeEdge(t, func(ctx context.Context, c *websocket.Conn, _ *http.Request) {
		readMsg(ctx, t, c) // init
		ready(ctx, t, c, 1)
		for i, call := range []string{
			`{"callId":"c1","toolName":"mcp__app__echo","input":{"q":1}}`,
			`{"callId":"c2","toolName":"mcp__app__fail","input":{}}`,
			`{"callId":"c3","toolName":"mcp__other__echo","input":{}}`,
			`{"callId":"c4","toolName":"echo","serverName":"app","qualifiedName":"mcp__app__echo","input":{"q":4}}`,
			`{"callId":"c5","toolName":"echo","serverName":"other","qualifiedName":"mcp__other__echo","input":{}}`,
		} {
			send(ctx, t, c, int64(i+2), []byte(`{"type":"tool_call","payload":`+call+`}`))
		}
		for range 3 {
			answers <- readMsg(ctx, t, c)
		}
		expectClose(ctx, t, c)
	})
	s, err := dial(t, edge, &SessionOptions{MCPServers: MCPServerList{srv.MCPServer()}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var handled []bool
	for len(handled) < 5 {
		ev, err := s.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type != wire.TypeToolCall {
			continue
		}
		h, err := s.HandleToolCall(ctx, ev, srv)
		if err != nil {
			t.Fatal(err)
		}
		handled = append(handled, h)
	}
	if want := []bool{true, true, false, true, false}; !slices.Equal(handled, want) {
		t.Errorf("handled %v, want %v: the declared tools only", handled, want)
	}
	first, second, third := payload(<-answers), payload(<-answers), payload(<-answers)
	if b, _ := json.Marshal(first); first["callId"] != "c1" || !strings.Contains(string(b), `echo:{\"q\":1}`) || strings.Contains(string(b), "isError") {
		t.Errorf("answer to c1: %s", b)
	}
	if b, _ := json.Marshal(second); second["callId"] != "c2" || !strings.Contains(string(b), "no such customer") || !strings.Contains(string(b), `"isError":true`) {
		t.Errorf("answer to c2: %s", b)
	}
	if b, _ := json.Marshal(third); third["callId"] != "c4" || !strings.Contains(string(b), `echo:{\"q\":4}`) {
		t.Errorf("answer to c4: %s", b)
	}
	_ = s.Close()
}

func mustMarshal(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestToolServerNameReadsBack: a ToolServer whose name contains "__" or ends with "_" is refused by
// Validate (as the edge refuses it at init), and handles no call: mcp__app__lookup__x is server app's tool
// lookup__x for the agent, never server app__lookup's tool x.
func TestToolServerNameReadsBack(t *testing.T) {
	ran := false
	h := func(context.Context, json.RawMessage) (ToolResult, error) { ran = true; return TextResult("x"), nil }
	for _, name := range []string{"app__lookup", "app_"} {
		srv := &ToolServer{Name: name, Tools: []Tool{{Name: "x", Handler: h}}}
		if err := srv.Validate(); wire.CodeOf(err) != wire.InvalidArgument || !strings.Contains(err.Error(), "mcpServers[0].name") {
			t.Errorf("ToolServer %q: Validate = %v", name, err)
		}
		if _, ok := srv.lookup(ToolCall{ToolName: "mcp__" + name + "__x"}); ok {
			t.Errorf("ToolServer %q handles mcp__%s__x", name, name)
		}
	}
	ok := &ToolServer{Name: "app", Tools: []Tool{{Name: "lookup__x", Handler: h}}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	if _, found := ok.lookup(ToolCall{ToolName: "lookup__x", ServerName: "app", QualifiedName: "mcp__app__lookup__x"}); !found {
		t.Error("server app does not handle its tool lookup__x")
	}
	if ran {
		t.Error("a handler ran")
	}
}
