package edge

import (
	"cmp"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/sqlite"
	"github.com/warren-mesh/warren/internal/registry"
	"github.com/warren-mesh/warren/internal/token"
)

// movingSandboxes is each user's runner, which the test can replace (as a sandbox stopped and started
// again elsewhere): Ensure answers the user's current one, counting the calls (each could start or claim
// a sandbox).
type movingSandboxes struct {
	mu      sync.Mutex
	addr    map[string]string // user -> runner address
	keys    map[string]string // user -> runner key ("runner-key" when unset)
	epoch   int64
	ensured atomic.Int32
	forgot  atomic.Int32
}

func (s *movingSandboxes) Ensure(_ context.Context, req SandboxRequest) (registry.Entry, error) {
	s.ensured.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	key := cmp.Or(s.keys[req.User], "runner-key")
	return registry.Entry{Issuer: req.Issuer, User: req.User, Epoch: s.epoch, Addr: s.addr[req.User], Key: key}, nil
}

func (s *movingSandboxes) Forget(context.Context, registry.Entry) { s.forgot.Add(1) }

func (s *movingSandboxes) set(user, addr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.addr[user] = addr
	s.epoch++
}

// echoRunner answers a sandbox request with its body.
func echoRunner(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(b)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// A sandbox API request within runningAdmissionTTL of the same user's last full admission goes to the
// runner that one found on its usage read, without reading the usage or asking Ensure; every request that
// could start or claim a sandbox reads the usage. The attacks: (1) a budget spent while the sandbox runs
// lets its requests through only within the bound, after which they are refused; (2) a sandbox stopped for
// its budget is not started again by a request admitted on the kept read: its runner cannot be dialled,
// the request is admitted afresh and refused, and Ensure is never asked. A runner that moved (its budget not
// spent) is found afresh and the request, body and all, reaches the new one.
func TestRunningAdmission(t *testing.T) {
	ctx := context.Background()
	ledger, err := sqlite.New(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "ledger.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ledger.Close() })
	if _, err := ledger.PutIssuer(ctx, "acme", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := ledger.PutQuota(ctx, billing.QuotaKey{Issuer: "acme"}, billing.Quota{AIMicros: 100, ComputeSeconds: -1,
		Window: billing.Lifetime, MaxConcurrentSessions: -1}, 0); err != nil {
		t.Fatal(err)
	}
	sb := &movingSandboxes{addr: map[string]string{}, keys: map[string]string{}}
	clock, reg := newFakeClock(), prometheus.NewRegistry()
	e, err := New(Config{Region: "test", Verifier: windowVerifier{}, Sandboxes: sb, Ledger: ledger, Quotas: ledger,
		Metrics: reg, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.Handler())
	t.Cleanup(srv.Close)
	exec := func(user, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", srv.URL+"/v1/sandbox/exec", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+user)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	spend := func(user string) {
		t.Helper()
		acct := billing.Account{Issuer: "acme", User: user, Window: billing.Lifetime}
		if err := ledger.Record(ctx, billing.UsageEvent{Key: "spend/" + user, Account: acct, Kind: billing.KindAI, AIMicros: 100}); err != nil {
			t.Fatal(err)
		}
	}
	running := func() float64 { return counterValue(t, reg, "warren_edge_admission_reads_total", "running") }

	// (1) alice: one full admission, then her requests go to her running sandbox.
	sb.set("alice", echoRunner(t).Listener.Addr().String())
	for i := range 3 {
		if code, body := exec("alice", "x"); code != http.StatusOK || body != "x" {
			t.Fatalf("request %d: %d %q", i, code, body)
		}
	}
	if n, r := sb.ensured.Load(), running(); n != 1 || r != 2 {
		t.Fatalf("3 requests within the bound: %d Ensure, %v on the running sandbox; want 1 and 2", n, r)
	}
	spend("alice")
	if code, _ := exec("alice", "x"); code != http.StatusOK {
		t.Fatalf("the budget spent, within the bound of the last read, to the running sandbox: %d, want 200", code)
	}
	clock.Advance(runningAdmissionTTL)
	if code, _ := exec("alice", "x"); code != http.StatusPaymentRequired {
		t.Fatalf("the budget spent, the bound passed: %d, want 402", code)
	}
	if n := sb.ensured.Load(); n != 1 {
		t.Fatalf("Ensure asked %d times, want 1 (a refused request asks nothing)", n)
	}

	// (2) bob's sandbox is stopped for his budget right after a request: the next one, within the bound,
	// finds no runner, is admitted afresh and refused; nothing is started.
	clock.Advance(DefaultAdmissionCacheTTL)
	bobRunner := echoRunner(t)
	sb.set("bob", bobRunner.Listener.Addr().String())
	if code, _ := exec("bob", "x"); code != http.StatusOK {
		t.Fatalf("bob: %d", code)
	}
	spend("bob")
	bobRunner.Close() // stopped for the budget
	ensured := sb.ensured.Load()
	if code, body := exec("bob", "x"); code != http.StatusPaymentRequired || !strings.Contains(body, "budget_exceeded") {
		t.Fatalf("bob's stopped sandbox, his budget spent, within the bound: %d %s, want 402 budget_exceeded", code, body)
	}
	if n := sb.ensured.Load(); n != ensured {
		t.Fatalf("Ensure asked %d more times: a sandbox stopped for its budget could be started again", n-ensured)
	}
	if sb.forgot.Load() != 1 {
		t.Fatalf("Forget called %d times, want 1 (the unreachable runner)", sb.forgot.Load())
	}

	// (3) carol's sandbox moved (budget left): the request is admitted afresh and reaches the new runner with
	// its body.
	carolRunner := echoRunner(t)
	sb.set("carol", carolRunner.Listener.Addr().String())
	if code, _ := exec("carol", "x"); code != http.StatusOK {
		t.Fatalf("carol: %d", code)
	}
	carolRunner.Close()
	sb.set("carol", echoRunner(t).Listener.Addr().String())
	clock.Advance(runningAdmissionTTL / 2) // within the bound still
	ensured = sb.ensured.Load()
	big := strings.Repeat("the body ", smallBody/8) // streamed, not read whole first
	if code, body := exec("carol", big); code != http.StatusOK || body != big {
		t.Fatalf("carol's moved sandbox: %d %.40q, want 200 and the body at the new runner", code, body)
	}
	if n := sb.ensured.Load(); n != ensured+1 {
		t.Fatalf("Ensure asked %d times for the moved sandbox, want 1", n-ensured)
	}

	// (3b) carol's token of another budget window is another ledger account: its usage is read, not the
	// kept one of her lifetime account.
	r := running()
	if code, _ := exec("carol@day", "x"); code != http.StatusOK {
		t.Fatalf("carol@day: %d", code)
	}
	if running() != r {
		t.Fatal("a token of another window was admitted on the usage read of another account")
	}

	// (4) dave's sandbox was replaced by another runner at the same address (another key): the kept entry's
	// key is refused there, the request is admitted afresh and reaches the new runner with its key.
	var want atomic.Value
	want.Store("Bearer k1")
	daveRunner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != want.Load() {
			http.Error(w, `{"code":"unauthenticated","message":"missing or invalid runner key"}`, http.StatusUnauthorized)
			return
		}
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(b)
	}))
	t.Cleanup(daveRunner.Close)
	sb.mu.Lock()
	sb.keys["dave"] = "k1"
	sb.mu.Unlock()
	sb.set("dave", daveRunner.Listener.Addr().String())
	if code, _ := exec("dave", "x"); code != http.StatusOK {
		t.Fatalf("dave: %d", code)
	}
	want.Store("Bearer k2")
	sb.mu.Lock()
	sb.keys["dave"] = "k2"
	sb.mu.Unlock()
	ensured, forgot := sb.ensured.Load(), sb.forgot.Load()
	if code, body := exec("dave", "y"); code != http.StatusOK || body != "y" {
		t.Fatalf("dave's sandbox replaced at the same address: %d %q, want 200 from the new runner", code, body)
	}
	if n, f := sb.ensured.Load()-ensured, sb.forgot.Load()-forgot; n != 1 || f != 0 {
		t.Fatalf("dave: %d Ensure, %d Forget; want 1 and 0 (the runner there is not the user's)", n, f)
	}
}

func counterValue(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == label {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// windowVerifier is grantVerifier, except that "name@day" is name's token with a daily budget.
type windowVerifier struct{}

func (windowVerifier) Verify(_ context.Context, raw string) (*token.Claims, error) {
	name, window, ok := strings.Cut(raw, "@")
	c := &token.Claims{Issuer: "acme", Subject: name}
	if ok && window == "day" {
		c.HasBudget = true
		c.Budget = token.Budget{AIMicros: 1000, ComputeSeconds: -1, Window: token.WindowDay, WindowStart: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	}
	return c, nil
}
