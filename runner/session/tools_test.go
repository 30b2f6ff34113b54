package session

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/warren-mesh/warren/internal/wire"
)

// toolAgent calls one client tool per turn and emits what it got back as an event.
type toolAgent struct{}

func (toolAgent) Run(ctx context.Context, turn Turn, emit func([]byte)) error {
	r := turn.Tools.CallTool(ctx, ToolCall{Name: "mcp__app__lookup", Server: "app", CallName: "lookup", Input: json.RawMessage(`{"q":"x"}`), ToolUseID: "toolu_1"})
	b, _ := json.Marshal(map[string]any{"type": "tool_outcome", "result": r})
	emit(b)
	return nil
}

// recvUntil reads messages until one satisfies stop, returning them all.
func recvUntil(t *testing.T, p *pipeConn, stop func(m map[string]any) bool) []map[string]any {
	t.Helper()
	var got []map[string]any
	for range 50 {
		m := p.recv(t)
		got = append(got, m)
		if stop(m) {
			return got
		}
	}
	t.Fatalf("no expected message among %v", got)
	return nil
}

func isType(typ string) func(map[string]any) bool {
	return func(m map[string]any) bool { return m["type"] == typ }
}

func payload(m map[string]any) map[string]any { p, _ := m["payload"].(map[string]any); return p }

func hasState(msgs []map[string]any, state string) bool {
	for _, m := range msgs {
		if d, _ := payload(m)["data"].(map[string]any); d != nil && d["state"] == state {
			return true
		}
	}
	return false
}

func toolResultMsg(callID, text string) string {
	return `{"type":"tool_result","payload":{"callId":"` + callID + `","result":{"content":[{"type":"text","text":"` + text + `"}]}}}`
}

