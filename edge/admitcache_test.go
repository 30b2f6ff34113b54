package edge

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/sqlite"
)

// failingQuotas fails GetQuota while fail is set, as an unreachable store does.
type failingQuotas struct {
	billing.Quotas
	fail atomic.Bool
}

func (q *failingQuotas) GetQuota(ctx context.Context, k billing.QuotaKey) (billing.Quota, error) {
	if q.fail.Load() {
		return billing.Quota{}, fmt.Errorf("get quota: %w", billing.ErrUnavailable)
	}
	return q.Quotas.GetQuota(ctx, k)
}

// Sandbox API requests reuse a user's quota reads for AdmissionCacheTTL (one read for a burst), never an
// error (the request after a failed read reads again), and the usage only for runningAdmissionTTL, to the
// running sandbox (TestRunningAdmission): past it, a budget spent within the TTL refuses the next request.
// A negative TTL reads for every request.
func TestAdmissionReadsCached(t *testing.T) {
	ctx := context.Background()
	inner, err := sqlite.New(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "ledger.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inner.Close() })
	runner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"entries":[]}`))
	}))
	t.Cleanup(runner.Close)
	if _, err := inner.PutIssuer(ctx, "acme", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := inner.PutQuota(ctx, billing.QuotaKey{Issuer: "acme"}, billing.Quota{AIMicros: 100, ComputeSeconds: -1,
		Window: billing.Lifetime, MaxConcurrentSessions: -1}, 0); err != nil {
		t.Fatal(err)
	}
	start := func(ttl time.Duration) (*failingQuotas, *fakeClock, *prometheus.Registry, func() int) {
		quotas, clock, reg := &failingQuotas{Quotas: inner}, newFakeClock(), prometheus.NewRegistry()
		e, err := New(Config{Region: "test", Verifier: grantVerifier{}, Sandboxes: grantRunner{addr: strings.TrimPrefix(runner.URL, "http://")},
			Ledger: inner, Quotas: quotas, Metrics: reg, Now: clock.Now, AdmissionCacheTTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(e.Handler())
		t.Cleanup(srv.Close)
		return quotas, clock, reg, func() int {
			t.Helper()
			req, _ := http.NewRequest("GET", srv.URL+"/v1/sandbox/files/list?path=.", nil)
			req.Header.Set("Authorization", "Bearer alice")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
	}
	reads := func(reg *prometheus.Registry, source string) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "warren_edge_admission_reads_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == source {
					return m.GetCounter().GetValue()
				}
			}
		}
		return 0
	}

	quotas, clock, reg, get := start(0)
	for range 5 {
		if code := get(); code != http.StatusOK {
			t.Fatalf("request: %d", code)
		}
	}
	if r, c := reads(reg, "read"), reads(reg, "running"); r != 1 || c != 4 {
		t.Fatalf("5 requests within the TTL: %v read, %v on the running sandbox; want 1 and 4", r, c)
	}
	clock.Advance(runningAdmissionTTL) // the quotas kept, the usage read again
	if code := get(); code != http.StatusOK {
		t.Fatalf("request: %d", code)
	}
	if r, c := reads(reg, "read"), reads(reg, "cached"); r != 1 || c != 1 {
		t.Fatalf("a request past the running bound, within the TTL: %v read, %v cached; want 1 and 1", r, c)
	}
	quotas.fail.Store(true)
	if code := get(); code != http.StatusOK {
		t.Fatalf("a request within the TTL of a good read, the quota store down: %d, want 200 from the kept read", code)
	}
	clock.Advance(DefaultAdmissionCacheTTL)
	if code := get(); code != http.StatusServiceUnavailable {
		t.Fatalf("the quota store down, the kept read expired: %d, want 503", code)
	}
	quotas.fail.Store(false)
	if code := get(); code != http.StatusOK {
		t.Fatalf("the quota store back, at the same instant: %d, want 200 (a failed read is not kept)", code)
	}
	acct := billing.Account{Issuer: "acme", User: "alice", Window: billing.Lifetime}
	if err := inner.Record(ctx, billing.UsageEvent{Key: "spend", Account: acct, Kind: billing.KindAI, AIMicros: 100}); err != nil {
		t.Fatal(err)
	}
	if code := get(); code != http.StatusOK {
		t.Fatalf("the budget spent within runningAdmissionTTL of the last read, to the running sandbox: %d, want 200", code)
	}
	clock.Advance(runningAdmissionTTL)
	if code := get(); code != http.StatusPaymentRequired {
		t.Fatalf("the budget spent within the TTL of the quota read, past the running bound: %d, want 402", code)
	}

	_, _, reg, get = start(-1)
	for range 3 {
		get() // 402: the budget is spent
	}
	if r, c := reads(reg, "read"), reads(reg, "cached"); r != 3 || c != 0 {
		t.Fatalf("AdmissionCacheTTL < 0: %v read, %v cached; want 3 and 0", r, c)
	}
}

// The cache stays O(1) when full: a put at capacity neither sweeps nor evicts; entries age out a generation
// at a time, and an entry older than the TTL is never served, whichever generation holds it.
func TestAdmissionCacheBounded(t *testing.T) {
	c := newAdmissionCache(time.Second)
	now := time.Unix(1000, 0)
	for i := range maxAdmissionCache {
		c.put(admissionKey{"iss", fmt.Sprint("u", i)}, admissionReads{}, now)
	}
	if n := c.gen.Len(); n != maxAdmissionCache/2 {
		t.Fatalf("%d entries kept, want the bound of one generation, %d", n, maxAdmissionCache/2)
	}
	if _, ok := c.get(admissionKey{"iss", "u0"}, now.Add(999*time.Millisecond)); !ok {
		t.Fatal("an entry within its TTL was not served")
	}
	if _, ok := c.get(admissionKey{"iss", fmt.Sprint("u", maxAdmissionCache-1)}, now); ok {
		t.Fatal("an entry put beyond the bound was kept")
	}
	later := now.Add(1500 * time.Millisecond) // u0 now sits in the older generation, expired
	c.put(admissionKey{"iss", "new"}, admissionReads{}, later)
	if _, ok := c.get(admissionKey{"iss", "u0"}, later); ok {
		t.Fatal("an entry older than the TTL was served")
	}
	if _, ok := c.get(admissionKey{"iss", "new"}, later); !ok {
		t.Fatal("a fresh entry after a swap was not served")
	}
	c.get(admissionKey{"iss", "x"}, later.Add(3*time.Second))
	if n := c.gen.Len(); n != 0 {
		t.Fatalf("two TTLs without use left %d entries", n)
	}
}
