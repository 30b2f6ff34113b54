package token

import (
	"context"
	"crypto/sha256"
	"path/filepath"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/secrets"
	"github.com/warren-mesh/warren/internal/secrets/file"
)

// TestVerifyCacheHits: a verified token is kept (under its hash, with the key that signed it) and a second
// Verify answers from the entry; a failed one is never kept; entries go after two TTLs.
func TestVerifyCacheHits(t *testing.T) {
	s, err := file.Open(filepath.Join(t.TempDir(), file.DefaultFileName))
	if err != nil {
		t.Fatal(err)
	}
	key, err := s.CreateIssuer("acme")
	if err != nil {
		t.Fatal(err)
	}
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
	if _, ok := v.cache.get(h, now); ok || len(v.cache.cur)+len(v.cache.prev) != 0 {
		t.Fatal("entries outlived two TTLs")
	}
}
