package warren

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/coder/websocket"

	"github.com/warren-mesh/warren/internal/wire"
)

// fakeEdge is an httptest server speaking the agent channel (docs/PROTOCOL.md#agent-channel) on /ws: script
// plays the server's side of one connection. Failures in the script are reported with t.Errorf; cleanup waits
// for it.
func fakeEdge(t *testing.T, script func(ctx context.Context, c *websocket.Conn, r *http.Request)) *httptest.Server {
	t.Helper()
	var wg sync.WaitGroup
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/ws" {
			wire.WriteHTTPError(w, nil, wire.Errorf(wire.NotFound, "no route %s", r.URL.Path))
			return
		}
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			t.Errorf("accept: %v", err)
			return
		}
		wg.Add(1)
		defer wg.Done()
		defer c.CloseNow()
		script(context.Background(), c, r)
	}))
	t.Cleanup(func() {
		srv.Close()
		wg.Wait()
	})
	return srv
}

// readMsg reads one client message as a generic object.
func readMsg(ctx context.Context, t *testing.T, c *websocket.Conn) map[string]any {
	t.Helper()
	_, b, err := c.Read(ctx)
	if err != nil {
		t.Errorf("server read: %v", err)
		return nil
	}
	if _, err := wire.ParseClientMessage(b); err != nil {
		t.Errorf("client sent an invalid message %s: %v", b, err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Errorf("client sent non-JSON %q", b)
	}
	return m
}

func send(ctx context.Context, t *testing.T, c *websocket.Conn, seq int64, msg []byte) {
	t.Helper()
	if err := c.Write(ctx, websocket.MessageText, wire.WithSeq(msg, seq)); err != nil {
		t.Errorf("server write: %v", err)
	}
}

func ready(ctx context.Context, t *testing.T, c *websocket.Conn, seq int64) {
	t.Helper()
	send(ctx, t, c, seq, wire.Control(wire.ActionReady, map[string]any{"sessionId": "s1", "region": "r1", "model": "m1"}))
}

// expectClose reads until the client's control close, then closes normally.
func expectClose(ctx context.Context, t *testing.T, c *websocket.Conn) {
	t.Helper()
	for {
		m := readMsg(ctx, t, c)
		if m == nil {
			return
		}
		if m["type"] == "control" && m["payload"].(map[string]any)["action"] == "close" {
			c.Close(websocket.StatusNormalClosure, "")
			return
		}
	}
}

func payload(m map[string]any) map[string]any {
	p, _ := m["payload"].(map[string]any)
	return p
}

func dial(t *testing.T, srv *httptest.Server, opts *SessionOptions) (*Session, error) {
	t.Helper()
	c, err := New(srv.URL, "tok", WithUserAgent("test-agent"))
	if err != nil {
		t.Fatal(err)
	}
	return c.Dial(context.Background(), opts)
}

func TestSessionLifecycle(t *testing.T) {
	srv := fakeEdge(t, func(ctx context.Context, c *websocket.Conn, r *http.Request) {
		if got := r.Header.Get("Authorization"); got != "Bearer tok" {
			t.Errorf("Authorization = %q", got)
		}
		if got := r.Header.Get("User-Agent"); got != "test-agent" {
			t.Errorf("User-Agent = %q", got)
		}
		if r.URL.Query().Has("token") {
			t.Error("token sent in the query string")
		}
		init := readMsg(ctx, t, c)
		if init["type"] != "init" || payload(init)["model"] != "m1" || payload(init)["maxTurns"] != 3.0 {
			t.Errorf("init = %v", init)
		}
		send(ctx, t, c, 1, wire.Control(wire.ActionSessionInfo, map[string]any{"state": "initializing"}))
		ready(ctx, t, c, 2)

		user := readMsg(ctx, t, c)
		if u, _ := user["uuid"].(string); len(u) != 36 {
			t.Errorf("user message uuid %q, want a fresh UUID", u)
		}
		delete(user, "uuid")
		want := map[string]any{"type": "user", "session_id": "s1", "parent_tool_use_id": nil,
			"message": map[string]any{"role": "user", "content": "hello"}}
		if !reflect.DeepEqual(user, want) {
			t.Errorf("user message = %v, want %v", user, want)
		}
		send(ctx, t, c, 3, []byte(`{"type":"system","subtype":"init","session_id":"s1"}`))
		send(ctx, t, c, 4, []byte(`{"type":"assistant","message":{"content":[{"type":"text","text":"hi"}]}}`))
		ping := readMsg(ctx, t, c)
		if ping["type"] != "ping" {
			t.Errorf("want ping, got %v", ping)
		}
		pp, _ := json.Marshal(payload(ping))
		send(ctx, t, c, 5, wire.Pong(pp))
		send(ctx, t, c, 6, []byte(`{"type":"result","subtype":"success","total_cost_usd":0.01}`))
		expectClose(ctx, t, c)
	})

	s, err := dial(t, srv, &SessionOptions{Model: "m1", MaxTurns: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.ID() != "s1" || s.Region() != "r1" || s.Model() != "m1" {
		t.Fatalf("ready data: %q %q %q", s.ID(), s.Region(), s.Model())
	}
	ctx := context.Background()
	if err := s.Send(ctx, "hello"); err != nil {
		t.Fatal(err)
	}
	var got []string
	for ev, err := range s.Events() {
		if err != nil {
			t.Fatalf("Events: %v", err)
		}
		name := ev.Type
		if ev.Subtype != "" {
			name += "/" + ev.Subtype
		}
		if a, _, ok := ev.Control(); ok {
			name += ":" + a
		}
		got = append(got, name)
		switch ev.Type {
		case "assistant":
			if rtt, err := s.Ping(ctx); err != nil || rtt < 0 {
				t.Fatalf("Ping while iterating = %v, %v", rtt, err)
			}
		case "result":
			if s.LastSeq() != 6 {
				t.Errorf("LastSeq = %d, want 6", s.LastSeq())
			}
			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		}
	}
	want := []string{"control:session_info", "control:ready", "system/init", "assistant", "result/success"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	if err := s.Err(); err != nil {
		t.Fatalf("Err after a normal close = %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	if err := s.Send(ctx, "again"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Send after Close = %v, want ErrClosed", err)
	}
	if _, err := s.Ping(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Ping after Close = %v, want ErrClosed", err)
	}
}

func TestSessionMessages(t *testing.T) {
	got := make(chan []map[string]any, 1)
	srv := fakeEdge(t, func(ctx context.Context, c *websocket.Conn, r *http.Request) {
		readMsg(ctx, t, c)
		ready(ctx, t, c, 1)
		var msgs []map[string]any
		for range 4 {
			msgs = append(msgs, readMsg(ctx, t, c))
		}
		got <- msgs
		expectClose(ctx, t, c)
	})
	s, err := dial(t, srv, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	for _, err := range []error{
		s.Interrupt(ctx),
		s.EndInput(ctx),
		s.SendToolResult(ctx, "call-1", []json.RawMessage{json.RawMessage(`{"type":"text","text":"42"}`)}, true),
		s.SendMessage(ctx, map[string]any{"type": "user", "session_id": "s1", "uuid": "u1",
			"message": map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "x"}}}}),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	want := []map[string]any{
		{"type": "control", "payload": map[string]any{"action": "interrupt"}},
		{"type": "control", "payload": map[string]any{"action": "end_input"}},
		{"type": "tool_result", "payload": map[string]any{"callId": "call-1",
			"result": map[string]any{"content": []any{map[string]any{"type": "text", "text": "42"}}, "isError": true}}},
		{"type": "user", "session_id": "s1", "uuid": "u1",
			"message": map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "x"}}}},
	}
	if msgs := <-got; !reflect.DeepEqual(msgs, want) {
		t.Fatalf("server got %v\nwant %v", msgs, want)
	}
}

