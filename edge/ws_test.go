package edge

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/wire"
)

// TestWSTrailingSlash: /ws/ is the agent channel like /ws.
func TestWSTrailingSlash(t *testing.T) {
	k := billing.QuotaKey{Issuer: "iss", User: "ursula"}
	url, rn := leaseEdge(t, billing.Quota{AIMicros: -1, ComputeSeconds: -1, Window: billing.Lifetime, MaxConcurrentSessions: 5}, k)
	c, err := dialAs(t, url+"/", "ursula", "r1", rn)
	if err != nil {
		t.Fatalf("/ws/: %v", err)
	}
	c.Close(websocket.StatusNormalClosure, "")
}

// TestWSAtRoot: a WebSocket upgrade at / (a client given the edge's base URL with no path, as Chucky
// Cloud's TypeScript SDK dials it) is the agent channel; a plain GET / is still not found.
func TestWSAtRoot(t *testing.T) {
	k := billing.QuotaKey{Issuer: "iss", User: "rhea"}
	url, rn := leaseEdge(t, billing.Quota{AIMicros: -1, ComputeSeconds: -1, Window: billing.Lifetime, MaxConcurrentSessions: 5}, k)
	root := strings.TrimSuffix(url, "/ws") + "/"
	c, err := dialAs(t, root, "rhea", "r1", rn)
	if err != nil {
		t.Fatalf("ws at /: %v", err)
	}
	c.Close(websocket.StatusNormalClosure, "")
	res, err := http.Get("http" + strings.TrimPrefix(root, "ws"))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNotFound {
		t.Fatalf("plain GET / answered %d, want 404", res.StatusCode)
	}
}

// TestCloseReasonIsJSON: the edge's close reasons are the error as JSON, cut to its code when the JSON
// does not fit a close frame.
func TestCloseReasonIsJSON(t *testing.T) {
	k := billing.QuotaKey{Issuer: "iss", User: "vera"}
	url, rn := leaseEdge(t, billing.Quota{AIMicros: -1, ComputeSeconds: -1, Window: billing.Lifetime, MaxConcurrentSessions: 1}, k)
	c1, err := dialAs(t, url, "vera", "a", rn)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close(websocket.StatusNormalClosure, "")
	_, err = dialAs(t, url, "vera", "b", rn)
	var ce websocket.CloseError
	if !errors.As(err, &ce) {
		t.Fatalf("refused connection: %v", err)
	}
	var e wire.Error
	if json.Unmarshal([]byte(ce.Reason), &e) != nil || e.Code != wire.ConcurrencyLimit || e.Message == "" {
		t.Fatalf("close reason %q, want the error as JSON", ce.Reason)
	}
	long := wire.Errorf(wire.Unavailable, "%0200d", 0)
	if got := wire.CloseReason(long); got != `{"code":"unavailable","message":"connection unavailable"}` {
		t.Fatalf("an oversize reason is %q, want the code and its phrase", got)
	}
	if got := wire.CloseReason(wire.Errorf(wire.Internal, "%0200d", 0)); got != string(wire.Internal) {
		t.Fatalf("an oversize reason of a code without a phrase is %q, want the code", got)
	}
}

// stalledConn is a client that never reads: every write blocks until its context ends.
type stalledConn struct{ msgConn }

func (stalledConn) Write(ctx context.Context, _ websocket.MessageType, _ []byte) error {
	<-ctx.Done()
	return ctx.Err()
}

// A client that stops reading is dropped after clientWriteTimeout: the relay does not wait on it forever,
// holding the runner's output (and, forwarded, the mesh connection's window).
func TestStalledClientIsDropped(t *testing.T) {
	defer func(d time.Duration) { clientWriteTimeout = d }(clientWriteTimeout)
	clientWriteTimeout = 50 * time.Millisecond
	done := make(chan error, 1)
	go func() { done <- writeClient(context.Background(), stalledConn{}, websocket.MessageText, []byte("{}")) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("write to a stalled client: %v, want the write deadline", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a write to a client that never reads did not end")
	}
}
