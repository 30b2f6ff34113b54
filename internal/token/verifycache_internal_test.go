package token

import (
	"context"
	"crypto/sha256"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/secrets"
	"github.com/warren-mesh/warren/internal/secrets/file"
)

// acmeStore is a file store with issuer acme, and acme's key.
func acmeStore(t *testing.T) (*file.Store, secrets.Key) {
	t.Helper()
	s, err := file.Open(filepath.Join(t.TempDir(), file.DefaultFileName))
	if err != nil {
		t.Fatal(err)
	}
	key, err := s.CreateIssuer("acme")
	if err != nil {
		t.Fatal(err)
	}
	return s, key
}

// TestVerifyCacheHits: a verified token is kept (under its hash, with the key that signed it) and a second
// Verify answers from the entry; a failed one is never kept; entries go after two TTLs.
func TestVerifyCacheHits(t *testing.T) {
	s, key := acmeStore(t)
	now := time.Now()
	v := NewVerifier(s, VerifierOptions{Now: func() time.Time { return now }})
	raw, err := Mint(key, Claims{Issuer: "acme", Subject: "u", ExpiresAt: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(context.Background(), raw); err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256([]byte(raw))
	e, ok := v.cache.get(h, now)
	if !ok || e.keyID != key.ID || e.claims.Subject != "u" || !e.until.Equal(now.Add(DefaultCacheTTL)) {
		t.Fatalf("entry %+v %v", e, ok)
	}
	// A hit: the entry's claims are what Verify answers (changed here to tell it from a full verification).
	e.claims.Subject = "from-cache"
	if c, err := v.Verify(context.Background(), raw); err != nil || c.Subject != "from-cache" {
		t.Fatalf("second verify %+v %v: not answered from the cache", c, err)
	}
	forged, _ := Mint(secrets.Key{ID: key.ID, Secret: []byte("not the key")}, Claims{Issuer: "acme", Subject: "u", ExpiresAt: now.Add(time.Hour)})
	if _, err := v.Verify(context.Background(), forged); err == nil {
		t.Fatal("forged token accepted")
	}
	if _, ok := v.cache.get(sha256.Sum256([]byte(forged)), now); ok {
		t.Fatal("a refused token was kept")
	}
	now = now.Add(2 * DefaultCacheTTL)
	if _, ok := v.cache.get(h, now); ok || v.cache.gen.Len() != 0 {
		t.Fatal("entries outlived two TTLs")
	}
}

// TestVerifyCacheBytesBounded: an issuer minting large tokens (the 8 KiB maximum is mostly sdkConfig) to
// fill the cache keeps at most CacheSize KiB of them, not CacheSize tokens of 8 KiB each (20,000 of them
// would hold some 160 MiB); every one still verifies, and small tokens are kept up to the count bound.
func TestVerifyCacheBytesBounded(t *testing.T) {
	s, key := acmeStore(t)
	now := time.Now()
	const size = 40 // 20 tokens or 20 KiB a generation
	v := NewVerifier(s, VerifierOptions{Now: func() time.Time { return now }, CacheSize: size})
	flood := func(sdk int) (kept, bytes int) {
		t.Helper()
		for i := range size / 2 {
			c := Claims{Issuer: "acme", Subject: fmt.Sprintf("u%d", i), ExpiresAt: now.Add(time.Hour)}
			if sdk > 0 {
				c.SDKConfig = []byte(`{"x":"` + strings.Repeat("a", sdk) + `"}`)
			}
			raw, err := Mint(key, c)
			if err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if got, err := v.Verify(context.Background(), raw); err != nil || got.Subject != c.Subject {
					t.Fatalf("token %d: %v", i, err)
				}
			}
			if _, ok := v.cache.get(sha256.Sum256([]byte(raw)), now); ok {
				kept, bytes = kept+1, bytes+len(raw)
			}
		}
		return kept, bytes
	}
	if kept, n := flood(3 << 10); n > size*cacheBytesPerToken/2 || kept == 0 {
		t.Fatalf("large tokens: %d kept holding %d bytes, want some and at most %d bytes", kept, n, size*cacheBytesPerToken/2)
	}
	now = now.Add(2 * DefaultCacheTTL) // both generations dropped
	if kept, _ := flood(0); kept != size/2 {
		t.Fatalf("small tokens: %d kept, want %d (the count bound)", kept, size/2)
	}
}
