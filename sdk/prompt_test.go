package warren

import (
	"context"
	"net/http"
	"reflect"
	"testing"

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
