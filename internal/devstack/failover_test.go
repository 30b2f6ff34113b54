package devstack_test

import (
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/devstack"
	"github.com/warren-mesh/warren/internal/httpx"
	"github.com/warren-mesh/warren/internal/modelserver"
	"github.com/warren-mesh/warren/internal/stacktest"
	warren "github.com/warren-mesh/warren/sdk"
)

// killableEdge serves one more edge of the stack on its own listener and can die as a crashed edge process
// does: the listener closes and every connection it accepted (the hijacked WebSockets included) is cut
// without a close frame.
type killableEdge struct {
	url string
	ln  net.Listener
	srv *http.Server

	mu    sync.Mutex
	conns []net.Conn
}

func (k *killableEdge) Accept() (net.Conn, error) {
	c, err := k.ln.Accept()
	if err == nil {
		k.mu.Lock()
		k.conns = append(k.conns, c)
		k.mu.Unlock()
	}
	return c, err
}
func (k *killableEdge) Close() error   { return k.ln.Close() }
func (k *killableEdge) Addr() net.Addr { return k.ln.Addr() }

func (k *killableEdge) kill() {
	_ = k.srv.Close() // the listener and the connections it still tracks
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, c := range k.conns {
		_ = c.Close()
	}
}

func startEdge(t *testing.T, st *devstack.Stack, name string) *killableEdge {
	t.Helper()
	ed, err := st.NewEdge(name)
	if err != nil {
		t.Fatal(err)
	}
	h := ed.Handler()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	k := &killableEdge{url: "http://" + ln.Addr().String(), ln: ln}
	k.srv = httpx.NewServer(h, httpx.Config{})
	go func() { _ = k.srv.Serve(k) }()
	t.Cleanup(k.kill)
	return k
}

// TestFailoverAcrossEdgesMidTurn: a real runner (the Claude Code CLI against the scripted model) behind two
// edges of one region. The client dials edge A with Failover to edge B; A dies while the turn streams its
// 200 text deltas; the SDK resumes through B and its reader sees the turn to its result with every message
// once and in order: seqs strictly increase, the only gap is B's handshake (ready and session_info, not
// delivered), and the deltas add up to the assistant's text.
func TestFailoverAcrossEdgesMidTurn(t *testing.T) {
	model := modelserver.New(modelserver.Options{DefaultScenario: "long", Delay: 30 * time.Millisecond})
	upstream, err := model.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = model.Close() })
	st := agentStack(t, agentOpts{apiKey: "scripted-test-key", upstream: upstream})
	ctx := agentCtx(t)
	a, b := startEdge(t, st, "a"), startEdge(t, st, "b")

	events := make(chan warren.FailoverEvent, 16)
	c, err := warren.New(a.url, mint(t, st, "fay", withBudget(5_000_000)), warren.WithFailover(warren.Failover{
		Edges: []string{b.url}, MinBackoff: 10 * time.Millisecond,
		OnEvent: func(ev warren.FailoverEvent) { t.Logf("failover: %v", ev); events <- ev },
	}))
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Dial(ctx, &warren.SessionOptions{IncludePartialMessages: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Send(ctx, "tell me a long story"); err != nil {
		t.Fatal(err)
	}

	killedAt := stacktest.KilledTurn(t, ctx, s, 2, a.kill)
	if s.Reconnects() != 1 || s.Edge() != b.url {
		t.Fatalf("reconnects %d, edge %s; want 1 through %s", s.Reconnects(), s.Edge(), b.url)
	}
	stacktest.LostAndReconnected(t, events, a.url, b.url, killedAt)
	if _, err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping through B: %v", err)
	}
}
