package edge

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/registry"
	"github.com/warren-mesh/warren/internal/wire"
)

// recRunner is every user's runner: it counts Ensure calls and passes each agent channel's messages to
// got; a message "die" makes it drop the channel with no close frame.
type recRunner struct {
	addr    string
	ensures atomic.Int64
	got     chan string
}

func (r *recRunner) Ensure(_ context.Context, req SandboxRequest) (registry.Entry, error) {
	r.ensures.Add(1)
	return registry.Entry{Issuer: req.Issuer, User: req.User, Epoch: 1, Addr: r.addr, Key: "k"}, nil
}

func (r *recRunner) Forget(context.Context, registry.Entry) {}

// initEdge is an edge with real session leases in front of a recRunner, and its ledger.
func initEdge(t *testing.T, initTimeout time.Duration) (*Edge, string, *recRunner, *billing.QuotaKey, interface {
	Count(context.Context, string, string) (int64, int64, error)
}) {
	t.Helper()
	k := billing.QuotaKey{Issuer: "iss", User: "uma"}
	ledger := quotaLedger(t, k, billing.Quota{AIMicros: -1, ComputeSeconds: -1, Window: billing.Lifetime, MaxConcurrentSessions: 5})
	rn := &recRunner{got: make(chan string, 16)}
	rs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			_, data, err := c.Read(r.Context())
			if err != nil {
				return
			}
			if strings.Contains(string(data), `"content":"die"`) {
				return // no close frame: the runner is gone
			}
			rn.got <- string(data)
		}
	}))
	t.Cleanup(rs.Close)
	rn.addr = strings.TrimPrefix(rs.URL, "http://")
	e, err := New(Config{
		Region: "r", Verifier: claimsVerifier{issuer: k.Issuer}, Sandboxes: rn, Ledger: ledger, Quotas: ledger,
		Sessions: ledger.Sessions(), InitTimeout: initTimeout, ReconnectGrace: initTimeout / 10,
		Rates: Rates{ConnectsPerUser: -1, ConnectsPerIssuer: -1, PromptsPerUser: -1, PromptsPerIssuer: -1},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.Handler())
	t.Cleanup(srv.Close)
	return e, "ws" + strings.TrimPrefix(srv.URL, "http") + "/ws", rn, &k, ledger.Sessions()
}

func dialRaw(t *testing.T, url, user string) *websocket.Conn {
	t.Helper()
	c, _, err := websocket.Dial(testCtx(t), url, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + user}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	return c
}

func write(t *testing.T, c *websocket.Conn, msg string) {
	t.Helper()
	if err := c.Write(testCtx(t), websocket.MessageText, []byte(msg)); err != nil {
		t.Fatal(err)
	}
}

// readMsg reads one message and returns its type and error payload.
func readMsg(t *testing.T, c *websocket.Conn) (string, wire.Error) {
	t.Helper()
	_, data, err := c.Read(testCtx(t))
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	var m struct {
		Type    string     `json:"type"`
		Payload wire.Error `json:"payload"`
	}
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("%s: %v", data, err)
	}
	return m.Type, m.Payload
}

// wantErrorThenClose reads an error message with code, then the close with the code's close code (or
// closeCode when given).
func wantErrorThenClose(t *testing.T, c *websocket.Conn, code wire.Code, closeCode websocket.StatusCode) {
	t.Helper()
	if typ, p := readMsg(t, c); typ != wire.TypeError || p.Code != code {
		t.Fatalf("got %s %+v, want an error %s first", typ, p, code)
	}
	if closeCode == 0 {
		closeCode = websocket.StatusCode(code.CloseCode())
	}
	if _, _, err := c.Read(testCtx(t)); websocket.CloseStatus(err) != closeCode {
		t.Fatalf("then %v, want the close %d", err, closeCode)
	}
}

// A connection that never sends init (the Chucky SDK's autoReconnect reconnects without one) and has no
// session to resume starts no sandbox and takes no session lease, however often the reconnect grace
// passes; its pings are answered, another first message (a tool_result for no call the edge delivered)
// is answered with an error while the wait goes on, and the init timeout ends it with a timeout error,
// then 4504. Before the fix the edge leased and started the sandbox at once, for every such reconnect.
func TestNoSandboxBeforeInit(t *testing.T) {
	_, url, rn, k, leases := initEdge(t, 300*time.Millisecond)
	c := dialRaw(t, url, k.User)
	write(t, c, `{"type":"ping","payload":{"timestamp":1}}`)
	if typ, _ := readMsg(t, c); typ != wire.TypePong {
		t.Fatalf("ping answered with %s", typ)
	}
	write(t, c, `{"type":"tool_result","payload":{"callId":"c1","result":{"content":[]}}}`)
	if typ, p := readMsg(t, c); typ != wire.TypeError || p.Code != wire.InvalidArgument {
		t.Fatalf("tool_result first answered with %s %+v, want invalid_argument", typ, p)
	}
	if n, _, err := leases.Count(context.Background(), k.Issuer, k.User); err != nil || n != 0 {
		t.Fatalf("%d session leases (%v) before init, want 0", n, err)
	}
	wantErrorThenClose(t, c, wire.Timeout, 0)
	if n := rn.ensures.Load(); n != 0 {
		t.Fatalf("Ensure called %d times for a connection without init, want 0", n)
	}
}

