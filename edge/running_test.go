package edge

import (
	"cmp"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
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
	"github.com/warren-mesh/warren/internal/wire"
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
	env := newRunningEnv(t, windowVerifier{})
	sb, clock := env.sb, env.clock
	exec := func(user, body string) (int, string) { t.Helper(); return env.exec(t, user, body) }
	spend := func(user string) { t.Helper(); env.spend(t, user) }
	running := func() float64 { return env.running(t) }

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

// counterValue is the value of the counter (or gauge) name whose first label is label in reg, 0 if none.
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
				if g := m.GetGauge(); g != nil {
					return g.GetValue()
				}
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

// permsVerifier is grantVerifier, except that "name#tool" is name's token allowing only that tool, with an
// sdkConfig naming it too: a user's tokens with other permissions, all of one ledger account.
type permsVerifier struct{}

func (permsVerifier) Verify(_ context.Context, raw string) (*token.Claims, error) {
	name, tool, ok := strings.Cut(raw, "#")
	c := &token.Claims{Issuer: "acme", Subject: name}
	if ok {
		c.Permissions.Tools = []string{tool}
		c.SDKConfig = []byte(`{"model":"` + tool + `"}`)
	}
	return c, nil
}

// runningEnv is an edge admitting against SQLite (issuer acme's quota: 100 µ$ of AI in a lifetime window)
// whose users' runners the test places and moves (movingSandboxes), on a fake clock.
type runningEnv struct {
	ledger *sqlite.Ledger
	sb     *movingSandboxes
	clock  *fakeClock
	reg    *prometheus.Registry
	srv    *httptest.Server
}

func newRunningEnv(t *testing.T, v Verifier) *runningEnv {
	t.Helper()
	ledger := quotaLedger(t, billing.QuotaKey{Issuer: "acme"}, billing.Quota{AIMicros: 100, ComputeSeconds: -1,
		Window: billing.Lifetime, MaxConcurrentSessions: -1})
	env := &runningEnv{ledger: ledger, sb: &movingSandboxes{addr: map[string]string{}, keys: map[string]string{}},
		clock: newFakeClock(), reg: prometheus.NewRegistry()}
	e, err := New(Config{Region: "test", Verifier: v, Sandboxes: env.sb, Ledger: ledger, Quotas: ledger,
		Metrics: env.reg, Now: env.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	env.srv = httptest.NewServer(e.Handler())
	t.Cleanup(env.srv.Close)
	return env
}

// exec POSTs body to /v1/sandbox/exec with token tok: the status and the answer.
func (env *runningEnv) exec(t *testing.T, tok, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", env.srv.URL+"/v1/sandbox/exec", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// spend records user's whole budget (lifetime) as spent.
func (env *runningEnv) spend(t *testing.T, user string) {
	t.Helper()
	acct := billing.Account{Issuer: "acme", User: user, Window: billing.Lifetime}
	if err := env.ledger.Record(context.Background(), billing.UsageEvent{Key: "spend/" + user, Account: acct, Kind: billing.KindAI, AIMicros: 100}); err != nil {
		t.Fatal(err)
	}
}

// running counts the admissions made on a running sandbox's kept read.
func (env *runningEnv) running(t *testing.T) float64 {
	t.Helper()
	return counterValue(t, env.reg, "warren_edge_admission_reads_total", "running")
}

// The running-sandbox fast path attacked by a tenant (docs/ARCHITECTURE.md#admission): (1) a user whose
// budget is spent sends a request every 100 ms to keep the kept usage read alive: the bound runs from the
// last full admission's read, not from the last request, so the third is refused; (2) requests within the
// bound under another token of the same account (other permissions and sdkConfig) go to the runner with
// that token's grant, not the one of the admission whose read they reuse; (3) a kept runner that read a
// POST's body and then broke off (it crashed mid-exec) is not sent the request again, here or to a fresh
// runner: the retry is only for a runner that could not be dialled or refused the key.
func TestRunningAdmissionHostile(t *testing.T) {
	env := newRunningEnv(t, permsVerifier{})
	sb, clock := env.sb, env.clock
	exec := func(tok, body string) (int, string) { t.Helper(); return env.exec(t, tok, body) }
	running := func() float64 { return env.running(t) }

	// The runners answer with the grant they were sent (permissions and sdkConfig).
	var mu sync.Mutex
	var grants []wire.Grant
	grantRunner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g, err := wire.DecodeGrant(r.Header.Get(wire.HeaderGrant))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		grants = append(grants, g)
		mu.Unlock()
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	t.Cleanup(grantRunner.Close)
	lastGrant := func() wire.Grant {
		mu.Lock()
		defer mu.Unlock()
		return grants[len(grants)-1]
	}

	// (1) alice's budget is spent after a full admission; her requests every 100 ms do not extend the bound.
	sb.set("alice", grantRunner.Listener.Addr().String())
	if code, body := exec("alice", "x"); code != http.StatusOK {
		t.Fatalf("alice: %d %s", code, body)
	}
	env.spend(t, "alice")
	ensured := sb.ensured.Load()
	for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusPaymentRequired, http.StatusPaymentRequired} {
		clock.Advance(runningAdmissionTTL * 2 / 5) // 100 ms: 100, 200, 300, 400 ms after the full admission's read
		if code, body := exec("alice", "x"); code != want {
			t.Fatalf("alice's request %d, %v after the full admission, her budget spent: %d %s, want %d", i, runningAdmissionTTL*2/5*time.Duration(i+1), code, body, want)
		}
	}
	if n := sb.ensured.Load(); n != ensured {
		t.Fatalf("Ensure asked %d times for a spent budget", n-ensured)
	}

	// (2) bob's first request under one token, the next ones, within the bound and on its read, under tokens
	// of other permissions: each runner request carries its own token's.
	clock.Advance(DefaultAdmissionCacheTTL * 2)
	sb.set("bob", grantRunner.Listener.Addr().String())
	for i, tok := range []string{"bob#Read", "bob#Bash", "bob"} {
		r := running()
		if code, body := exec(tok, "x"); code != http.StatusOK {
			t.Fatalf("%s: %d %s", tok, code, body)
		}
		if i > 0 && running() != r+1 {
			t.Fatalf("%s was not admitted on the running sandbox's kept read (the fast path this case attacks)", tok)
		}
		g := lastGrant()
		_, tool, _ := strings.Cut(tok, "#")
		wantPerms, wantSDK := "", ""
		if tool != "" {
			wantPerms, wantSDK = `{"tools":["`+tool+`"]}`, `{"model":"`+tool+`"}`
		}
		if string(g.Permissions) != wantPerms || string(g.SDKConfig) != wantSDK {
			t.Fatalf("%s: the runner was sent permissions %s and sdkConfig %s, want %q and %q (the token's own)", tok, g.Permissions, g.SDKConfig, wantPerms, wantSDK)
		}
	}

	// (3) carol's kept runner reads an exec's body, then dies without answering: the exec is not run again.
	clock.Advance(DefaultAdmissionCacheTTL * 2)
	var runs atomic.Int32
	crashing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		runs.Add(1)
		if string(b) == "crash" {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				_ = conn.Close()
			}
			return
		}
		_, _ = w.Write(b)
	}))
	t.Cleanup(crashing.Close)
	sb.set("carol", crashing.Listener.Addr().String())
	if code, _ := exec("carol", "x"); code != http.StatusOK {
		t.Fatalf("carol: %d", code)
	}
	r, ensured := running(), sb.ensured.Load()
	if code, body := exec("carol", "crash"); code != http.StatusServiceUnavailable {
		t.Fatalf("carol's exec that broke her runner off: %d %s, want 503 unavailable", code, body)
	}
	if running() != r+1 {
		t.Fatal("carol's second exec was not admitted on the kept read (the path this case attacks)")
	}
	if n, e := runs.Load(), sb.ensured.Load()-ensured; n != 2 || e != 0 {
		t.Fatalf("carol's runner ran %d execs and Ensure was asked %d times, want 2 and 0: a non-idempotent request was sent again", n, e)
	}
}
