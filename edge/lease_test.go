package edge

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/sqlite"
	"github.com/warren-mesh/warren/internal/registry"
	"github.com/warren-mesh/warren/internal/token"
	"github.com/warren-mesh/warren/internal/wire"
)

// claimsVerifier takes the bearer token for the user's name.
type claimsVerifier struct{ issuer string }

func (v claimsVerifier) Verify(_ context.Context, raw string) (*token.Claims, error) {
	return &token.Claims{Issuer: v.issuer, Subject: raw, ExpiresAt: time.Now().Add(time.Hour)}, nil
}

// oneRunner is every user's runner: an agent channel that stays open, reporting each one it accepts.
type oneRunner struct {
	addr   string
	opened chan struct{}
}

func (r *oneRunner) Ensure(_ context.Context, req SandboxRequest) (registry.Entry, error) {
	return registry.Entry{Issuer: req.Issuer, User: req.User, Epoch: 1, Addr: r.addr, Key: "k"}, nil
}

func (r *oneRunner) Forget(context.Context, registry.Entry) {}

// quotaLedger is a real SQLite ledger with k's issuer registered and quota q at k.
func quotaLedger(t *testing.T, k billing.QuotaKey, q billing.Quota) *sqlite.Ledger {
	t.Helper()
	ctx := context.Background()
	ledger, err := sqlite.New(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "ledger.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ledger.Close() })
	if _, err := ledger.PutIssuer(ctx, k.Issuer, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := ledger.PutQuota(ctx, k, q, 0); err != nil {
		t.Fatal(err)
	}
	return ledger
}

// leaseEdge is an edge whose session leases and quotas are in a real SQLite ledger, in front of a runner
// whose agent channels stay open.
func leaseEdge(t *testing.T, q billing.Quota, k billing.QuotaKey) (string, *oneRunner) {
	t.Helper()
	ledger := quotaLedger(t, k, q)
	rn := &oneRunner{opened: make(chan struct{}, 8)}
	rs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		rn.opened <- struct{}{}
		for { // until the edge closes it
			if _, _, err := c.Read(r.Context()); err != nil {
				break
			}
		}
		c.CloseNow()
	}))
	t.Cleanup(rs.Close)
	rn.addr = strings.TrimPrefix(rs.URL, "http://")
	e, err := New(Config{
		Region: "r", Verifier: claimsVerifier{issuer: k.Issuer}, Sandboxes: rn, Ledger: ledger, Quotas: ledger,
		Sessions: ledger.Sessions(), Rates: Rates{ConnectsPerUser: -1, ConnectsPerIssuer: -1, PromptsPerUser: -1, PromptsPerIssuer: -1},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.Handler())
	t.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http") + "/ws", rn
}

// dialAs opens an agent channel as user with the given X-Request-Id. It returns the connection once the
// runner has its side open, or the close error the edge answered with.
func dialAs(t *testing.T, url, user, requestID string, rn *oneRunner) (*websocket.Conn, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: http.Header{
		"Authorization": {"Bearer " + user}, "X-Request-Id": {requestID},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"type":"init"}`)); err != nil {
		t.Fatal(err)
	}
	// The edge either opens the runner's channel (admitted) or sends an error and closes (refused).
	read := make(chan error, 1)
	go func() { // reads until the connection closes (a cancelled read would close it)
		for {
			if _, _, err := c.Read(context.Background()); err != nil {
				read <- err
				return
			}
		}
	}()
	select {
	case <-rn.opened:
		return c, nil
	case err := <-read:
		return nil, err
	case <-ctx.Done():
		t.Fatal("neither admitted nor refused")
		return nil, nil
	}
}

func wantRefused(t *testing.T, err error, code wire.Code) {
	t.Helper()
	var ce websocket.CloseError
	if !errors.As(err, &ce) || int(ce.Code) != code.CloseCode() {
		t.Fatalf("second connection with the same X-Request-Id: %v, want closed with %s (%d)", err, code, code.CloseCode())
	}
}

// The attack of the security review: a client that sends the same X-Request-Id on two connections must not
// get two sessions under max_concurrent_sessions = 1. Lease ids are the edge's own, so the second
// connection is counted and refused, and closing the first releases only its own lease.
func TestSameRequestIDCannotShareASessionLease(t *testing.T) {
	k := billing.QuotaKey{Issuer: "iss", User: "mallory"}
	url, rn := leaseEdge(t, billing.Quota{AIMicros: -1, ComputeSeconds: -1, Window: billing.Lifetime, MaxConcurrentSessions: 1}, k)

	c1, err := dialAs(t, url, "mallory", "same-id", rn)
	if err != nil {
		t.Fatalf("first connection refused: %v", err)
	}
	_, err = dialAs(t, url, "mallory", "same-id", rn)
	wantRefused(t, err, wire.ConcurrencyLimit)

	// The first connection's lease, released on close, frees the one slot.
	c1.Close(websocket.StatusNormalClosure, "")
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := dialAs(t, url, "mallory", "same-id", rn)
		if err == nil {
			c.Close(websocket.StatusNormalClosure, "")
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the first connection closed: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The same attack against the issuer's cap, and across users: the second user's connection with the
// first's X-Request-Id is counted (refused by max_issuer_sessions = 1), not merged into the first's lease.
func TestSameRequestIDCannotShareAnIssuerSessionLease(t *testing.T) {
	k := billing.QuotaKey{Issuer: "iss"}
	url, rn := leaseEdge(t, billing.Quota{AIMicros: -1, ComputeSeconds: -1, Window: billing.Lifetime,
		MaxConcurrentSessions: -1, MaxIssuerSessions: 1}, k)

	c1, err := dialAs(t, url, "alice", "same-id", rn)
	if err != nil {
		t.Fatalf("first connection refused: %v", err)
	}
	defer c1.CloseNow()
	_, err = dialAs(t, url, "alice", "same-id", rn)
	wantRefused(t, err, wire.ConcurrencyLimit)
	_, err = dialAs(t, url, "bob", "same-id", rn)
	wantRefused(t, err, wire.ConcurrencyLimit)
}

func TestLeaseIDsAreTheEdges(t *testing.T) {
	a, b := newLeaseID(), newLeaseID()
	if a == b || !strings.HasPrefix(a, "edge/") || len(a) < len("edge/")+26 {
		t.Fatalf("lease ids %q, %q: want distinct edge/ + 128 random bits", a, b)
	}
}
