package edge

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-mesh/warren/billing/sqlite"
	"github.com/warren-mesh/warren/internal/sqlitedb"
)

// With shared buckets configured the edge's decisions are the store's; when the store fails, the edge's
// own buckets decide and the fallback is counted.
func TestTakeRatesSharedThenFallback(t *testing.T) {
	ctx := context.Background()
	ledger, err := sqlite.New(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "ledger.db")})
	if err != nil {
		t.Fatal(err)
	}
	buckets := ledger.RateBuckets()
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	e := &Edge{cfg: Config{RateBuckets: buckets}, log: slog.New(slog.DiscardHandler), m: m, limiter: NewLimiter(nil, 0)}
	take := Take{Key: "connect/user/iss\x00u", RatePerMin: 1, Burst: 1}

	if ok, _ := e.takeRates(ctx, take); !ok {
		t.Fatal("first take refused")
	}
	ok, retry := e.takeRates(ctx, take)
	if ok || retry <= 0 || retry > time.Minute {
		t.Fatalf("second take = %v, %v; want refused by the shared bucket", ok, retry)
	}
	// Another edge on the same store sees the same bucket.
	other := &Edge{cfg: Config{RateBuckets: buckets}, log: e.log, m: m, limiter: NewLimiter(nil, 0)}
	if ok, _ := other.takeRates(ctx, take); ok {
		t.Fatal("another edge on the same store was given a token the bucket does not have")
	}
	if n := fallbacks(t, reg); n != 0 {
		t.Fatalf("fallbacks = %v while the store works", n)
	}

	ledger.Close() // the store fails from now on
	if ok, _ := e.takeRates(ctx, take); !ok {
		t.Fatal("with the store down, the edge's own (unused) bucket refused")
	}
	if ok, _ := e.takeRates(ctx, take); ok {
		t.Fatal("with the store down, the edge's own bucket let a second take through")
	}
	if n := fallbacks(t, reg); n != 2 {
		t.Fatalf("fallbacks = %v, want 2", n)
	}
}

func fallbacks(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "warren_edge_rate_fallbacks_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatal("warren_edge_rate_fallbacks_total not registered")
	return 0
}

// A store that does not answer (its write lock held by another process) costs a take at most
// sharedTakeTimeout, and then the edge's own buckets decide for sharedBackoff without asking it.
func TestTakeRatesSlowStoreFallsBackQuickly(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	ledger, err := sqlite.New(ctx, sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer ledger.Close()
	buckets := ledger.RateBuckets()
	other, err := sqlitedb.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	conn, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil { // holds the write lock
		t.Fatal(err)
	}
	defer conn.ExecContext(ctx, "ROLLBACK")

	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	e := &Edge{cfg: Config{RateBuckets: buckets}, log: slog.New(slog.DiscardHandler), m: m, limiter: NewLimiter(nil, 0)}
	take := Take{Key: "prompt/user/iss\x00u", RatePerMin: 60, Burst: 60}
	begin := time.Now()
	if ok, _ := e.takeRates(ctx, take); !ok {
		t.Fatal("the edge's own bucket refused the first take")
	}
	// It gave up on the store at its own deadline, well before SQLite's 5 s busy timeout would have.
	if waited := time.Since(begin); waited < sharedTakeTimeout {
		t.Errorf("the first take returned after %v, before the shared-take timeout: the store did not block it", waited)
	}
	e.shared.mu.Lock()
	backoff := time.Until(e.shared.downUntil)
	e.shared.mu.Unlock()
	if backoff <= 0 || backoff > sharedBackoff {
		t.Fatalf("after the timeout the store is skipped for %v, want up to %v", backoff, sharedBackoff)
	}
	for range 10 {
		if ok, _ := e.takeRates(ctx, take); !ok {
			t.Fatal("the edge's own bucket refused")
		}
	}
	if n := fallbacks(t, reg); n != 11 {
		t.Fatalf("fallbacks = %v, want 11", n)
	}
}
