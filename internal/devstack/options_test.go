package devstack_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/warren-mesh/warren/internal/token"
	"github.com/warren-mesh/warren/internal/wire"
	warren "github.com/warren-mesh/warren/sdk"
)

// TestSessionOptionsThroughTheEdge: through the edge, on /ws/ too, with the real CLI: an unknown session is
// not_found before ready; ready names the model system/init names (an alias resolved); the token's
// sdkConfig tools preset works; and an option the runner refuses closes the channel with a JSON reason.
func TestSessionOptionsThroughTheEdge(t *testing.T) {
	st := agentStack(t, agentOpts{})
	ctx := agentCtx(t)
	c := client(t, st, "olga", withBudget(5_000_000), func(cl *token.Claims) {
		cl.SDKConfig = json.RawMessage(`{"tools":{"type":"preset","preset":"claude_code"}}`)
	})

	if _, err := c.Dial(ctx, &warren.SessionOptions{SessionID: "no-such-session"}); !warren.IsCode(err, warren.CodeNotFound) {
		t.Fatalf("dial an unknown session: %v, want not_found", err)
	}

	s, err := warren.Dial(ctx, st.URL()+"/ws/", mint(t, st, "olga", withBudget(5_000_000)), &warren.DialOptions{
		SessionOptions: warren.SessionOptions{Model: "sonnet"},
	})
	if err != nil {
		t.Fatalf("dial /ws/: %v", err)
	}
	defer s.Close()
	evs, r := turn(t, ctx, s, "hello")
	if r.IsError {
		t.Fatalf("result %+v", r)
	}
	var initModel string
	for _, ev := range evs {
		if se, ok := ev.System(); ok && se.Subtype == "init" {
			initModel = se.Model
		}
	}
	if s.Model() == "sonnet" || s.Model() != initModel {
		t.Errorf("ready model %q, system/init model %q: want the same resolved model", s.Model(), initModel)
	}

	// The sdkConfig's tools preset: every prompt works.
	s2, err := c.Dial(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if _, r := turn(t, ctx, s2, "hello"); r.IsError {
		t.Fatalf("a prompt under sdkConfig tools preset: %+v", r)
	}
	_ = s2.Close()

	// A beta the model proxy does not allow is refused by the runner at init: error, then a close whose
	// reason is JSON.
	wsURL := "ws" + strings.TrimPrefix(st.URL(), "http") + "/ws"
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(dctx, wsURL, &websocket.DialOptions{HTTPHeader: http.Header{
		"Authorization": {"Bearer " + mint(t, st, "olga", withBudget(5_000_000))},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	if err := conn.Write(dctx, websocket.MessageText, []byte(`{"type":"init","payload":{"betas":["files-api-2025-04-14"]}}`)); err != nil {
		t.Fatal(err)
	}
	_, b, err := conn.Read(dctx)
	if err != nil || !strings.Contains(string(b), `"invalid_argument"`) || !strings.Contains(string(b), "betas") {
		t.Fatalf("init with a refused beta answered %s (%v)", b, err)
	}
	_, _, err = conn.Read(dctx)
	var e wire.Error
	if websocket.CloseStatus(err) != 4400 || json.Unmarshal([]byte(closeReason(err)), &e) != nil || e.Code != wire.InvalidArgument {
		t.Fatalf("close %v: want 4400 with a JSON reason", err)
	}
}

func closeReason(err error) string {
	var ce websocket.CloseError
	if errors.As(err, &ce) {
		return ce.Reason
	}
	return ""
}
