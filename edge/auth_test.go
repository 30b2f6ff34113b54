package edge

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/sqlite"
	"github.com/warren-mesh/warren/internal/registry"
	"github.com/warren-mesh/warren/internal/token"
	"github.com/warren-mesh/warren/internal/wire"
)

// grantVerifier accepts any token and reads it as the subject of issuer acme, without a budget claim.
type grantVerifier struct{}

func (grantVerifier) Verify(_ context.Context, raw string) (*token.Claims, error) {
	return &token.Claims{Issuer: "acme", Subject: raw}, nil
}

// grantRunner answers every Ensure with the same runner.
type grantRunner struct{ addr string }

func (r grantRunner) Ensure(_ context.Context, req SandboxRequest) (registry.Entry, error) {
	return registry.Entry{Issuer: req.Issuer, User: req.User, Epoch: 1, Addr: r.addr, Key: "runner-key"}, nil
}

func (grantRunner) Forget(context.Context, registry.Entry) {}

// The grant a runner is sent carries the sandbox limits of the user's effective quota, field by field: the
// user's override where it sets one, else the issuer's default; nil when neither sets any, so the runner
// keeps its defaults. A quota change applies to sandbox API requests once the admission reads are older
// than AdmissionCacheTTL.
func TestGrantCarriesSandboxLimits(t *testing.T) {
	ctx := context.Background()
	ledger, err := sqlite.New(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "ledger.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ledger.Close() })

	var (
		mu     sync.Mutex
		grants = map[string]wire.Grant{}
	)
	runner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g, err := wire.DecodeGrant(r.Header.Get(wire.HeaderGrant))
		if err != nil || r.Header.Get("Authorization") != "Bearer runner-key" {
			http.Error(w, "bad grant or key", http.StatusBadRequest)
			return
		}
		mu.Lock()
		grants[g.User] = g
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"entries":[]}`))
	}))
	t.Cleanup(runner.Close)
	clock := newFakeClock()
	e, err := New(Config{Region: "test", Verifier: grantVerifier{}, Sandboxes: grantRunner{addr: strings.TrimPrefix(runner.URL, "http://")},
		Ledger: ledger, Quotas: ledger, Metrics: prometheus.NewRegistry(), Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.Handler())
	t.Cleanup(srv.Close)
	limitsOf := func(user string) *wire.SandboxLimits {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+"/v1/sandbox/files/list?path=.", nil)
		req.Header.Set("Authorization", "Bearer "+user)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET files/list as %s: %s", user, resp.Status)
		}
		mu.Lock()
		defer mu.Unlock()
		return grants[user].Limits
	}
	put := func(k billing.QuotaKey, s billing.SandboxQuota) {
		t.Helper()
		q := billing.Quota{AIMicros: -1, ComputeSeconds: -1, Window: billing.Day, MaxConcurrentSessions: -1, SandboxQuota: s}
		cur, err := ledger.GetQuota(ctx, k)
		if err != nil {
			cur.Revision = 0
		}
		if _, err := ledger.PutQuota(ctx, k, q, cur.Revision); err != nil {
			t.Fatal(err)
		}
		clock.Advance(DefaultAdmissionCacheTTL)
	}

	if _, err := ledger.PutIssuer(ctx, "acme", ""); err != nil {
		t.Fatal(err)
	}
	if l := limitsOf("alice"); l != nil {
		t.Fatalf("without quotas the grant's limits = %+v, want nil", l)
	}
	put(billing.QuotaKey{Issuer: "acme"}, billing.SandboxQuota{})
	if l := limitsOf("alice"); l != nil {
		t.Fatalf("with a quota setting no sandbox limit the grant's limits = %+v, want nil", l)
	}

	if l := limitsOf("carol"); l != nil {
		t.Fatalf("carol's limits without quotas = %+v", l)
	}
	if _, err := ledger.PutQuota(ctx, billing.QuotaKey{Issuer: "acme", User: "carol"}, billing.Quota{AIMicros: -1, ComputeSeconds: -1,
		Window: billing.Day, MaxConcurrentSessions: -1, SandboxQuota: billing.SandboxQuota{MaxProcesses: 9}}, 0); err != nil {
		t.Fatal(err)
	}
	clock.Advance(DefaultAdmissionCacheTTL - time.Millisecond)
	if l := limitsOf("carol"); l != nil {
		t.Fatalf("a quota set within AdmissionCacheTTL of the last request applied at once: %+v", l)
	}
	clock.Advance(time.Millisecond)
	if l := limitsOf("carol"); l == nil || l.Processes != 9 {
		t.Fatalf("a quota set AdmissionCacheTTL before the request did not apply: %+v", l)
	}
	put(billing.QuotaKey{Issuer: "acme"}, billing.SandboxQuota{MaxProcesses: 64, MaxMemoryBytes: 512 << 20, CPUMillis: 1000,
		MaxTmpBytes: 32 << 20, MaxWorkspaceBytes: 1 << 30, MaxConcurrentExecs: 2, MaxStoredBytes: 4 << 30})
	put(billing.QuotaKey{Issuer: "acme", User: "bob"}, billing.SandboxQuota{MaxMemoryBytes: 4 << 30, CPUMillis: -1})
	for user, want := range map[string]wire.SandboxLimits{
		"alice": {Processes: 64, MemoryBytes: 512 << 20, CPUMillis: 1000, TmpBytes: 32 << 20, WorkspaceBytes: 1 << 30,
			ConcurrentExecs: 2, StoredBytes: 4 << 30},
		"bob": {Processes: 64, MemoryBytes: 4 << 30, CPUMillis: -1, TmpBytes: 32 << 20, WorkspaceBytes: 1 << 30,
			ConcurrentExecs: 2, StoredBytes: 4 << 30},
	} {
		if l := limitsOf(user); l == nil || *l != want {
			t.Errorf("%s's grant limits = %+v, want %+v", user, l, want)
		}
	}
}
