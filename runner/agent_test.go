package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner"
	"github.com/warren-mesh/warren/runner/session"
)

// serverMsg is the part of a server message the tests look at.
type serverMsg struct {
	Seq     int64           `json:"seq"`
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload"`
	raw     []byte
}

func (m serverMsg) control() (action string, data map[string]any) {
	var p struct {
		Action string         `json:"action"`
		Data   map[string]any `json:"data"`
	}
	_ = json.Unmarshal(m.Payload, &p)
	return p.Action, p.Data
}

func (m serverMsg) errorPayload() wire.Error {
	var e wire.Error
	_ = json.Unmarshal(m.Payload, &e)
	return e
}

type agentClient struct {
	t      testing.TB
	c      *websocket.Conn
	closed websocket.CloseError // set by expectClose
}

func (h *harness) dialAgent(t testing.TB) *agentClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(h.url, "http")+"/v1/agent", &websocket.DialOptions{
		HTTPHeader: http.Header{"Authorization": {"Bearer " + h.key}},
	})
	if err != nil {
		t.Fatalf("dial agent: %v", err)
	}
	c.SetReadLimit(2 * wire.MaxFrame)
	t.Cleanup(func() { c.CloseNow() })
	return &agentClient{t: t, c: c}
}

func (a *agentClient) send(msg string) {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
		a.t.Fatalf("send: %v", err)
	}
}

// read returns the next message, or the read error (a close) when allowErr.
func (a *agentClient) next() (serverMsg, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, b, err := a.c.Read(ctx)
	if err != nil {
		return serverMsg{}, err
	}
	var m serverMsg
	if err := json.Unmarshal(b, &m); err != nil {
		a.t.Fatalf("server sent non-JSON %q", b)
	}
	m.raw = b
	return m, nil
}

func (a *agentClient) read() serverMsg {
	a.t.Helper()
	m, err := a.next()
	if err != nil {
		a.t.Fatalf("read: %v", err)
	}
	return m
}

// expectClose reads until the connection closes and returns the close code.
func (a *agentClient) expectClose() websocket.StatusCode {
	a.t.Helper()
	for {
		_, err := a.next()
		if err != nil {
			_ = errors.As(err, &a.closed)
			return websocket.CloseStatus(err)
		}
	}
}