func TestDialErrorBeforeReady(t *testing.T) {
	tests := []struct {
		name    string
		script  func(ctx context.Context, t *testing.T, c *websocket.Conn)
		code    Code
		message string
	}{
		{"error message then close", func(ctx context.Context, t *testing.T, c *websocket.Conn) {
			send(ctx, t, c, 1, wire.Control(wire.ActionSessionInfo, map[string]any{"state": "initializing"}))
			send(ctx, t, c, 2, wire.ErrorMessage(wire.Errorf(wire.BudgetExceeded, "the compute budget is spent")))
			c.Close(websocket.StatusCode(wire.BudgetExceeded.CloseCode()), `{"code":"budget_exceeded","message":"short"}`)
		}, CodeBudgetExceeded, wire.ChannelMessage(wire.BudgetExceeded, "the compute budget is spent")},
		{"close with bare code", func(ctx context.Context, t *testing.T, c *websocket.Conn) {
			c.Close(websocket.StatusCode(wire.ConcurrencyLimit.CloseCode()), "concurrency_limit")
		}, CodeConcurrencyLimit, "connection closed with status 4430"},
		{"close with json", func(ctx context.Context, t *testing.T, c *websocket.Conn) {
			c.Close(websocket.StatusCode(wire.Unavailable.CloseCode()), `{"code":"unavailable","message":"no capacity"}`)
		}, CodeUnavailable, "no capacity"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := fakeEdge(t, func(ctx context.Context, c *websocket.Conn, r *http.Request) {
				readMsg(ctx, t, c)
				tt.script(ctx, t, c)
			})
			s, err := dial(t, srv, nil)
			if err == nil {
				s.Close()
				t.Fatal("Dial succeeded")
			}
			var we *Error
			if !errors.As(err, &we) || we.Code != tt.code || we.Message != tt.message {
				t.Fatalf("Dial error = %v, want %s: %s", err, tt.code, tt.message)
			}
		})
	}
}

