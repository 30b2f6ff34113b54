package token_test

import (
	"context"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/token"
)

// TestVerifyCacheKeepsRefusals: a token verified (and so cached) before is refused afterwards exactly when a
// full verification would refuse it: once the key that signed it is rotated out of the store, once it has
// expired, and another token (one byte changed) never reuses its entry. The claims answered are the
// caller's own copy.
func TestVerifyCacheKeepsRefusals(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, t.TempDir())
	now := testNow
	v := token.NewVerifier(e.store, token.VerifierOptions{Now: func() time.Time { return now }})

	// Signed by the previous key (v2): valid until two rotations push it out.
	raw := mint(t, e.v2, baseClaims())
	for i := range 3 {
		c, err := v.Verify(ctx, raw)
		if err != nil || c.Subject != "user-42" {
			t.Fatalf("verify %d: %v %+v", i, err, c)
		}
		c.Subject = "mallory" // the caller's copy: the next answer is unchanged
	}
	tampered := raw[:len(raw)-2] + string("AB"[raw[len(raw)-2]%2]) + raw[len(raw)-1:]
	if _, err := v.Verify(ctx, tampered); token.Reason(err) == "" {
		t.Fatalf("a tampered token was accepted: %v", err)
	}
	if _, err := e.store.Rotate("acme"); err != nil { // v4 current, v3 previous: v2 is no longer accepted
		t.Fatal(err)
	}
	if _, err := v.Verify(ctx, raw); token.Reason(err) != "unknown_kid" {
		t.Fatalf("a cached token signed by a rotated-out key: %v, want unknown_kid", err)
	}

	// Expiry: a cached token stops verifying when its exp (plus the leeway) passes.
	raw = mint(t, e.v3, with(func(c *token.Claims) { c.ExpiresAt = testNow.Add(time.Minute) }))
	if _, err := v.Verify(ctx, raw); err != nil {
		t.Fatal(err)
	}
	now = testNow.Add(time.Minute + token.DefaultLeeway)
	if _, err := v.Verify(ctx, raw); token.Reason(err) != "expired" {
		t.Fatalf("a cached token past its exp: %v, want expired", err)
	}
}

// TestVerifyCacheBounded: with a cache of 4 tokens, many distinct tokens all still verify (the ones beyond
// the bound in full every time), and a cached one still follows its key's rotation out.
func TestVerifyCacheBounded(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, t.TempDir())
	v := token.NewVerifier(e.store, token.VerifierOptions{Now: func() time.Time { return testNow }, CacheSize: 4})
	var toks []string
	for i := range 20 {
		toks = append(toks, mint(t, e.v3, with(func(c *token.Claims) { c.Subject = "user-" + string(rune('a'+i)) })))
	}
	for range 2 {
		for i, raw := range toks {
			c, err := v.Verify(ctx, raw)
			if err != nil || c.Subject != "user-"+string(rune('a'+i)) {
				t.Fatalf("token %d: %v %+v", i, err, c)
			}
		}
	}
	for range 2 {
		if _, err := e.store.Rotate("acme"); err != nil {
			t.Fatal(err)
		}
	}
	for i, raw := range toks {
		if _, err := v.Verify(ctx, raw); token.Reason(err) != "unknown_kid" {
			t.Fatalf("token %d after its key was rotated out: %v", i, err)
		}
	}
}

// TestVerifyCacheOff: a negative CacheTTL verifies every time (same answers).
func TestVerifyCacheOff(t *testing.T) {
	e := newEnv(t, t.TempDir())
	v := token.NewVerifier(e.store, token.VerifierOptions{Now: func() time.Time { return testNow }, CacheTTL: -1})
	raw := mint(t, e.v3, baseClaims())
	for range 2 {
		if _, err := v.Verify(context.Background(), raw); err != nil {
			t.Fatal(err)
		}
	}
}
