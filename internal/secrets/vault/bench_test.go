package vault_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/secrets"
	"github.com/warren-mesh/warren/internal/secrets/vault"
)

// BenchmarkIssuerKeysVault is one uncached lookup against a real dev server: a metadata read and two version
// reads over loopback HTTP.
func BenchmarkIssuerKeysVault(b *testing.B) {
	e := newEnv(b)
	s := e.open(b, vault.Config{})
	must[secrets.Key](b)(s.CreateIssuer("acme"))
	must[secrets.Key](b)(s.Rotate("acme"))
	benchLatency(b, s)
}

// BenchmarkIssuerKeysCached is the same lookup through secrets.Cache, as the edge verifies tokens.
func BenchmarkIssuerKeysCached(b *testing.B) {
	e := newEnv(b)
	s := e.open(b, vault.Config{})
	must[secrets.Key](b)(s.CreateIssuer("acme"))
	must[secrets.Key](b)(s.Rotate("acme"))
	cache := secrets.NewCache(s, secrets.CacheOptions{})
	b.Cleanup(func() { cache.Close() })
	ctx := context.Background()
	if _, err := cache.IssuerKeys(ctx, "acme"); err != nil {
		b.Fatal(err)
	}
	benchLatency(b, cache)
}

// benchLatency looks up "acme" in a loop and reports, besides ns/op, the median and 99th percentile of the
// single lookups (which include the ~50 ns of reading the clock twice).
func benchLatency(b *testing.B, s secrets.Store) {
	ctx := context.Background()
	var lat []time.Duration
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		if _, err := s.IssuerKeys(ctx, "acme"); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
}