// expectControl reads one control message with the given action and seq.
func (a *agentClient) expectControl(seq int64, action string) map[string]any {
	a.t.Helper()
	m := a.read()
	act, data := m.control()
	if m.Type != wire.TypeControl || act != action || m.Seq != seq {
		a.t.Fatalf("got %s, want control %s with seq %d", m.raw, action, seq)
	}
	return data
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestAgentHandshake(t *testing.T) {
	h := startRunner(t)
	a := h.dialAgent(t)
	a.send(`{"type":"init","payload":{}}`)
	d := a.expectControl(1, wire.ActionSessionInfo)
	id, _ := d["sessionId"].(string)
	if d["state"] != wire.StateInitializing || !uuidRE.MatchString(id) {
		t.Fatalf("session_info %v", d)
	}
	d = a.expectControl(2, wire.ActionReady)
	if d["sessionId"] != id || d["region"] != "test-1" || d["model"] != "default" {
		t.Fatalf("ready %v", d)
	}
	if d := a.expectControl(3, wire.ActionSessionInfo); d["state"] != wire.StateReady {
		t.Fatalf("session_info %v", d)
	}
	waitFor(t, "healthz to count the client", func() bool { return h.r.Clients() == 1 })

	a.send(`{"type":"ping","payload":{"timestamp":42}}`)
	m := a.read()
	if m.Type != wire.TypePong || m.Seq != 4 || string(m.Payload) != `{"timestamp":42}` {
		t.Fatalf("pong %s", m.raw)
	}

	a.send(`{"type":"user","session_id":"x","message":{"role":"user","content":"hi"},"parent_tool_use_id":null}`)
	if d := a.expectControl(5, wire.ActionSessionInfo); d["state"] != wire.StateProcessing {
		t.Fatalf("session_info %v", d)
	}
	m = a.read()
	if e := m.errorPayload(); m.Type != wire.TypeError || m.Seq != 6 || e.Code != wire.Unavailable || e.Message != wire.ChannelMessage(wire.Unavailable, "no agent configured") {
		t.Fatalf("error %s", m.raw)
	}
	if d := a.expectControl(7, wire.ActionSessionInfo); d["state"] != wire.StateReady {
		t.Fatalf("session_info %v", d)
	}

	a.send(`{"type":"control","payload":{"action":"interrupt"}}`)
	a.send(`{"type":"control","payload":{"action":"end_input"}}`)
	a.send(`{"type":"ping"}`)
	if m := a.read(); m.Type != wire.TypePong || m.Seq != 8 {
		t.Fatalf("pong after no-op controls: %s", m.raw)
	}
	a.send(`{"type":"control","payload":{"action":"close"}}`)
	if code := a.expectClose(); code != websocket.StatusNormalClosure {
		t.Fatalf("close code %d, want 1000", code)
	}
	waitFor(t, "the client count to drop", func() bool { return h.r.Clients() == 0 })
}

func TestAgentChosenSessionAndModel(t *testing.T) {
	h := startRunner(t)
	a := h.dialAgent(t)
	a.send(`{"type":"init","payload":{"sessionId":"my-session-1","model":"claude-x"}}`)
	if d := a.expectControl(1, wire.ActionSessionInfo); d["sessionId"] != "my-session-1" {
		t.Fatalf("session_info %v", d)
	}
	if d := a.expectControl(2, wire.ActionReady); d["sessionId"] != "my-session-1" || d["model"] != "claude-x" {
		t.Fatalf("ready %v", d)
	}
	b := h.dialAgent(t)
	b.send(`{"type":"init","payload":{"sessionId":"not valid!"}}`)
	if d := b.expectControl(1, wire.ActionSessionInfo); !uuidRE.MatchString(d["sessionId"].(string)) {
		t.Fatalf("invalid session id not replaced: %v", d)
	}
}

func TestAgentProtocolErrors(t *testing.T) {
	h := startRunner(t)
	tests := []struct {
		name  string
		init  bool
		frame string
		code  wire.Code
		close websocket.StatusCode
	}{
		{"malformed JSON first", false, `{"type":`, wire.InvalidArgument, 4400},
		{"first message not init", false, `{"type":"ping"}`, wire.InvalidArgument, 4400},
		{"malformed JSON later", true, `not json`, wire.InvalidArgument, 4400},
		{"unknown type", true, `{"type":"bogus"}`, wire.InvalidArgument, 4400},
		{"bad control", true, `{"type":"control","payload":{"action":"explode"}}`, wire.InvalidArgument, 4400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := h.dialAgent(t)
			if tt.init {
				a.send(`{"type":"init"}`)
				for i := 0; i < 3; i++ {
					a.read()
				}
			}
			a.send(tt.frame)
			m := a.read()
			if e := m.errorPayload(); m.Type != wire.TypeError || e.Code != tt.code || m.Seq == 0 {
				t.Fatalf("got %s, want error %s with a seq", m.raw, tt.code)
			}
			if code := a.expectClose(); code != tt.close {
				t.Fatalf("close code %d, want %d", code, tt.close)
			}
			// The reason is JSON, as when the edge closes (docs/PROTOCOL.md#errors).
			var e wire.Error
			if err := json.Unmarshal([]byte(a.closed.Reason), &e); err != nil || e.Code != tt.code || e.Message == "" {
				t.Fatalf("close reason %q, want {code, message} with %s", a.closed.Reason, tt.code)
			}
		})
	}
	t.Run("binary frame", func(t *testing.T) {
		a := h.dialAgent(t)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := a.c.Write(ctx, websocket.MessageBinary, []byte(`{"type":"init"}`)); err != nil {
			t.Fatal(err)
		}
		if m := a.read(); m.errorPayload().Code != wire.InvalidArgument {
			t.Fatalf("got %s", m.raw)
		}
		if code := a.expectClose(); code != 4400 {
			t.Fatalf("close code %d", code)
		}
	})
	t.Run("oversize frame", func(t *testing.T) {
		a := h.dialAgent(t)
		a.send(`{"type":"init"}`)
		for i := 0; i < 3; i++ {
			a.read()
		}
		big := `{"type":"ping","payload":{"timestamp":1},"pad":"` + strings.Repeat("x", wire.MaxFrame) + `"}`
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = a.c.Write(ctx, websocket.MessageText, []byte(big)) // the server may close while we write
		if code := a.expectClose(); code != websocket.StatusMessageTooBig {
			t.Fatalf("close code %d, want 1009", code)
		}
	})
	t.Run("no key", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(h.url, "http")+"/v1/agent", nil)
		if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("dial without key: %v %v", resp, err)
		}
	})
	t.Run("plain GET", func(t *testing.T) {
		wantError(t, h.do(t, http.MethodGet, "/v1/agent", nil), wire.InvalidArgument)
	})
}

