package token_test

import (
	"context"
	"fmt"
	"sync"
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

// TestVerifyCacheClaimsAreTheCallersOwn: a caller that changes the claims it was answered, slices included
// (audience, permitted and blocked tools, sdkConfig), in place, changes nothing another Verify of the same
// token answers, whether its own answer came from a full verification or from the cache. Without deep
// copies, one consumer editing its permissions would widen or narrow every later request's.
func TestVerifyCacheClaimsAreTheCallersOwn(t *testing.T) {
	e := newEnv(t, t.TempDir())
	v := token.NewVerifier(e.store, token.VerifierOptions{Now: func() time.Time { return testNow }})
	raw := mint(t, e.v3, with(func(c *token.Claims) {
		c.Audience = []string{"warren"}
		c.Permissions = token.Permissions{Tools: []string{"Read"}, BlockedTools: []string{"Bash"}}
		c.SDKConfig = []byte(`{"model":"a"}`)
	}))
	for i := range 3 { // a full verification, then two hits
		c, err := v.Verify(context.Background(), raw)
		if err != nil {
			t.Fatal(err)
		}
		if c.Audience[0] != "warren" || c.Permissions.Tools[0] != "Read" || c.Permissions.BlockedTools[0] != "Bash" ||
			string(c.SDKConfig) != `{"model":"a"}` {
			t.Fatalf("verify %d answered claims an earlier caller changed: %q %+v %s", i, c.Audience, c.Permissions, c.SDKConfig)
		}
		c.Audience[0], c.Permissions.Tools[0], c.Permissions.BlockedTools[0] = "other", "Bash", "Read"
		c.SDKConfig[len(c.SDKConfig)-3] = 'b'
	}
	// "tools": [] (allows none) stays an empty list, never nil (no restriction), in a hit's copy.
	raw = mint(t, e.v3, with(func(c *token.Claims) { c.Permissions = token.Permissions{Tools: []string{}} }))
	for i := range 2 {
		if c, err := v.Verify(context.Background(), raw); err != nil || c.Permissions.Tools == nil {
			t.Fatalf("verify %d of a token allowing no tools: %v, tools %#v", i, err, c.Permissions.Tools)
		}
	}
}

// TestVerifyCacheConcurrent: callers verifying the same tokens at once, each editing its answer, never see
// another's edits (run with -race: no memory is shared between answers or with the cache).
func TestVerifyCacheConcurrent(t *testing.T) {
	e := newEnv(t, t.TempDir())
	v := token.NewVerifier(e.store, token.VerifierOptions{Now: func() time.Time { return testNow }})
	var toks []string
	for _, tool := range []string{"Read", "Write", "Edit", "Grep"} {
		toks = append(toks, mint(t, e.v3, with(func(c *token.Claims) {
			c.Permissions = token.Permissions{Tools: []string{tool}}
			c.SDKConfig = []byte(`{"model":"` + tool + `"}`)
		})))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				raw := toks[(g+i)%len(toks)]
				c, err := v.Verify(context.Background(), raw)
				if err != nil {
					errs <- err
					return
				}
				tool := c.Permissions.Tools[0]
				if string(c.SDKConfig) != `{"model":"`+tool+`"}` || (tool != "Read" && tool != "Write" && tool != "Edit" && tool != "Grep") {
					errs <- fmt.Errorf("answer %+v %s: another caller's edit", c.Permissions, c.SDKConfig)
					return
				}
				c.Permissions.Tools[0], c.SDKConfig[2] = "Bash", 'X'
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
