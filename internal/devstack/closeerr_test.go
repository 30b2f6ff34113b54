package devstack_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/warren-mesh/warren/internal/devstack"
	"github.com/warren-mesh/warren/internal/token"
	"github.com/warren-mesh/warren/internal/wire"
)

// rawChannel is an agent channel read frame by frame, as a client that is not one of Warren's SDKs (the
// Chucky SDK) reads it.
type rawChannel struct {
	t *testing.T
	c *websocket.Conn
}

type rawMsg struct {
	Type    string          `json:"type"`
	Seq     int64           `json:"seq"`
	Payload json.RawMessage `json:"payload"`
	Raw     string          `json:"-"`
}

func dialRaw(t *testing.T, ctx context.Context, st *devstack.Stack, user string) *rawChannel {
	t.Helper()
	return dialRawToken(t, ctx, st, mint(t, st, user, withBudget(5_000_000)))
}

// dialRawToken opens an agent channel with tok.
func dialRawToken(t *testing.T, ctx context.Context, st *devstack.Stack, tok string) *rawChannel {
	t.Helper()
	c, _, err := websocket.Dial(ctx, "ws://"+st.Addr()+"/ws?token="+tok, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadLimit(wire.MaxFrame + 64)
	t.Cleanup(func() { c.CloseNow() })
	return &rawChannel{t: t, c: c}
}

func (r *rawChannel) send(ctx context.Context, msg string) {
	r.t.Helper()
	if err := r.c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
		r.t.Fatal(err)
	}
}

// next reads one message; err is the close (or the failure) once the channel ended.
func (r *rawChannel) next(ctx context.Context) (rawMsg, error) {
	_, b, err := r.c.Read(ctx)
	if err != nil {
		return rawMsg{}, err
	}
	var m rawMsg
	if err := json.Unmarshal(b, &m); err != nil {
		r.t.Fatalf("%s: %v", b, err)
	}
	m.Raw = string(b)
	return m, nil
}

