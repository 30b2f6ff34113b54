package devstack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/warren-mesh/warren/internal/devstack"
	"github.com/warren-mesh/warren/internal/token"
	"github.com/warren-mesh/warren/internal/wire"
)

// chuckyClient sends what Chucky Cloud's TypeScript SDK (@chucky.cloud/sdk 0.3) sends, restated from its
// source (src/transport/WebSocketTransport.ts, src/client/Session.ts, src/types/messages.ts), not copied:
// it dials the base URL it was given with ?token= set; its session sends init once, on the first
// connection only; a prompt is {"type":"user","session_id":S,"message":{"role":"user","content":...},
// "parent_tool_use_id":null} (no uuid: the SDK sets none); a tool call is answered with
// {"type":"tool_result","payload":{"callId","result"}}. With autoReconnect the SDK dials again after any
// close (it treats no close code as final; its attempt count restarts at every open), never sends init
// again, and on open flushes what was sent while disconnected, in order. The test drives the reconnect
// (drop, then reconnect) instead of the SDK's 1 s timer.
type chuckyClient struct {
	t       *testing.T
	st      *devstack.Stack
	tok     string
	conn    *rawChannel
	queue   []string // sent while disconnected, flushed at the next open
	session string   // from ready, as the SDK takes it from session_info
	seen    []rawMsg // every message received, over all connections
}

func newChuckyClient(t *testing.T, st *devstack.Stack, user string, mods ...func(*token.Claims)) *chuckyClient {
	c := &chuckyClient{t: t, st: st, tok: mint(t, st, user, append([]func(*token.Claims){withBudget(5_000_000)}, mods...)...)}
	t.Cleanup(func() {
		if t.Failed() {
			for _, m := range c.seen {
				t.Logf("received %.300s", m.Raw)
			}
		}
	})
	return c
}

// open connects and, on the first connection only, sends init with payload and waits for ready.
func (c *chuckyClient) open(ctx context.Context, payload string) {
	c.t.Helper()
	c.conn = c.dial(ctx)
	c.conn.send(ctx, `{"type":"init","payload":`+payload+`}`)
	ready := c.read(ctx, "ready", isReady)
	var p struct {
		Data struct {
			SessionID string `json:"sessionId"`
		} `json:"data"`
	}
	if err := json.Unmarshal(ready.Payload, &p); err != nil || p.Data.SessionID == "" {
		c.t.Fatalf("ready %s", ready.Raw)
	}
	c.session = p.Data.SessionID
}

