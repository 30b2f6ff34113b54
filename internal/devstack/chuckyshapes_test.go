package devstack_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/warren-mesh/warren/internal/token"
	"github.com/warren-mesh/warren/internal/wire"
)

// chuckyOpen dials the edge's base URL as Chucky Cloud's TypeScript SDK does (?token=, plus query), sends
// init and returns the first error or ready message (its type, and the message as sent).
func chuckyOpen(t *testing.T, ctx context.Context, url, init string) (string, string) {
	t.Helper()
	conn, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.CloseNow()
	// A refusal at the opening may come before init is read: the write may fail, the read says why.
	_ = conn.Write(ctx, websocket.MessageText, []byte(init))
	for {
		_, b, err := conn.Read(ctx)
		if err != nil {
			t.Fatalf("before ready or an error: %v", err)
		}
		var m struct {
			Type    string `json:"type"`
			Payload struct {
				Action string `json:"action"`
			} `json:"payload"`
		}
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("message %s: %v", b, err)
		}
		if m.Type == wire.TypeError {
			return m.Type, string(b)
		}
		if m.Type == wire.TypeControl && m.Payload.Action == wire.ActionReady {
			conn.Close(websocket.StatusNormalClosure, "")
			return m.Type, string(b)
		}
	}
}

// TestChuckyShapesEndToEnd: a client sending what Chucky Cloud's TypeScript SDK sends gets ready: its
// subagents in the SDK's AgentDefinition shape ({name, description, systemPrompt, tools, maxTurns}), a
// tool definition in tools (its README's tools: [tool(...)]) and a token whose sdkConfig.outputFormat is a
// string (as the SDK types it). A tool the client has no handler for (serverTool(): executeIn "server" in
// mcpServers) is refused saying Warren runs no tool code. What Warren cannot honour is
// refused by name, never ignored: ?vessel= (a named sandbox) and the option jobId, each invalid_argument
// saying that a separate workspace needs another user id. Before: the agents were refused ("unknown
// member /agents/reviewer/name"), the token opened no session, ?vessel= was ignored (the session ran in
// the user's one workspace) and jobId was an unknown option.
func TestChuckyShapesEndToEnd(t *testing.T) {
	st := startStack(t)
	ctx := ctxT(t)
	tok := mint(t, st, "chad", withBudget(5_000_000), func(c *token.Claims) {
		c.SDKConfig = json.RawMessage(`{"outputFormat":"{\"type\":\"json_schema\",\"schema\":{\"type\":\"object\"}}"}`)
	})
	base := "ws://" + st.Addr() + "/?token=" + tok
	init := `{"type":"init","payload":{"model":"claude-test","agents":{"reviewer":{"name":"reviewer",
		"description":"Reviews code","systemPrompt":"You review code.","tools":["Read","Grep"],"maxTurns":3}},
		"tools":[{"name":"get_weather","description":"Weather","inputSchema":{"type":"object"},"executeIn":"server"}]}}`
	if typ, m := chuckyOpen(t, ctx, base, init); typ != wire.TypeControl {
		t.Fatalf("init in Chucky's shapes answered %s", m)
	}

	const instead = "a separate workspace needs another user id"
	for name, c := range map[string]struct{ url, init, want string }{
		"vessel":     {base + "&vessel=build-box", `{"type":"init","payload":{}}`, "query parameter vessel is not supported"},
		"jobId":      {base, `{"type":"init","payload":{"jobId":"job-7"}}`, "session option jobId is not supported"},
		"serverTool": {base, `{"type":"init","payload":{"mcpServers":[{"name":"app","tools":[{"name":"t","executeIn":"server"}]}]}}`, "runs no tool code of its own"},
		"agents":     {base, `{"type":"init","payload":{"agents":{"reviewer":{"description":"d","systemPrompt":"p","tools":["Read",7]}}}}`, "agents.reviewer.tools[1]"},
	} {
		typ, m := chuckyOpen(t, ctx, c.url, c.init)
		if typ != wire.TypeError || !strings.Contains(m, `"invalid_argument"`) || !strings.Contains(m, c.want) || ((name == "vessel" || name == "jobId") && !strings.Contains(m, instead)) {
			t.Errorf("%s: answered %s; want invalid_argument with %q", name, m, c.want)
		}
	}
}
