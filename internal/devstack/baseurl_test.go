package devstack_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/coder/websocket"

	"github.com/warren-mesh/warren/internal/wire"
)

// TestAgentChannelAtBaseURL: a client given the edge's base URL with no path dials ws://host/?token=…
// (Chucky Cloud's TypeScript SDK builds its URL so): init is answered with ready by the user's runner,
// while a plain GET / is still not found.
func TestAgentChannelAtBaseURL(t *testing.T) {
	st := startStack(t)
	ctx := ctxT(t)
	conn, _, err := websocket.Dial(ctx, "ws://"+st.Addr()+"/?token="+mint(t, st, "bea"), nil)
	if err != nil {
		t.Fatalf("dial the base URL: %v", err)
	}
	defer conn.CloseNow()
	if err := conn.Write(ctx, websocket.MessageText, []byte(`{"type":"init","payload":{"model":"claude-test"}}`)); err != nil {
		t.Fatal(err)
	}
	for {
		_, b, err := conn.Read(ctx)
		if err != nil {
			t.Fatalf("before ready: %v", err)
		}
		var m struct {
			Type    string `json:"type"`
			Payload struct {
				Action string `json:"action"`
				Data   struct {
					SessionID string `json:"sessionId"`
					Model     string `json:"model"`
				} `json:"data"`
			} `json:"payload"`
		}
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("message %s: %v", b, err)
		}
		if m.Type == wire.TypeError {
			t.Fatalf("init answered %s", b)
		}
		if m.Type == wire.TypeControl && m.Payload.Action == wire.ActionReady {
			if m.Payload.Data.SessionID == "" || m.Payload.Data.Model != "claude-test" {
				t.Fatalf("ready %s", b)
			}
			break
		}
	}
	conn.Close(websocket.StatusNormalClosure, "")

	res, err := http.Get(st.URL() + "/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNotFound {
		t.Fatalf("plain GET / answered %d, want 404", res.StatusCode)
	}
}
