package runner_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner"
)

// TestAgentProcessFollowsClients: a session's agent process starts when a client opens the session,
// before any prompt; it is released AgentIdle after the last client left, with no turn running; a client
// coming back starts it again, and its prompt resumes the session.
func TestAgentProcessFollowsClients(t *testing.T) {
	h, _ := agentRunner(t, "", nil, func(c *runner.Config) { c.AgentIdle = 200 * time.Millisecond })
	grant := wire.Grant{Issuer: "acme", User: "alice", Window: "lifetime", AIMicros: 5_000_000, ComputeSeconds: -1}
	c := h.dialAs(t, grant)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"type":"init","payload":{}}`)); err != nil {
		t.Fatal(err)
	}
	id := ""
	for id == "" {
		_, b, err := c.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			Payload struct {
				Action string `json:"action"`
				Data   struct {
					SessionID string `json:"sessionId"`
				} `json:"data"`
			} `json:"payload"`
		}
		_ = json.Unmarshal(b, &m)
		if m.Payload.Action == wire.ActionReady {
			id = m.Payload.Data.SessionID
		}
	}
	running := func() bool { return len(processesMatching(id)) > 0 }
	waitFor(t, "the agent process to start before any prompt", running)
	c.Close(websocket.StatusNormalClosure, "")
	waitFor(t, "the agent process to be released after the client left", func() bool { return !running() })

	c2 := h.dialAs(t, grant)
	if res, _ := turn(t, c2, id, "hello"); res["is_error"] == true {
		t.Fatalf("result %v", res)
	}
	if !running() {
		t.Fatal("no agent process while its client is attached")
	}
}
