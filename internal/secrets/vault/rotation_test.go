package vault_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/secrets"
	"github.com/warren-mesh/warren/internal/secrets/vault"
	"github.com/warren-mesh/warren/internal/token"
)

// counted counts the reads of issuer keys that reach Vault.
type counted struct {
	secrets.Store
	reads atomic.Int64
}

func (c *counted) IssuerKeys(ctx context.Context, iss string) ([]secrets.Key, error) {
	c.reads.Add(1)
	return c.Store.IssuerKeys(ctx, iss)
}

// TestRotationAcceptedAtOnce: with keys in Vault behind the edge's secrets.Cache, a token signed with a key
// rotated a moment after the issuer's keys were cached is accepted at once (before, refused for 10 s); a
// flood of bad-signature tokens for many issuers reads Vault at most secrets.DefaultRefreshRate times a
// second, and for one issuer at most once a second.
func TestRotationAcceptedAtOnce(t *testing.T) {
	e := newEnv(t)
	s := e.open(t, vault.Config{})
	src := &counted{Store: s}
	clk := &clock{t: time.Now()}
	cache := secrets.NewCache(src, secrets.CacheOptions{Now: clk.Now, RefreshAhead: -1})
	t.Cleanup(func() { cache.Close() })
	v := token.NewVerifier(cache, token.VerifierOptions{})
	ctx := context.Background()
	mintFor := func(iss string, k secrets.Key) string {
		t.Helper()
		raw, err := token.Mint(k, token.Claims{Issuer: iss, Subject: "u", ExpiresAt: time.Now().Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}

	k1 := must[secrets.Key](t)(s.CreateIssuer("acme"))
	if _, err := v.Verify(ctx, mintFor("acme", k1)); err != nil {
		t.Fatal(err)
	}
	k2 := must[secrets.Key](t)(s.Rotate("acme"))
	if _, err := v.Verify(ctx, mintFor("acme", k2)); err != nil {
		t.Fatalf("a key rotated a moment ago: %v", err)
	}
	if n := src.reads.Load(); n != 2 {
		t.Fatalf("Vault reads = %d, want 2", n)
	}

	issuers := []string{"acme"}
	for i := range 30 {
		iss := fmt.Sprintf("iss-%d", i)
		if _, err := v.Verify(ctx, mintFor(iss, must[secrets.Key](t)(s.CreateIssuer(iss)))); err != nil {
			t.Fatal(err)
		}
		issuers = append(issuers, iss)
	}
	forged := secrets.Key{Secret: []byte("not-the-secret")}
	flood := func(issuers []string) int64 {
		t.Helper()
		before := src.reads.Load()
		for range 10 {
			for _, iss := range issuers {
				if _, err := v.Verify(ctx, mintFor(iss, forged)); token.Reason(err) != "bad_signature" {
					t.Fatalf("forged token of %s: %v", iss, err)
				}
			}
		}
		return src.reads.Load() - before
	}
	if n := flood([]string{"acme"}); n != 0 {
		t.Fatalf("forged tokens right after a refresh read Vault %d times, want 0", n)
	}
	clk.Set(clk.Now().Add(secrets.DefaultMinRefresh))
	if n := flood([]string{"acme"}); n != 1 {
		t.Fatalf("forged tokens for one issuer read Vault %d times in a second, want 1", n)
	}
	clk.Set(clk.Now().Add(secrets.DefaultMinRefresh))
	if n := flood(issuers); n != secrets.DefaultRefreshRate {
		t.Fatalf("forged tokens for %d issuers read Vault %d times, want %d", len(issuers), n, secrets.DefaultRefreshRate)
	}
}
