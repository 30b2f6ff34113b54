package edge

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/ledgertest"
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
	return quotaLedgerAt(t, k, q, nil)
}

// quotaLedgerAt is quotaLedger on clock now (nil: time.Now).
func quotaLedgerAt(t *testing.T, k billing.QuotaKey, q billing.Quota, now func() time.Time) *sqlite.Ledger {
	t.Helper()
	ctx := context.Background()
	ledger, err := sqlite.New(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "ledger.db"), Now: now})
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
	url, rn, _ := leaseEdgeOn(t, k.Issuer, ledger, ledger.Sessions())
	return url, rn
}

// leaseEdgeOn is leaseEdge on ledger, with its session leases in sessions; it returns the edge too.
func leaseEdgeOn(t *testing.T, issuer string, ledger *sqlite.Ledger, sessions billing.Sessions) (string, *oneRunner, *Edge) {
	t.Helper()
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
		Region: "r", Verifier: claimsVerifier{issuer: issuer}, Sandboxes: rn, Ledger: ledger, Quotas: ledger,
		Sessions: sessions, Rates: Rates{ConnectsPerUser: -1, ConnectsPerIssuer: -1, PromptsPerUser: -1, PromptsPerIssuer: -1},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.Handler())
	t.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http") + "/ws", rn, e
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

// countedSessions are a real store's session leases, counting the renewals asked of it.
type countedSessions struct {
	billing.Sessions
	mu      sync.Mutex
	renews  int // Renew calls
	batches int // RenewAll calls
	largest int // most ids in one RenewAll
}

func (s *countedSessions) Renew(ctx context.Context, id string, ttl time.Duration) error {
	s.mu.Lock()
	s.renews++
	s.mu.Unlock()
	return s.Sessions.Renew(ctx, id, ttl)
}

func (s *countedSessions) RenewAll(ctx context.Context, ids []string, ttl time.Duration) ([]string, error) {
	gone, err := s.Sessions.RenewAll(ctx, ids, ttl)
	s.mu.Lock()
	s.batches++
	s.largest = max(s.largest, len(ids))
	s.mu.Unlock()
	return gone, err
}

func (s *countedSessions) counts() (renews, batches, largest int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.renews, s.batches, s.largest
}

// An edge renews the leases of all its channels together, one store call per period, not one per channel:
// past their first expiry they still count (a fourth channel is refused at a cap of three), a closed
// channel's lease is no longer renewed, and with no channel left the edge stops renewing.
func TestLeasesRenewedTogether(t *testing.T) {
	k := billing.QuotaKey{Issuer: "iss", User: "u"}
	clock := ledgertest.NewClock(time.Now())
	ledger := quotaLedgerAt(t, k, billing.Quota{AIMicros: -1, ComputeSeconds: -1, Window: billing.Lifetime, MaxConcurrentSessions: 3}, clock.Now)
	sessions := &countedSessions{Sessions: ledger.Sessions()}
	url, rn, e := leaseEdgeOn(t, k.Issuer, ledger, sessions)
	e.leases.every = 20 * time.Millisecond // before any channel arms it

	var conns []*websocket.Conn
	for i := range 3 {
		c, err := dialAs(t, url, "u", fmt.Sprint("r", i), rn)
		if err != nil {
			t.Fatalf("channel %d refused: %v", i, err)
		}
		conns = append(conns, c)
	}
	// Move the store's clock close to the leases' expiry, then wait for two renewals after the move: the
	// second began after it, so it renewed from the new time.
	clock.Advance(leaseTTL - time.Second)
	_, from, _ := sessions.counts()
	waitFor(t, "two renewals", func() bool { _, b, _ := sessions.counts(); return b >= from+2 })
	clock.Advance(leaseTTL / 2) // past the first expiry
	if u, _, err := sessions.Count(context.Background(), "iss", "u"); err != nil || u != 3 {
		t.Fatalf("live leases past their first expiry: %d, %v; want 3 (renewed)", u, err)
	}
	_, err := dialAs(t, url, "u", "r3", rn)
	wantRefused(t, err, wire.ConcurrencyLimit)
	renews, _, largest := sessions.counts()
	if renews != 0 || largest != 3 {
		t.Fatalf("%d single renewals, at most %d leases renewed in one call; want 0 and all 3 together", renews, largest)
	}

	conns[0].Close(websocket.StatusNormalClosure, "")
	waitFor(t, "the closed channel's lease released", func() bool {
		u, _, err := sessions.Count(context.Background(), "iss", "u")
		return err == nil && u == 2 && len(e.leases.heldIDs()) == 2
	})
	for _, c := range conns[1:] {
		c.Close(websocket.StatusNormalClosure, "")
	}
	waitFor(t, "renewals stopped", func() bool {
		e.leases.mu.Lock()
		defer e.leases.mu.Unlock()
		return len(e.leases.held) == 0 && e.leases.timer == nil
	})
}