// until reads messages until one satisfies ok, and returns it.
func (r *rawChannel) until(ctx context.Context, what string, ok func(rawMsg) bool) rawMsg {
	r.t.Helper()
	for {
		m, err := r.next(ctx)
		if err != nil {
			r.t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok(m) {
			return m
		}
	}
}

// startLongTool opens a session and starts a turn running a tool that lasts (the interrupt tests' trick),
// returning once the agent has called it.
func (r *rawChannel) startLongTool(ctx context.Context) {
	r.t.Helper()
	r.send(ctx, `{"type":"init"}`)
	r.until(ctx, "ready", func(m rawMsg) bool { return m.Type == "control" && strings.Contains(string(m.Payload), `"ready"`) })
	r.send(ctx, `{"type":"user","message":{"role":"user","content":"run timeout 120 tail -f /dev/null"}}`)
	r.until(ctx, "the tool call", func(m rawMsg) bool { return m.Type == "assistant" && strings.Contains(m.Raw, "tail -f") })
}

// errorThenClose reads the rest of the channel: its last message must be an error with code, then the
// close with closeCode.
func (r *rawChannel) errorThenClose(ctx context.Context, code wire.Code, closeCode websocket.StatusCode) rawMsg {
	r.t.Helper()
	var last rawMsg
	for {
		m, err := r.next(ctx)
		if err != nil {
			if websocket.CloseStatus(err) != closeCode {
				r.t.Fatalf("channel ended with %v, want the close %d", err, closeCode)
			}
			break
		}
		last = m
	}
	var e wire.Error
	if last.Type != wire.TypeError || json.Unmarshal(last.Payload, &e) != nil || e.Code != code {
		r.t.Fatalf("last message before the close: %s, want an error %s", last.Raw, code)
	}
	return last
}

// runnerPID is the pid of the runner process serving user.
func runnerPID(t *testing.T, user string) int {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		args := strings.Fields(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
		if err != nil || len(args) < 2 || args[1] != "runner" {
			continue
		}
		for i := range args[:len(args)-1] {
			if args[i] == "-user" && args[i+1] == user {
				pid, _ := strconv.Atoi(e.Name())
				return pid
			}
		}
	}
	t.Fatalf("no runner process for %s", user)
	return 0
}

// TestClosesMidTurnSendAnErrorFirst: a turn running a long tool is ended by the runner stopping (SIGTERM)
// and by warren dev stopping (Stack.Close, what its SIGTERM runs); either way the client reads an
// unavailable error message, then the 1001 close, so a client waiting for the turn's messages (the
// Chucky SDK's stream()) ends instead of waiting forever. Before: the 1001 close came with no error.
func TestClosesMidTurnSendAnErrorFirst(t *testing.T) {
	t.Run("runner", func(t *testing.T) {
		st := agentStack(t, agentOpts{})
		ctx := agentCtx(t)
		user := fmt.Sprintf("rudi%d", time.Now().UnixNano())
		r := dialRaw(t, ctx, st, user)
		r.startLongTool(ctx)
		pid := runnerPID(t, user)
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		r.errorThenClose(ctx, wire.Unavailable, websocket.StatusGoingAway)
		// The runner goes on ending its sandbox (the agent's files in its home) after the client has its
		// error: the stack's directory is removed only once it has exited.
		waitFor(t, 30*time.Second, "the runner to exit", func() bool { return syscall.Kill(pid, 0) != nil })
	})
	t.Run("warren_dev", func(t *testing.T) {
		st := agentStack(t, agentOpts{})
		ctx := agentCtx(t)
		r := dialRaw(t, ctx, st, "dora")
		r.startLongTool(ctx)
		closed := make(chan error, 1)
		go func() { closed <- st.Close() }()
		r.errorThenClose(ctx, wire.Unavailable, websocket.StatusGoingAway)
		if err := <-closed; err != nil {
			t.Logf("Close: %v", err)
		}
	})
}

// TestReconnectWithoutInit: a client that reconnects as the Chucky SDK's autoReconnect does — no init,
// the prompt it queued (naming its session) first — is attached to its session and its prompt runs there;
// a connection that sends nothing starts no sandbox for a new user.
func TestReconnectWithoutInit(t *testing.T) {
	st := agentStack(t, agentOpts{})
	ctx := agentCtx(t)
	r := dialRaw(t, ctx, st, "rita")
	r.send(ctx, `{"type":"init"}`)
	ready := r.until(ctx, "ready", func(m rawMsg) bool { return m.Type == "control" && strings.Contains(string(m.Payload), `"ready"`) })
	var p struct {
		Data struct {
			SessionID string `json:"sessionId"`
		} `json:"data"`
	}
	if err := json.Unmarshal(ready.Payload, &p); err != nil || p.Data.SessionID == "" {
		t.Fatalf("ready %s", ready.Raw)
	}
	r.send(ctx, `{"type":"user","message":{"role":"user","content":"remember the word quince"}}`)
	r.until(ctx, "the first result", func(m rawMsg) bool { return m.Type == "result" })
	r.c.Close(websocket.StatusNormalClosure, "")

	again := dialRaw(t, ctx, st, "rita")
	again.send(ctx, fmt.Sprintf(`{"type":"user","session_id":%q,"message":{"role":"user","content":"hello again"},"parent_tool_use_id":null}`, p.Data.SessionID))
	ready2 := again.until(ctx, "ready", func(m rawMsg) bool { return m.Type == "control" && strings.Contains(string(m.Payload), `"ready"`) })
	if !strings.Contains(ready2.Raw, p.Data.SessionID) {
		t.Fatalf("reconnect attached to %s, want session %s", ready2.Raw, p.Data.SessionID)
	}
	res := again.until(ctx, "the reconnect's result", func(m rawMsg) bool { return m.Type == "result" })
	if strings.Contains(res.Raw, `"is_error":true`) {
		t.Fatalf("result %s", res.Raw)
	}
}

// TestComputeBudgetEndsTheChannel: a sandbox whose compute budget runs out while a client is connected is
// stopped by the scheduler, and the client reads budget_exceeded naming the compute budget, then the close
// 4402, so it does not reconnect into a refusal. Before: the runner's shutdown error, unavailable and 1001
// ("reconnect to resume").
func TestComputeBudgetEndsTheChannel(t *testing.T) {
	st := startStack(t)
	ctx := ctxT(t)
	tok := mint(t, st, "bea", func(c *token.Claims) {
		c.HasBudget = true
		c.Budget = token.Budget{AIMicros: 5_000_000, ComputeSeconds: 6, Window: "lifetime"}
	})
	r := dialRawToken(t, ctx, st, tok)
	r.send(ctx, `{"type":"init"}`)
	r.until(ctx, "ready", func(m rawMsg) bool { return m.Type == "control" && strings.Contains(string(m.Payload), `"ready"`) })
	last := r.errorThenClose(ctx, wire.BudgetExceeded, websocket.StatusCode(wire.BudgetExceeded.CloseCode()))
	var e wire.Error
	if err := json.Unmarshal(last.Payload, &e); err != nil || fmt.Sprint(e.Details["budgets"]) != "[compute]" || e.Details["compute_limit_seconds"] != float64(6) ||
		!strings.HasPrefix(e.Message, "budget exceeded: the compute budget of this user is spent: ") || !strings.HasSuffix(e.Message, "; the sandbox was stopped") {
		t.Fatalf("the error before the close %s: want budget_exceeded naming the compute budget", last.Raw)
	}
}
