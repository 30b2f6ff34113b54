package warren

import (
	"context"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/warren-mesh/warren/internal/wire"
)

// A turn ends at its own result, not at one queued before it started. The server plays what the runner
// sends (runner/session's hub: session_info processing, the agent's events, the result, session_info
// ready) for an interrupted turn followed by a stray second result of that turn, which reaches the client
// after the turn's end and before the next turn's processing. The next Prompt yields the stray result and
// goes on to its own turn's answer and result.
func TestPromptEndsAtItsOwnResult(t *testing.T) {
	ctx := context.Background()
	srv := fakeEdge(t, func(ctx context.Context, c *websocket.Conn, r *http.Request) {
		readMsg(ctx, t, c) // init
		send(ctx, t, c, 1, wire.Control(wire.ActionSessionInfo, map[string]any{"state": "initializing", "sessionId": "s1"}))
		ready(ctx, t, c, 2)
		send(ctx, t, c, 3, wire.Control(wire.ActionSessionInfo, map[string]any{"state": "ready", "sessionId": "s1"}))

		if m := readMsg(ctx, t, c); m["type"] != "user" {
			t.Errorf("want the first prompt, got %v", m)
		}
		send(ctx, t, c, 4, wire.Control(wire.ActionSessionInfo, map[string]any{"state": "processing", "sessionId": "s1"}))
		send(ctx, t, c, 5, []byte(`{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"sleep 120"}}]}}`))
		send(ctx, t, c, 6, []byte(`{"type":"result","subtype":"error_during_execution","is_error":true,"result":"interrupted"}`))
		// What is left of the interrupted turn: a stray second result, then the session ready.
		send(ctx, t, c, 7, []byte(`{"type":"result","subtype":"error_during_execution","is_error":true,"result":"stale"}`))
		send(ctx, t, c, 8, wire.Control(wire.ActionSessionInfo, map[string]any{"state": "ready", "sessionId": "s1"}))

		if m := readMsg(ctx, t, c); m["type"] != "user" {
			t.Errorf("want the second prompt, got %v", m)
		}
		send(ctx, t, c, 9, wire.Control(wire.ActionSessionInfo, map[string]any{"state": "processing", "sessionId": "s1"}))
		send(ctx, t, c, 10, []byte(`{"type":"assistant","message":{"content":[{"type":"text","text":"You said: still here"}]}}`))
		send(ctx, t, c, 11, []byte(`{"type":"result","subtype":"success","is_error":false,"result":"You said: still here"}`))
		send(ctx, t, c, 12, wire.Control(wire.ActionSessionInfo, map[string]any{"state": "ready", "sessionId": "s1"}))
		expectClose(ctx, t, c)
	})
	s, err := dial(t, srv, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	turn := func(prompt string) []int64 {
		var seqs []int64
		for ev, err := range s.Prompt(context.Background(), prompt) {
			if err != nil {
				t.Fatalf("Prompt(%q): %v after %v", prompt, err, seqs)
			}
			seqs = append(seqs, ev.Seq)
		}
		return seqs
	}
	// The first turn yields the handshake first and ends at its result.
	if got, want := turn("run sleep 120"), []int64{1, 2, 3, 4, 5, 6}; !reflect.DeepEqual(got, want) {
		t.Fatalf("the interrupted turn yielded seqs %v, want %v", got, want)
	}
	// The second yields what was left of the first (the stray result 7 does not end it), then its own
	// turn up to its result.
	if got, want := turn("still here"), []int64{7, 8, 9, 10, 11}; !reflect.DeepEqual(got, want) {
		t.Fatalf("the next turn yielded seqs %v, want %v (it ended at the stray result?)", got, want)
	}
	ev, err := s.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info, ok := ev.SessionInfo(); !ok || info.State != StateReady || ev.Seq != 12 {
		t.Fatalf("after the turn: %s, want session_info ready", ev.Raw)
	}
}

// The hostile review's scenario: the caller abandons turn 1 (breaks out of its loop) and prompts again;
// prompt 2 queues behind turn 1, which then fails. Turn 1's error, which names turn 1's prompt, arrives
// before prompt 2's turn starts: it is yielded as an event and does not end Prompt(2), which goes on to
// its own turn and ends at its result. Every prompt carries a fresh uuid.
func TestPromptNotEndedByAnEarlierTurnsError(t *testing.T) {
	ctx := testCtx(t)
	info := func(state, uuid string) []byte {
		return wire.Control(wire.ActionSessionInfo, map[string]any{"state": state, "sessionId": "s1", "uuid": uuid})
	}
	srv := fakeEdge(t, func(ctx context.Context, c *websocket.Conn, r *http.Request) {
		readMsg(ctx, t, c) // init
		send(ctx, t, c, 1, wire.Control(wire.ActionReady, map[string]any{"sessionId": "s1", "region": "r1", "model": "m1", "promptUuids": true}))
		send(ctx, t, c, 2, wire.Control(wire.ActionSessionInfo, map[string]any{"state": "ready", "sessionId": "s1"}))
		m := readMsg(ctx, t, c)
		u1, _ := m["uuid"].(string)
		send(ctx, t, c, 3, info("processing", u1))
		send(ctx, t, c, 4, []byte(`{"type":"assistant","message":{"content":[{"type":"text","text":"thinking"}]}}`))
		m = readMsg(ctx, t, c) // prompt 2, queued behind turn 1
		u2, _ := m["uuid"].(string)
		if u1 == "" || u2 == "" || u1 == u2 {
			t.Errorf("prompt uuids %q and %q: want two fresh ones", u1, u2)
		}
		// Turn 1 fails.
		send(ctx, t, c, 5, wire.ErrorMessage(wire.Errorf(wire.Internal, "the model failed").WithDetails(map[string]any{"uuid": u1})))
		send(ctx, t, c, 6, info("ready", u1))
		send(ctx, t, c, 7, info("processing", u2))
		send(ctx, t, c, 8, []byte(`{"type":"result","subtype":"success","is_error":false,"result":"two"}`))
		send(ctx, t, c, 9, info("ready", u2))
		expectClose(ctx, t, c)
	})
	s, err := dial(t, srv, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	for ev, err := range s.Prompt(ctx, "one") {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == EventAssistant {
			break // abandoned
		}
	}
	var seqs []int64
	for ev, err := range s.Prompt(ctx, "two") {
		if err != nil {
			t.Fatalf("Prompt(two) ended with %v after seqs %v (turn 1's error?)", err, seqs)
		}
		seqs = append(seqs, ev.Seq)
	}
	if want := []int64{5, 6, 7, 8}; !reflect.DeepEqual(seqs, want) {
		t.Fatalf("Prompt(two) yielded seqs %v, want %v (turn 1's error and ready, then its own turn to its result)", seqs, want)
	}
}

// After a failover reconnect, a prompt whose turn had not started is sent again on the new connection with
// the same uuid (the runner said in ready that it runs a uuid once), and Prompt ends at that turn's result.
func TestPromptSentAgainAfterFailover(t *testing.T) {
	ctx := testCtx(t)
	r := newFakeRunner(t)
	r.dedupes = true
	a := r.edge("ra", nil)
	b := r.edge("rb", nil)
	events := make(failoverEvents, 16)
	s, err := Dial(ctx, a.URL, "tok", &DialOptions{Failover: &Failover{Edges: []string{b.URL}, MinBackoff: time.Millisecond,
		OnEvent: func(ev FailoverEvent) { events <- ev }}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	type outcome struct {
		seqs []int64
		err  error
	}
	done := make(chan outcome, 1)
	go func() {
		var o outcome
		for ev, err := range s.Prompt(ctx, "queued") {
			if err != nil {
				o.err = err
				break
			}
			o.seqs = append(o.seqs, ev.Seq)
		}
		done <- o
	}()
	<-r.prompts
	u := <-r.uuids
	a.kill() // the prompt was received, its turn not started
	events.next(t, FailoverReconnected)
	select {
	case p := <-r.prompts:
		if again := <-r.uuids; p != "queued" || again != u {
			t.Fatalf("after the reconnect got prompt %q uuid %q, want %q sent again with %q", p, again, "queued", u)
		}
	case <-ctx.Done():
		t.Fatal("the prompt whose turn had not started was not sent again after the reconnect")
	}
	r.emit(string(wire.Control(wire.ActionSessionInfo, map[string]any{"state": "processing", "sessionId": "s1", "uuid": u})))
	res := r.emit(`{"type":"result","subtype":"success","is_error":false,"result":"done"}`)
	o := <-done
	if o.err != nil || len(o.seqs) == 0 || o.seqs[len(o.seqs)-1] != res {
		t.Fatalf("Prompt yielded %v, %v; want its turn up to the result (seq %d)", o.seqs, o.err, res)
	}
}