func (c *chuckyClient) dial(ctx context.Context) *rawChannel {
	c.t.Helper()
	conn, _, err := websocket.Dial(ctx, "ws://"+c.st.Addr()+"/?token="+c.tok, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	conn.SetReadLimit(wire.MaxFrame + 64)
	c.t.Cleanup(func() { conn.CloseNow() })
	return &rawChannel{t: c.t, c: conn}
}

// send sends msg, or queues it while disconnected.
func (c *chuckyClient) send(ctx context.Context, msg string) {
	if c.conn == nil {
		c.queue = append(c.queue, msg)
		return
	}
	c.conn.send(ctx, msg)
}

// prompt sends a prompt as the SDK's Session.send does.
func (c *chuckyClient) prompt(ctx context.Context, text string) {
	b, _ := json.Marshal(text)
	c.send(ctx, fmt.Sprintf(`{"type":"user","session_id":%q,"message":{"role":"user","content":%s},"parent_tool_use_id":null}`, c.session, b))
}

// answer answers a tool call as the SDK's handleToolCall does.
func (c *chuckyClient) answer(ctx context.Context, callID, text string) {
	b, _ := json.Marshal(text)
	c.send(ctx, fmt.Sprintf(`{"type":"tool_result","payload":{"callId":%q,"result":{"content":[{"type":"text","text":%s}]}}}`, callID, b))
}

// drop loses the connection without a close (a network cut).
func (c *chuckyClient) drop() {
	_ = c.conn.c.CloseNow()
	c.conn = nil
}

// reconnect dials again and flushes the queue, without init.
func (c *chuckyClient) reconnect(ctx context.Context) {
	c.t.Helper()
	c.conn = c.dial(ctx)
	for _, m := range c.queue {
		c.conn.send(ctx, m)
	}
	c.queue = nil
}

// read reads until ok, recording every message.
func (c *chuckyClient) read(ctx context.Context, what string, ok func(rawMsg) bool) rawMsg {
	c.t.Helper()
	return c.conn.until(ctx, what, func(m rawMsg) bool {
		c.seen = append(c.seen, m)
		return ok(m)
	})
}

func isReady(m rawMsg) bool {
	return m.Type == wire.TypeControl && strings.Contains(string(m.Payload), `"action":"ready"`)
}

// checkOnce fails unless every seq the client got is new (none twice, across connections) and want
// matches exactly one message.
func (c *chuckyClient) checkOnce(want func(rawMsg) bool, what string) {
	c.t.Helper()
	seqs, n := map[int64]bool{}, 0
	for _, m := range c.seen {
		if m.Seq != 0 && seqs[m.Seq] {
			c.t.Fatalf("seq %d delivered twice: %s", m.Seq, m.Raw)
		}
		seqs[m.Seq] = true
		if want(m) {
			n++
		}
	}
	if n != 1 {
		c.t.Fatalf("%s delivered %d times, want once", what, n)
	}
}

// TestChuckyReconnectResumes: a client that reconnects as the Chucky SDK's autoReconnect does (no init,
// no lastSeq) is resumed into its session after what the edge delivered it, so the messages the session
// sent while it was away arrive, and none twice:
//   - sending nothing (its app waits in stream()): attached to the user's one session whose client was
//     lost, after the edge's reconnect grace;
//   - its queued prompt first, naming the session;
//   - its queued tool_result first (the tool call's handler finished while it was away): the tool call is
//     not sent again, and the turn completes with the answer.
//
// Before: the first lost what the session sent while it was away and was closed with 4504 every 31 s;
// the second got no replay; the third was answered invalid_argument, and the turn waited for the tool
// timeout.
func TestChuckyReconnectResumes(t *testing.T) {
	st, ms := toolStack(t)
	isToolOutput := func(m rawMsg) bool { return m.Type == "user" && strings.Contains(m.Raw, "AWAY-DONE") }
	isResult := func(m rawMsg) bool { return m.Type == "result" }
	// away starts a turn whose tool runs for a while, and loses the connection once the agent called it.
	away := func(ctx context.Context, c *chuckyClient) {
		c.prompt(ctx, "run sleep 2; echo AWAY-DONE")
		c.read(ctx, "the tool call", func(m rawMsg) bool { return m.Type == "assistant" && strings.Contains(m.Raw, "sleep 2") })
		c.drop()
	}

	t.Run("sending_nothing", func(t *testing.T) {
		ctx := agentCtx(t)
		c := newChuckyClient(t, st, "chuck-quiet")
		c.open(ctx, `{}`)
		away(ctx, c)
		c.reconnect(ctx)
		before := len(c.seen)
		c.read(ctx, "the turn's result", isResult) // replayed before the handshake, or live after it
		if !slices.ContainsFunc(c.seen[before:], isReady) {
			c.read(ctx, "the resumed handshake", isReady)
		}
		if !slices.ContainsFunc(c.seen[before:], func(m rawMsg) bool { return isReady(m) && strings.Contains(m.Raw, c.session) }) {
			t.Fatalf("not resumed into session %s", c.session)
		}
		c.checkOnce(isToolOutput, "the tool's output, sent while the client was away")
		c.checkOnce(isResult, "the result")
	})

	t.Run("prompt_first", func(t *testing.T) {
		ctx := agentCtx(t)
		c := newChuckyClient(t, st, "chuck-prompt")
		c.open(ctx, `{}`)
		away(ctx, c)
		c.prompt(ctx, "say NEXT-TURN")
		c.reconnect(ctx)
		c.read(ctx, "the first turn's result", isResult)
		c.read(ctx, "the second turn's result", isResult)
		c.checkOnce(isToolOutput, "the tool's output, sent while the client was away")
	})

	t.Run("tool_result_first", func(t *testing.T) {
		ctx := agentCtx(t)
		c := newChuckyClient(t, st, "chuck-tool")
		c.open(ctx, `{"mcpServers":[{"name":"client-tools","version":"1.0.0","tools":[{"name":"get_time",
			"description":"The time","inputSchema":{"type":"object","properties":{"city":{"type":"string"}}},"executeIn":"client"}]}]}`)
		c.prompt(ctx, `call mcp__client-tools__get_time {"city":"Paris"}`)
		call := c.read(ctx, "the tool call", func(m rawMsg) bool { return m.Type == wire.TypeToolCall })
		var p struct {
			CallID string `json:"callId"`
		}
		if err := json.Unmarshal(call.Payload, &p); err != nil || p.CallID == "" {
			t.Fatalf("tool_call %s", call.Raw)
		}
		c.drop()
		c.answer(ctx, p.CallID, "CHUCKY-RESUMED-TIME")
		c.reconnect(ctx)
		res := c.read(ctx, "the turn's result", isResult)
		if strings.Contains(res.Raw, `"is_error":true`) {
			t.Fatalf("result %s", res.Raw)
		}
		c.checkOnce(func(m rawMsg) bool { return m.Type == wire.TypeToolCall }, "the tool call")
		for _, m := range c.seen {
			if m.Type == wire.TypeError {
				t.Fatalf("error %s", m.Raw)
			}
		}
		if msg := lastToolResult(t, ms); !strings.Contains(msg, "CHUCKY-RESUMED-TIME") {
			t.Fatalf("tool_result given to the model: %s", msg)
		}
	})
}

// close ends the session as the SDK's Session.close does: control close, then a normal close.
func (c *chuckyClient) close(ctx context.Context) {
	c.send(ctx, `{"type":"control","payload":{"action":"close"}}`)
	_ = c.conn.c.Close(websocket.StatusNormalClosure, "Client disconnect")
}

// stream reads a turn as the SDK's Session.stream does: a tool call is answered by the handler its
// toolName names (none: no answer), and the turn ends at its result or at an error.
func (c *chuckyClient) stream(ctx context.Context, handlers map[string]func(json.RawMessage) string) rawMsg {
	c.t.Helper()
	for {
		m := c.read(ctx, "the turn's end", func(m rawMsg) bool {
			return m.Type == "result" || m.Type == wire.TypeError || m.Type == wire.TypeToolCall
		})
		if m.Type != wire.TypeToolCall {
			return m
		}
		var call struct {
			CallID   string          `json:"callId"`
			ToolName string          `json:"toolName"`
			Input    json.RawMessage `json:"input"`
		}
		if err := json.Unmarshal(m.Payload, &call); err != nil {
			c.t.Fatalf("tool_call %s: %v", m.Raw, err)
		}
		if h, ok := handlers[call.ToolName]; ok {
			c.answer(ctx, call.CallID, h(call.Input))
		}
	}
}

// TestChuckyClientEndToEnd: what Chucky Cloud's SDK sends works with the real CLI: a session of its
// shape (client tools declared as its Session serializes them, a tool blocked by its bare name), a tool
// call answered by the handler registered under the declared name, a second turn, the close; a session
// in plan mode on an AI budget below the model proxy's worst-case reservation; and a spent budget is an error its createError types as
// BudgetExceededError (the message starts "budget exceeded"), before the close 4402.
func TestChuckyClientEndToEnd(t *testing.T) {
	st, ms := toolStack(t)
	ctx := agentCtx(t)
	c := newChuckyClient(t, st, "chuck-e2e")
	c.open(ctx, `{"model":"claude-sonnet-4-5","disallowedTools":["get_weather"],
		"mcpServers":[{"name":"client-tools","version":"1.0.0","tools":[
		{"name":"get_weather","description":"The weather","inputSchema":{"type":"object","properties":{"city":{"type":"string"}}},"executeIn":"client"},
		{"name":"get_time","description":"The time","inputSchema":{"type":"object","properties":{"city":{"type":"string"}}},"executeIn":"client"}]}]}`)
	handlers := map[string]func(json.RawMessage) string{
		"get_time":    func(json.RawMessage) string { return "CHUCKY-E2E-NOON" },
		"get_weather": func(json.RawMessage) string { t.Error("the blocked tool was called"); return "SUNNY" },
	}
	c.prompt(ctx, `call mcp__client-tools__get_time {"city":"Paris"}`)
	if end := c.stream(ctx, handlers); end.Type != "result" || strings.Contains(end.Raw, `"is_error":true`) {
		t.Fatalf("first turn ended with %s", end.Raw)
	}
	for _, m := range c.seen {
		if m.Type == "system" && strings.Contains(m.Raw, `"subtype":"init"`) &&
			(strings.Contains(m.Raw, "mcp__client-tools__get_weather") || !strings.Contains(m.Raw, "mcp__client-tools__get_time")) {
			t.Fatalf("the agent's tools: want get_time and not the blocked get_weather: %.2000s", m.Raw)
		}
	}
	if msg := lastToolResult(t, ms); !strings.Contains(msg, "CHUCKY-E2E-NOON") {
		t.Fatalf("tool_result given to the model: %s", msg)
	}
	c.prompt(ctx, "say SECOND")
	if end := c.stream(ctx, handlers); end.Type != "result" || strings.Contains(end.Raw, `"is_error":true`) {
		t.Fatalf("second turn ended with %s", end.Raw)
	}
	c.close(ctx)

	// Plan mode, through the model proxy, on a budget below the proxy's worst-case reservation.
	plan := newChuckyClient(t, st, "chuck-plan", func(cl *token.Claims) { cl.Budget.AIMicros = 500_000 })
	plan.open(ctx, `{"model":"claude-sonnet-4-5","permissionMode":"plan"}`)
	plan.prompt(ctx, "say PLANNED")
	if end := plan.stream(ctx, nil); end.Type != "result" || strings.Contains(end.Raw, `"is_error":true`) {
		t.Fatalf("plan mode turn ended with %s", end.Raw)
	}
	plan.close(ctx)

	// The first session's user, now with a budget its turns have spent.
	poor := newChuckyClient(t, st, "chuck-e2e", func(cl *token.Claims) { cl.Budget.AIMicros = 1 })
	poor.conn = poor.dial(ctx)
	poor.send(ctx, `{"type":"init","payload":{"model":"claude-sonnet-4-5"}}`)
	last := poor.conn.errorThenClose(ctx, wire.BudgetExceeded, websocket.StatusCode(wire.BudgetExceeded.CloseCode()))
	var e wire.Error
	if err := json.Unmarshal(last.Payload, &e); err != nil || !strings.HasPrefix(e.Message, "budget exceeded") {
		t.Fatalf("error %s: want a message Chucky's createError types as BudgetExceededError", last.Raw)
	}
}
