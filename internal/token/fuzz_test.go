package token_test

import (
	"context"
	"encoding/base64"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/warren-mesh/warren/internal/secrets"
	"github.com/warren-mesh/warren/internal/token"
	"github.com/warren-mesh/warren/internal/wire"
)

// FuzzVerify feeds arbitrary strings to Verify: it must never panic, every error must be a *wire.Error with
// a valid code and a listed reason and carry no secret, and every accepted token must hold claims Mint
// would sign (Verify accepts nothing it could not have produced).
func FuzzVerify(f *testing.F) {
	e := newEnv(f, f.TempDir())
	cache := secrets.NewCache(e.store, secrets.CacheOptions{Now: func() time.Time { return testNow }})
	v := token.NewVerifier(cache, token.VerifierOptions{Now: func() time.Time { return testNow }})

	valid := mint(f, e.v3, baseClaims())
	for _, s := range []string{
		valid,
		mint(f, e.v2, baseClaims()),
		mint(f, secrets.Key{Secret: e.v3.Secret}, baseClaims()),
		mint(f, e.v1, baseClaims()),
		mint(f, e.v3, with(func(c *token.Claims) { c.ExpiresAt = testNow.Add(-time.Hour) })),
		mint(f, e.v3, with(func(c *token.Claims) { c.Audience = []string{"a", "b"}; c.NotBefore = testNow })),
		mint(f, e.v3, with(func(c *token.Claims) { c.HasBudget, c.Budget = false, token.Budget{} })),
		mint(f, randomKey(f, "acme-v3"), baseClaims()),
		craft(f, `{"alg":"none"}`, payloadJSON(f, nil), nil, nil),
		craft(f, `{"alg":"HS384","kid":"acme-v3"}`, payloadJSON(f, nil), jwt.SigningMethodHS384, e.v3.Secret),
		craft(f, hs256kid, payloadJSON(f, map[string]string{"-exp": ""}), jwt.SigningMethodHS256, e.v3.Secret),
		craft(f, hs256kid, payloadJSON(f, map[string]string{"budget": `{"window":"day"}`}), jwt.SigningMethodHS256, e.v3.Secret),
		craft(f, hs256kid, payloadJSON(f, map[string]string{"sdkConfig": `{"a":[1,{"b":null}]}`}), jwt.SigningMethodHS256, e.v3.Secret),
		valid[:len(valid)-3],
		valid + ".x",
		strings.Replace(valid, ".", "..", 1),
		"", "...", "a.b.c", "eyJhbGciOiJIUzI1NiJ9.e30.",
	} {
		f.Add(s)
	}
	secretsB64 := []string{}
	for _, k := range []secrets.Key{e.v1, e.v2, e.v3, e.otherKey} {
		secretsB64 = append(secretsB64, base64.StdEncoding.EncodeToString(k.Secret))
	}

	f.Fuzz(func(t *testing.T, raw string) {
		c, err := v.Verify(context.Background(), raw)
		if err != nil {
			if c != nil {
				t.Fatal("claims returned with an error")
			}
			var we *wire.Error
			if !errors.As(err, &we) || !we.Code.Valid() {
				t.Fatalf("error is not a valid *wire.Error: %#v", err)
			}
			if !slices.Contains(token.Reasons(), token.Reason(err)) {
				t.Fatalf("reason %q not listed (err %v)", token.Reason(err), err)
			}
			for _, s := range secretsB64 {
				if strings.Contains(err.Error(), s) {
					t.Fatal("error carries a secret")
				}
			}
			return
		}
		if c == nil {
			t.Fatal("nil claims without an error")
		}
		if _, err := token.Mint(randomKey(t, ""), *c); err != nil && !errors.Is(err, token.ErrOversize) {
			t.Fatalf("Verify accepted claims Mint refuses: %v", err)
		}
	})
}

// FuzzSignedToken signs arbitrary header and payload JSON with the issuer's current key, so the fuzzer
// reaches what FuzzVerify's random tokens rarely do: header handling and the signed claims. Accepted tokens
// must name acme (the key's issuer) and use HS256.
func FuzzSignedToken(f *testing.F) {
	e := newEnv(f, f.TempDir())
	v := token.NewVerifier(e.store, token.VerifierOptions{Now: func() time.Time { return testNow }, Audience: "warren"})
	f.Add(hs256kid, payloadJSON(f, map[string]string{"aud": `"warren"`}))
	f.Add(`{"alg":"HS256"}`, payloadJSON(f, map[string]string{"aud": `["x","warren"]`, "nbf": "1", "iat": "2"}))
	f.Add(`{"alg":"HS256","kid":"acme-v2"}`, payloadJSON(f, map[string]string{"permissions": `{"tools":[]}`}))
	f.Add(`{"alg":"none","kid":"acme-v3"}`, payloadJSON(f, nil))
	f.Add(`{"alg":"HS256","crit":[]}`, payloadJSON(f, nil))
	f.Add(`{"alg":"HS256","kid":null}`, `{"iss":"acme","ISS":"x"}`)
	f.Add(hs256kid, `{"iss":"acme","sub":"u","exp":1e9,"budget":{"window":"week","windowStart":"2026-03-02T00:00:00Z"},"sdkConfig":{}}`)

	f.Fuzz(func(t *testing.T, header, payload string) {
		raw := craft(t, header, payload, jwt.SigningMethodHS256, e.v3.Secret)
		c, err := v.Verify(context.Background(), raw)
		if err != nil {
			var we *wire.Error
			if !errors.As(err, &we) || we.Code != wire.Unauthenticated {
				t.Fatalf("error is not an unauthenticated *wire.Error: %#v", err)
			}
			if !slices.Contains(token.Reasons(), token.Reason(err)) {
				t.Fatalf("reason %q not listed", token.Reason(err))
			}
			return
		}
		if c.Issuer != "acme" || !slices.Contains(c.Audience, "warren") || !c.ExpiresAt.After(testNow.Add(-token.DefaultLeeway)) {
			t.Fatalf("accepted claims %+v", c)
		}
		if _, err := token.Mint(randomKey(t, ""), *c); err != nil && !errors.Is(err, token.ErrOversize) {
			t.Fatalf("Verify accepted claims Mint refuses: %v", err)
		}
	})
}