func TestToolCallAnswered(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := newHub(t, Config{Agent: toolAgent{}, Metrics: reg})
	p, _ := serve(t, h)
	initSession(t, p, `{"sessionId":"s"}`)
	p.send(`{"type":"user","message":{"role":"user","content":"go"}}`)
	msgs := recvUntil(t, p, isType(wire.TypeToolCall))
	if !hasState(msgs, wire.StateWaitingTool) {
		t.Fatalf("no session_info waiting_tool before the tool_call: %v", msgs)
	}
	call := payload(msgs[len(msgs)-1])
	id, _ := call["callId"].(string)
	if !wire.ValidCallID(id) || call["toolName"] != "lookup" || call["serverName"] != "app" || call["qualifiedName"] != "mcp__app__lookup" || call["toolUseId"] != "toolu_1" ||
		call["input"].(map[string]any)["q"] != "x" {
		t.Fatalf("tool_call payload %v", call)
	}

	// Hostile and wrong answers are refused with typed errors; the call stays pending.
	for msg, code := range map[string]wire.Code{
		`{"type":"tool_result","payload":{"callId":"` + id + `","result":{"content":[{"type":"nope"}]}}}`: wire.InvalidArgument,
		`{"type":"tool_result","payload":{"callId":"` + id + `","result":{"content":"text"}}}`:            wire.InvalidArgument,
		toolResultMsg(id, strings.Repeat("x", wire.MaxToolResultBytes)):                                   wire.PayloadTooLarge,
		toolResultMsg("call_unknown", "x"):                                                                wire.InvalidArgument,
	} {
		p.send(msg)
		m := p.recv(t)
		if m["type"] != "error" || payload(m)["code"] != string(code) {
			t.Fatalf("answer %.100s: got %v, want error %s", msg, m, code)
		}
	}
	p.send(toolResultMsg(id, "found it"))
	msgs = recvUntil(t, p, isType("tool_outcome"))
	if !hasState(msgs, wire.StateProcessing) {
		t.Fatalf("no session_info processing after the answer: %v", msgs)
	}
	out, _ := json.Marshal(msgs[len(msgs)-1]["result"])
	if !strings.Contains(string(out), "found it") || strings.Contains(string(out), "isError") {
		t.Fatalf("the agent got %s", out)
	}
	recvUntil(t, p, func(m map[string]any) bool {
		d, _ := payload(m)["data"].(map[string]any)
		return d != nil && d["state"] == "ready"
	})
	// A late second answer is a conflict.
	p.send(toolResultMsg(id, "again"))
	if m := p.recv(t); m["type"] != "error" || payload(m)["code"] != string(wire.Conflict) {
		t.Fatalf("second answer: %v, want conflict", m)
	}
	if n := counterValue(t, h.tools.calls.WithLabelValues(outcomeAnswered)); n != 1 {
		t.Errorf("answered calls = %v, want 1", n)
	}
	if n := counterValue(t, h.tools.rejected.WithLabelValues(string(wire.PayloadTooLarge))); n != 1 {
		t.Errorf("rejected payload_too_large = %v, want 1", n)
	}
	mfs, err := reg.Gather()
	var observed uint64
	for _, mf := range mfs {
		if mf.GetName() == "warren_agent_tool_call_seconds" {
			observed = mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	if err != nil || observed != 1 {
		t.Errorf("latency histogram: %d observations, %v", observed, err)
	}
}

func TestToolCallTimeout(t *testing.T) {
	h := newHub(t, Config{Agent: toolAgent{}, ToolTimeout: 100 * time.Millisecond})
	p, _ := serve(t, h)
	initSession(t, p, `{}`)
	p.send(`{"type":"user","message":{"role":"user","content":"go"}}`)
	recvUntil(t, p, isType(wire.TypeToolCall))
	msgs := recvUntil(t, p, isType("tool_outcome"))
	var timeoutErr map[string]any
	for _, m := range msgs {
		if m["type"] == "error" {
			timeoutErr = payload(m)
		}
	}
	if timeoutErr["code"] != string(wire.Timeout) || timeoutErr["details"].(map[string]any)["toolName"] != "mcp__app__lookup" {
		t.Fatalf("no timeout error event for the client: %v", msgs)
	}
	out, _ := json.Marshal(msgs[len(msgs)-1]["result"])
	if !strings.Contains(string(out), `"isError":true`) || !strings.Contains(string(out), "did not answer") {
		t.Fatalf("the agent got %s, want an error result", out)
	}
	if n := counterValue(t, h.tools.calls.WithLabelValues(outcomeTimeout)); n != 1 {
		t.Errorf("timed out calls = %v, want 1", n)
	}
}

// TestToolCallWaitsForReattach: a client that leaves mid-call gets the pending call again when it comes
// back (with or without lastSeq), and its answer reaches the agent.
func TestToolCallWaitsForReattach(t *testing.T) {
	for _, name := range []string{"without lastSeq", "lastSeq before the call", "lastSeq after the call"} {
		t.Run(name, func(t *testing.T) {
			h := newHub(t, Config{Agent: toolAgent{}})
			p, _ := serve(t, h)
			initSession(t, p, `{"sessionId":"s"}`)
			p.send(`{"type":"user","message":{"role":"user","content":"go"}}`)
			msgs := recvUntil(t, p, isType(wire.TypeToolCall))
			call := msgs[len(msgs)-1]
			callSeq := int64(call["seq"].(float64))
			p.Close(nil)

			q, _ := serve(t, h)
			init := `{"sessionId":"s"}`
			switch name {
			case "lastSeq before the call":
				init = `{"sessionId":"s","lastSeq":` + jsonInt(callSeq-1) + `}`
			case "lastSeq after the call":
				init = `{"sessionId":"s","lastSeq":` + jsonInt(callSeq) + `}`
			}
			q.send(`{"type":"init","payload":` + init + `}`)
			got := recvUntil(t, q, func(m map[string]any) bool {
				d, _ := payload(m)["data"].(map[string]any)
				return d != nil && d["state"] == wire.StateWaitingTool && m["type"] == "control" && payload(m)["action"] == "session_info"
			})
			// Exactly one copy of the call reaches the new connection (replayed or resent).
			var calls []map[string]any
			for _, m := range got {
				if m["type"] == wire.TypeToolCall {
					calls = append(calls, m)
				}
			}
			if len(calls) == 0 {
				calls = append(calls, q.recv(t))
			}
			if len(calls) != 1 || calls[0]["type"] != wire.TypeToolCall || payload(calls[0])["callId"] != payload(call)["callId"] {
				t.Fatalf("after reattach: %v then %v", got, calls)
			}
			q.send(toolResultMsg(payload(call)["callId"].(string), "late but fine"))
			msgs = recvUntil(t, q, isType("tool_outcome"))
			if out, _ := json.Marshal(msgs[len(msgs)-1]); !strings.Contains(string(out), "late but fine") {
				t.Fatalf("the agent got %s", out)
			}
		})
	}
}

func jsonInt(n int64) string { b, _ := json.Marshal(n); return string(b) }

// TestToolCallFirstAnswerWins: with two clients attached, both see the call; the first answer is the
// result and the second is a conflict.
func TestToolCallFirstAnswerWins(t *testing.T) {
	h := newHub(t, Config{Agent: toolAgent{}})
	a, _ := serve(t, h)
	initSession(t, a, `{"sessionId":"s"}`)
	b, _ := serve(t, h)
	b.send(`{"type":"init","payload":{"sessionId":"s"}}`)
	b.recv(t) // ready
	b.recv(t) // session_info: the session exists, no initializing
	a.send(`{"type":"user","message":{"role":"user","content":"go"}}`)
	callA := recvUntil(t, a, isType(wire.TypeToolCall))
	callB := recvUntil(t, b, isType(wire.TypeToolCall))
	id := payload(callA[len(callA)-1])["callId"].(string)
	if payload(callB[len(callB)-1])["callId"] != id {
		t.Fatal("the clients saw different calls")
	}
	b.send(toolResultMsg(id, "from b"))
	msgs := recvUntil(t, a, isType("tool_outcome"))
	if out, _ := json.Marshal(msgs[len(msgs)-1]); !strings.Contains(string(out), "from b") {
		t.Fatalf("the agent got %s", out)
	}
	a.send(toolResultMsg(id, "from a"))
	m := recvUntil(t, a, isType("error"))
	if e := payload(m[len(m)-1]); e["code"] != string(wire.Conflict) || e["details"].(map[string]any)["callId"] != id {
		t.Fatalf("second answer: %v, want conflict naming the call", e)
	}
}

// TestToolCallCancelledByInterrupt: an interrupt ends a call nobody answers; the agent gets an error
// result and the session leaves waiting_tool.
func TestToolCallCancelledByInterrupt(t *testing.T) {
	h := newHub(t, Config{Agent: toolAgent{}})
	p, _ := serve(t, h)
	initSession(t, p, `{}`)
	p.send(`{"type":"user","message":{"role":"user","content":"go"}}`)
	recvUntil(t, p, isType(wire.TypeToolCall))
	p.send(`{"type":"control","payload":{"action":"interrupt"}}`)
	msgs := recvUntil(t, p, isType("tool_outcome"))
	if out, _ := json.Marshal(msgs[len(msgs)-1]); !strings.Contains(string(out), "cancelled") {
		t.Fatalf("the agent got %s", out)
	}
	if n := counterValue(t, h.tools.calls.WithLabelValues(outcomeCancelled)); n != 1 {
		t.Errorf("cancelled calls = %v, want 1", n)
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// loopAgent calls the client tool b.N times in one turn.
type loopAgent struct{ n int }

func (a loopAgent) Run(ctx context.Context, turn Turn, emit func([]byte)) error {
	for range a.n {
		turn.Tools.CallTool(ctx, ToolCall{Name: "mcp__app__lookup", Input: json.RawMessage(`{}`)})
	}
	return nil
}

// BenchmarkToolCallRoundTrip: one client tool call through the hub: tool_call out, tool_result parsed and
// matched, the agent resumed (in-memory transport; no CLI, no network).
func BenchmarkToolCallRoundTrip(b *testing.B) {
	h := newHub(b, Config{Agent: loopAgent{n: b.N}, History: 100})
	p, _ := serve(b, h)
	initSession(b, p, `{}`)
	b.ResetTimer()
	p.send(`{"type":"user","message":{"role":"user","content":"go"}}`)
	for answered := 0; answered < b.N; {
		m := p.recv(b)
		if m["type"] == wire.TypeToolCall {
			p.send(toolResultMsg(payload(m)["callId"].(string), "ok"))
			answered++
		}
	}
}