// A reconnect whose first message is a prompt naming its session (what the Chucky SDK's autoReconnect
// sends) is attached to that session: the runner gets init {"sessionId"} and then the prompt.
func TestReconnectWithoutInitResumesTheSession(t *testing.T) {
	_, url, rn, k, _ := initEdge(t, time.Minute)
	c := dialRaw(t, url, k.User)
	prompt := `{"type":"user","session_id":"s-1","message":{"role":"user","content":"hi"},"parent_tool_use_id":null}`
	write(t, c, prompt)
	for i, want := range []string{`{"payload":{"sessionId":"s-1"},"type":"init"}`, prompt} {
		select {
		case got := <-rn.got:
			if got != want {
				t.Fatalf("runner message %d = %s, want %s", i, got, want)
			}
		case <-testCtx(t).Done():
			t.Fatalf("runner message %d never came", i)
		}
	}
}

// Every close the edge makes on its own is preceded by an error message: the edge shutting down (1001,
// unavailable) and the runner lost without a close (unavailable).
func TestEdgeClosesSendAnErrorFirst(t *testing.T) {
	t.Run("shutdown", func(t *testing.T) {
		e, url, rn, k, _ := initEdge(t, time.Minute)
		c := dialRaw(t, url, k.User)
		write(t, c, `{"type":"init"}`)
		<-rn.got
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- e.Shutdown(ctx) }()
		wantErrorThenClose(t, c, wire.Unavailable, websocket.StatusGoingAway)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		// A channel opened after the shutdown is refused the same way.
		wantErrorThenClose(t, dialRaw(t, url, k.User), wire.Unavailable, websocket.StatusGoingAway)
	})
	t.Run("runner_lost", func(t *testing.T) {
		_, url, rn, k, _ := initEdge(t, time.Minute)
		c := dialRaw(t, url, k.User)
		write(t, c, `{"type":"init"}`)
		<-rn.got
		write(t, c, `{"type":"user","message":{"role":"user","content":"die"}}`)
		wantErrorThenClose(t, c, wire.Unavailable, 0)
	})
}

// A user may hold at most MaxWaitingChannelsPerUser channels that have not sent init: nothing before init
// is rated or leased, so without the bound one token held any number of connections open for the init
// timeout each (the attack: open channels and never send init). The next is refused with
// concurrency_limit; a channel that sends init, or leaves, makes room. Before the fix all were held.
func TestWaitingChannelsPerUserBounded(t *testing.T) {
	_, url, _, k, _ := initEdge(t, time.Hour)
	var held []*websocket.Conn
	for range MaxWaitingChannelsPerUser {
		c := dialRaw(t, url, k.User)
		write(t, c, `{"type":"ping","payload":{"timestamp":1}}`)
		if typ, _ := readMsg(t, c); typ != wire.TypePong { // the edge is waiting for its init
			t.Fatalf("ping answered with %s", typ)
		}
		held = append(held, c)
	}
	over := dialRaw(t, url, k.User)
	wantErrorThenClose(t, over, wire.ConcurrencyLimit, 0)

	// Leaving makes room; sending init does too.
	held[0].Close(websocket.StatusNormalClosure, "")
	write(t, held[1], `{"type":"init","payload":{}}`)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c := dialRaw(t, url, k.User)
		write(t, c, `{"type":"ping","payload":{"timestamp":1}}`)
		if typ, _ := readMsg(t, c); typ == wire.TypePong {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no room after a waiting channel left and another sent init")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A channel that sends nothing is resumed into its user's one lost session after the reconnect grace:
// the runner gets init with that session and the last seq the edge delivered of it. When that channel
// never opens (no ready: the runner refused it, or it ended), the session is no longer taken for lost,
// so a client that reconnects after every close does not start the sandbox again and again for it.
func TestSilentReconnectResumesTheLostSession(t *testing.T) {
	e, url, rn, k, _ := initEdge(t, 5*time.Second)
	key := admissionKey{issuer: k.Issuer, user: k.User}
	channel(&e.resumes, key, "s-lost", true, runnerFrame{seq: 41}, runnerFrame{seq: 42, callID: "call_1"})
	c := dialRaw(t, url, k.User)
	select {
	case got := <-rn.got:
		if want := `{"payload":{"sessionId":"s-lost","lastSeq":42},"type":"init"}`; got != want {
			t.Fatalf("runner got %s, want %s", got, want)
		}
	case <-testCtx(t).Done():
		t.Fatal("the silent channel was not resumed")
	}
	c.Close(websocket.StatusNormalClosure, "")
	deadline := time.Now().Add(10 * time.Second)
	for _, lost := e.resumes.orphan(key); lost; _, lost = e.resumes.orphan(key) {
		if time.Now().After(deadline) {
			t.Fatal("a resume that never opened left the session lost: the next silent reconnect would try it again")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := rn.ensures.Load(); n != 1 {
		t.Fatalf("Ensure called %d times, want 1", n)
	}
}
