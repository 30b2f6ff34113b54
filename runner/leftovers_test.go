package runner_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/warren-mesh/warren/internal/wire"
)

// attackScript is what a hostile or confused agent runs in its sandbox: it keeps its session token, calls
// a model its token does not allow, and leaves a loop behind that calls the model after the turn.
const attackScript = `echo "$ANTHROPIC_API_KEY" > token.txt
echo "$ANTHROPIC_BASE_URL" > url.txt
curl -s -H "x-api-key: $ANTHROPIC_API_KEY" -H 'content-type: application/json' \
  -d '{"model":"claude-opus-4-1","max_tokens":5,"messages":[{"role":"user","content":"x"}]}' \
  "$ANTHROPIC_BASE_URL/v1/messages" > forbidden.txt
(while true; do
  curl -s -o /dev/null -w '%{http_code}\n' -H "x-api-key: $ANTHROPIC_API_KEY" -H 'content-type: application/json' \
    -d '{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[{"role":"user","content":"x"}]}' \
    "$ANTHROPIC_BASE_URL/v1/messages" >> leftover.txt
  sleep 0.2
done) > /dev/null 2>&1 &
`

// dialAs opens the agent channel with a grant, as the edge does.
func (h *harness) dialAs(t testing.TB, g wire.Grant) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(h.url, "http")+"/v1/agent", &websocket.DialOptions{
		HTTPHeader: http.Header{"Authorization": {"Bearer " + h.key}, wire.HeaderGrant: {g.Encode()}},
	})
	if err != nil {
		t.Fatalf("dial agent: %v", err)
	}
	c.SetReadLimit(2 * wire.MaxFrame)
	t.Cleanup(func() { c.CloseNow() })
	return c
}

// turn opens the session (init with sessionID; "" opens a new one) on c, runs one prompt and returns its
// result and the session's id.
func turn(t testing.TB, c *websocket.Conn, sessionID, prompt string) (map[string]any, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	write := func(v any) {
		b, _ := json.Marshal(v)
		if err := c.Write(ctx, websocket.MessageText, b); err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	opts := map[string]any{}
	if sessionID != "" {
		opts["sessionId"] = sessionID
	}
	write(map[string]any{"type": "init", "payload": opts})
	write(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": prompt}})
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		switch m["type"] {
		case wire.TypeControl:
			if p, _ := m["payload"].(map[string]any); p["action"] == wire.ActionReady {
				sessionID, _ = p["data"].(map[string]any)["sessionId"].(string)
			}
		case "result":
			return m, sessionID
		case wire.TypeError:
			t.Fatalf("turn failed: %s", b)
		}
	}
}

func readWorkspace(t testing.TB, h *harness, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(h.ws, name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// callProxy calls the model proxy from outside the sandbox with a session token.
func callProxy(t testing.TB, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/messages",
		strings.NewReader(`{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`))
	req.Header.Set("X-Api-Key", token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The agent's session token only ever works for its own process, during its own turns, for the models
// its token allows: a forbidden model is refused, a loop the agent leaves behind is refused between
// turns, and the token is revoked when its process exits.
func TestAgentLeftoversCannotSpend(t *testing.T) {
	h, ms := agentRunner(t, "", nil)
	if err := os.WriteFile(filepath.Join(h.ws, "attack.sh"), []byte(attackScript), 0o644); err != nil {
		t.Fatal(err)
	}
	grant := wire.Grant{Issuer: "acme", User: "alice", Window: "lifetime", AIMicros: 5_000_000, ComputeSeconds: -1,
		Permissions: json.RawMessage(`{"model":"claude-sonnet-4-5"}`)}

	c := h.dialAs(t, grant)
	res, id := turn(t, c, "", "run sh attack.sh")
	if res["is_error"] == true {
		t.Fatalf("result %v", res)
	}
	if f := readWorkspace(t, h, "forbidden.txt"); !strings.Contains(f, `"permission_error"`) || !strings.Contains(f, "not allowed by this token") {
		t.Errorf("a forbidden model called from the sandbox during a turn got %q, want permission_error", f)
	}
	for _, r := range ms.Requests() {
		if r.Model != "claude-sonnet-4-5" {
			t.Errorf("model %q reached the upstream", r.Model)
		}
	}

	// Between turns the leftover loop's calls are refused (it may have had one through while the turn was
	// winding down) and none reaches the upstream.
	refusedInARow := func(n int) func() bool {
		return func() bool {
			lines := strings.Fields(readWorkspace(t, h, "leftover.txt"))
			k := 0
			for i := len(lines) - 1; i >= 0 && lines[i] == "403"; i-- {
				k++
			}
			return k >= n
		}
	}
	waitFor(t, "the leftover loop to be refused between turns", refusedInARow(1))
	upstreamAfterTurn := len(ms.Requests())
	waitFor(t, "the leftover loop to be refused again", refusedInARow(4))
	token, url := readWorkspace(t, h, "token.txt"), readWorkspace(t, h, "url.txt")
	if status, b := callProxy(t, url, token); status != http.StatusForbidden || !strings.Contains(b, "no turn of this session is running") {
		t.Errorf("a call with no running turn: %d %s", status, b)
	}
	if n := len(ms.Requests()); n != upstreamAfterTurn {
		t.Errorf("%d upstream requests after the turn ended", n-upstreamAfterTurn)
	}

	// Another token's permissions restart the session's agent process: the old process's token is revoked.
	c.Close(websocket.StatusNormalClosure, "")
	grant.Permissions = json.RawMessage(`{"model":"claude-haiku-4-5"}`)
	c2 := h.dialAs(t, grant)
	if res, _ := turn(t, c2, id, "run env > env.txt"); res["is_error"] == true {
		t.Fatalf("result %v", res)
	}
	// The CLI is told to use the one allowed model for its background calls and subagents too.
	for _, v := range []string{"ANTHROPIC_SMALL_FAST_MODEL", "CLAUDE_CODE_SUBAGENT_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL"} {
		if env := "\n" + readWorkspace(t, h, "env.txt") + "\n"; !strings.Contains(env, "\n"+v+"=claude-haiku-4-5\n") {
			t.Errorf("the agent's environment lacks %s=claude-haiku-4-5", v)
		}
	}
	if status, b := callProxy(t, url, token); status != http.StatusUnauthorized || !bytes.Contains([]byte(b), []byte("authentication_error")) {
		t.Errorf("the exited process's token: %d %s, want 401", status, b)
	}
	if last := ms.Requests()[len(ms.Requests())-1]; last.Model != "claude-haiku-4-5" {
		t.Errorf("the restarted agent called %q, want the newly allowed model", last.Model)
	}
}