func TestAgentReconnectReplays(t *testing.T) {
	h := startRunner(t)
	a := h.dialAgent(t)
	a.send(`{"type":"init","payload":{"sessionId":"s1"}}`)
	for seq := int64(1); seq <= 3; seq++ {
		if m := a.read(); m.Seq != seq {
			t.Fatalf("seq %d, want %d", m.Seq, seq)
		}
	}
	a.send(`{"type":"user","message":{"role":"user","content":"hi"}}`)
	var missed []string
	for seq := int64(4); seq <= 6; seq++ {
		m := a.read()
		missed = append(missed, string(m.raw))
	}
	a.c.CloseNow() // the client vanishes

	b := h.dialAgent(t)
	b.send(`{"type":"init","payload":{"sessionId":"s1","lastSeq":4}}`)
	for i, want := range missed[1:] {
		if m := b.read(); string(m.raw) != want {
			t.Fatalf("replay %d = %s, want %s", i, m.raw, want)
		}
	}
	// Then the handshake for this connection, continuing the sequence; no "initializing" for a known session.
	if d := b.expectControl(7, wire.ActionReady); d["sessionId"] != "s1" {
		t.Fatalf("ready %v", d)
	}
	if d := b.expectControl(8, wire.ActionSessionInfo); d["state"] != wire.StateReady {
		t.Fatalf("session_info %v", d)
	}
	b.send(`{"type":"ping"}`)
	if m := b.read(); m.Type != wire.TypePong || m.Seq != 9 {
		t.Fatalf("pong %s", m.raw)
	}

	t.Run("unknown session continues after lastSeq", func(t *testing.T) {
		c := h.dialAgent(t)
		c.send(`{"type":"init","payload":{"sessionId":"gone","lastSeq":50}}`)
		if m := c.read(); m.Seq != 51 {
			t.Fatalf("first seq %d, want 51", m.Seq)
		}
	})
}

// scriptedAgent emits two events per turn and then waits for interruption if asked to.
type scriptedAgent struct{}

func (scriptedAgent) Run(ctx context.Context, turn session.Turn, emit func([]byte)) error {
	emit([]byte(`{"type":"assistant","session_id":"` + turn.SessionID + `","message":{"content":[{"type":"text","text":"hello"}]}}`))
	if strings.Contains(string(turn.Message.Message), "wait") {
		<-ctx.Done()
		return ctx.Err()
	}
	emit([]byte(`{"type":"result","subtype":"success","total_cost_usd":0}`))
	if strings.Contains(string(turn.Message.Message), "fail") {
		return errors.New("agent crashed")
	}
	return nil
}

func TestAgentPluggedIn(t *testing.T) {
	h := startRunner(t, func(c *runner.Config) { c.Agent = scriptedAgent{} })
	a := h.dialAgent(t)
	a.send(`{"type":"init","payload":{"sessionId":"s"}}`)
	for i := 0; i < 3; i++ {
		a.read()
	}
	a.send(`{"type":"user","message":{"role":"user","content":"hi"}}`)
	a.expectControl(4, wire.ActionSessionInfo)
	if m := a.read(); m.Type != "assistant" || m.Seq != 5 || !strings.HasPrefix(string(m.raw), `{"seq":5,"type":"assistant","session_id":"s",`) {
		t.Fatalf("event %s", m.raw)
	}
	if m := a.read(); m.Type != "result" || m.Seq != 6 {
		t.Fatalf("event %s", m.raw)
	}
	if d := a.expectControl(7, wire.ActionSessionInfo); d["state"] != wire.StateReady {
		t.Fatalf("state %v", d)
	}

	a.send(`{"type":"user","message":{"role":"user","content":"wait"}}`)
	a.expectControl(8, wire.ActionSessionInfo)
	a.read() // assistant
	// A prompt sent while a turn runs is queued; the interrupt drops it along with the turn, and says so
	// at once (the turn's end comes after).
	a.send(`{"type":"user","message":{"role":"user","content":"again"}}`)
	a.send(`{"type":"control","payload":{"action":"interrupt"}}`)
	if m := a.read(); m.errorPayload().Code != wire.Conflict {
		t.Fatalf("dropped queued prompt: %s", m.raw)
	}
	if d := a.expectControl(11, wire.ActionSessionInfo); d["state"] != wire.StateReady {
		t.Fatalf("after interrupt %v", d)
	}

	a.send(`{"type":"user","message":{"role":"user","content":"fail"}}`)
	a.expectControl(12, wire.ActionSessionInfo)
	a.read()
	a.read()
	if m := a.read(); m.errorPayload().Code != wire.Internal || m.errorPayload().Message != "internal error" {
		t.Fatalf("agent failure: %s", m.raw)
	}
}

// A prompt that arrives while a turn is winding down runs right after it, in order.
func TestPromptsQueueBehindARunningTurn(t *testing.T) {
	h := startRunner(t, func(c *runner.Config) { c.Agent = scriptedAgent{} })
	a := h.dialAgent(t)
	a.send(`{"type":"init","payload":{"sessionId":"q"}}`)
	for i := 0; i < 3; i++ {
		a.read()
	}
	a.send(`{"type":"user","message":{"role":"user","content":"one"}}`)
	a.send(`{"type":"user","message":{"role":"user","content":"two"}}`)
	results, readies := 0, 0
	for results < 2 || readies < 2 {
		m := a.read()
		switch {
		case m.Type == "result":
			results++
		case m.Type == wire.TypeError:
			t.Fatalf("queued prompt refused: %s", m.raw)
		case m.Type == wire.TypeControl && strings.Contains(string(m.raw), `"state":"ready"`):
			readies++
		}
	}
}