func TestDialNormalCloseBeforeReady(t *testing.T) {
	srv := fakeEdge(t, func(ctx context.Context, c *websocket.Conn, r *http.Request) {
		readMsg(ctx, t, c)
		c.Close(websocket.StatusNormalClosure, "")
	})
	if _, err := dial(t, srv, nil); err == nil || !strings.Contains(err.Error(), "before the session was ready") {
		t.Fatalf("Dial = %v", err)
	}
}

func TestDialHTTPError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		wire.WriteHTTPError(w, nil, wire.Errorf(wire.Unauthenticated, "token expired"))
	}))
	defer srv.Close()
	c, _ := New(srv.URL, "tok")
	_, err := c.Dial(context.Background(), nil)
	var we *Error
	if !errors.As(err, &we) || we.Code != CodeUnauthenticated || we.Message != "token expired" {
		t.Fatalf("Dial = %v, want unauthenticated: token expired", err)
	}
}

func TestEventsErrorClose(t *testing.T) {
	long := "the AI budget of this user is spent for the current window; " + strings.Repeat("more words ", 10)
	srv := fakeEdge(t, func(ctx context.Context, c *websocket.Conn, r *http.Request) {
		readMsg(ctx, t, c)
		ready(ctx, t, c, 1)
		send(ctx, t, c, 2, []byte(`{"type":"assistant"}`))
		// As the edge does: the error message, then a close whose reason is only the code (the JSON is too long).
		send(ctx, t, c, 3, wire.ErrorMessage(wire.Errorf(wire.BudgetExceeded, "%s", long)))
		c.Close(websocket.StatusCode(wire.BudgetExceeded.CloseCode()), "budget_exceeded")
	})
	s, err := dial(t, srv, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var types []string
	var errs []error
	for ev, err := range s.Events() {
		if err != nil {
			errs = append(errs, err)
			continue
		}
		types = append(types, ev.Type)
		if ev.Type == "error" {
			if e := ev.Err(); e.Code != CodeBudgetExceeded || e.Message != wire.ChannelMessage(wire.BudgetExceeded, long) {
				t.Errorf("error event = %v", e)
			}
		}
	}
	if want := []string{"control", "assistant", "error"}; !reflect.DeepEqual(types, want) {
		t.Fatalf("events %v, want %v", types, want)
	}
	if len(errs) != 1 || !IsCode(errs[0], CodeBudgetExceeded) || errs[0].(*Error).Message != wire.ChannelMessage(wire.BudgetExceeded, long) {
		t.Fatalf("errors %v, want one budget_exceeded with the full message", errs)
	}
	for range s.Events() {
		t.Fatal("a second Events yielded after the end")
	}
	if !IsCode(s.Err(), CodeBudgetExceeded) {
		t.Fatalf("Err = %v", s.Err())
	}
	if err := s.Send(context.Background(), "x"); !IsCode(err, CodeBudgetExceeded) {
		t.Fatalf("Send after the error close = %v", err)
	}
	if s.LastSeq() != 3 {
		t.Fatalf("LastSeq = %d, want 3", s.LastSeq())
	}
}

func TestPingWithoutEvents(t *testing.T) {
	srv := fakeEdge(t, func(ctx context.Context, c *websocket.Conn, r *http.Request) {
		readMsg(ctx, t, c)
		ready(ctx, t, c, 1)
		for i := range int64(3) {
			send(ctx, t, c, 2+i, []byte(`{"type":"stream_event"}`))
		}
		send(ctx, t, c, 5, wire.Pong(json.RawMessage(`{"timestamp":42}`))) // nobody asked for this one
		for range 2 {
			ping := readMsg(ctx, t, c)
			pp, _ := json.Marshal(payload(ping))
			send(ctx, t, c, 0, wire.Pong(pp))
		}
		expectClose(ctx, t, c)
	})
	s, err := dial(t, srv, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 2 {
		if _, err := s.Ping(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for ev, err := range s.Events() {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev.Type)
	}
	if want := []string{"control", "stream_event", "stream_event", "stream_event", "pong"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
}

func TestResume(t *testing.T) {
	srv := fakeEdge(t, func(ctx context.Context, c *websocket.Conn, r *http.Request) {
		init := readMsg(ctx, t, c)
		if p := payload(init); p["sessionId"] != "s1" || p["lastSeq"] != 5.0 {
			t.Errorf("init payload = %v", p)
		}
		ready(ctx, t, c, 9)
		send(ctx, t, c, 6, []byte(`{"type":"assistant"}`))
		send(ctx, t, c, 7, []byte(`{"type":"result","subtype":"success"}`))
		expectClose(ctx, t, c)
	})
	c, _ := New(srv.URL, "tok")
	ctx, cancel := context.WithCancel(context.Background())
	s, err := c.Resume(ctx, "s1", 5)
	cancel() // the dial context does not bound the session
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.LastSeq() != 5 {
		t.Fatalf("LastSeq before reading = %d", s.LastSeq())
	}
	for ev, err := range s.Events() {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == "result" {
			break
		}
	}
	// The last event read, not the largest seq seen: a ready numbered after the replay must not skip it.
	if s.LastSeq() != 7 {
		t.Fatalf("LastSeq = %d, want 7", s.LastSeq())
	}
}

func TestPackageDial(t *testing.T) {
	srv := fakeEdge(t, func(ctx context.Context, c *websocket.Conn, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			t.Errorf("Authorization = %q", r.Header.Get("Authorization"))
		}
		init := readMsg(ctx, t, c)
		if payload(init)["permissionMode"] != "plan" {
			t.Errorf("init = %v", init)
		}
		ready(ctx, t, c, 1)
		expectClose(ctx, t, c)
	})
	for _, u := range []string{srv.URL, "ws" + strings.TrimPrefix(srv.URL, "http") + "/ws", "ws" + strings.TrimPrefix(srv.URL, "http") + "/ws/"} {
		s, err := Dial(context.Background(), u, "tok", &DialOptions{
			SessionOptions: SessionOptions{PermissionMode: "plan"},
			HTTPClient:     srv.Client(),
		})
		if err != nil {
			t.Fatalf("Dial(%s): %v", u, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestToolCallEvent(t *testing.T) {
	ev, err := decodeEvent([]byte(`{"seq":4,"type":"tool_call","payload":{"callId":"c1","toolName":"lookup","input":{"q":1}}}`))
	if err != nil {
		t.Fatal(err)
	}
	call, ok := ev.ToolCall()
	if !ok || call.CallID != "c1" || call.ToolName != "lookup" || string(call.Input) != `{"q":1}` {
		t.Fatalf("ToolCall = %+v, %v", call, ok)
	}
	if _, err := decodeEvent([]byte(`not json`)); err == nil {
		t.Fatal("decodeEvent accepted a non-object")
	}
}
