package token_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/warren-mesh/warren/internal/secrets"
	"github.com/warren-mesh/warren/internal/secrets/file"
	"github.com/warren-mesh/warren/internal/token"
	"github.com/warren-mesh/warren/internal/wire"
)

var testNow = time.Date(2026, 3, 4, 15, 30, 0, 0, time.UTC)

// env is a real file store with issuer acme at v3 (v2 previous, v1 retired) and issuer other at v1.
type env struct {
	store                *file.Store
	v1, v2, v3, otherKey secrets.Key
}

func newEnv(t testing.TB, dir string) *env {
	t.Helper()
	s, err := file.Open(filepath.Join(dir, file.DefaultFileName))
	if err != nil {
		t.Fatal(err)
	}
	e := &env{store: s}
	must := func(k secrets.Key, err error) secrets.Key {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	e.v1 = must(s.CreateIssuer("acme"))
	e.v2 = must(s.Rotate("acme"))
	e.v3 = must(s.Rotate("acme"))
	e.otherKey = must(s.CreateIssuer("other"))
	return e
}

func baseClaims() token.Claims {
	return token.Claims{
		Issuer:    "acme",
		Subject:   "user-42",
		IssuedAt:  testNow.Add(-time.Minute),
		ExpiresAt: testNow.Add(time.Hour),
		HasBudget: true,
		Budget: token.Budget{
			AIMicros:       5_000_000,
			ComputeSeconds: 3600,
			Window:         token.WindowDay,
			WindowStart:    token.WindowDay.Start(testNow),
		},
		Permissions: token.Permissions{
			Tools:        []string{"Read", "Bash"},
			BlockedTools: []string{"WebFetch"},
			MaxTurns:     20,
			Model:        "claude-sonnet-4-5",
		},
		SDKConfig: json.RawMessage(`{"systemPrompt":"be brief","maxTurns":3}`),
	}
}

func mint(t testing.TB, key secrets.Key, c token.Claims) string {
	t.Helper()
	s, err := token.Mint(key, c)
	if err != nil {
		t.Fatalf("Mint: %v", err)
	}
	return s
}

func with(f func(*token.Claims)) token.Claims {
	c := baseClaims()
	f(&c)
	return c
}

func seg(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// craft builds a token from a literal header and payload, signed with method and key (or with sig verbatim
// when method is nil), to produce what Mint refuses to.
func craft(t testing.TB, header, payload string, method jwt.SigningMethod, key []byte) string {
	t.Helper()
	signing := seg([]byte(header)) + "." + seg([]byte(payload))
	if method == nil {
		return signing + "."
	}
	sig, err := method.Sign(signing, key)
	if err != nil {
		t.Fatal(err)
	}
	return signing + "." + seg(sig)
}

// payloadJSON is the base claims as JSON with edits applied: set keys to raw JSON, "-key" deletes.
func payloadJSON(t testing.TB, edits map[string]string) string {
	t.Helper()
	m := map[string]json.RawMessage{
		"iss":    json.RawMessage(`"acme"`),
		"sub":    json.RawMessage(`"user-42"`),
		"exp":    json.RawMessage(fmt.Sprint(testNow.Add(time.Hour).Unix())),
		"budget": json.RawMessage(`{"ai":1000,"compute":60,"window":"day","windowStart":"2026-03-04T00:00:00Z"}`),
	}
	for k, v := range edits {
		if strings.HasPrefix(k, "-") {
			delete(m, k[1:])
		} else {
			m[k] = json.RawMessage(v)
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func randomKey(t testing.TB, id string) secrets.Key {
	t.Helper()
	b := make([]byte, 32)
	rand.Read(b)
	return secrets.Key{ID: id, Secret: b}
}

const hs256kid = `{"alg":"HS256","typ":"JWT","kid":"acme-v3"}`

func TestVerify(t *testing.T) {
	e := newEnv(t, t.TempDir())
	noKid := func(k secrets.Key) secrets.Key { return secrets.Key{Secret: k.Secret} }

	tests := []struct {
		name  string
		token func(t *testing.T) string
		opts  token.VerifierOptions
		want  string // Reason; "" means accepted
	}{
		{"valid current kid", func(t *testing.T) string { return mint(t, e.v3, baseClaims()) }, token.VerifierOptions{}, ""},
		{"valid previous kid during rotation", func(t *testing.T) string { return mint(t, e.v2, baseClaims()) }, token.VerifierOptions{}, ""},
		{"retired kid older than previous", func(t *testing.T) string { return mint(t, e.v1, baseClaims()) }, token.VerifierOptions{}, "unknown_kid"},
		{"no kid, current key", func(t *testing.T) string { return mint(t, noKid(e.v3), baseClaims()) }, token.VerifierOptions{}, ""},
		{"no kid, previous key", func(t *testing.T) string { return mint(t, noKid(e.v2), baseClaims()) }, token.VerifierOptions{}, ""},
		{"no kid, retired key", func(t *testing.T) string { return mint(t, noKid(e.v1), baseClaims()) }, token.VerifierOptions{}, "bad_signature"},
		{"unknown kid", func(t *testing.T) string { return mint(t, randomKey(t, "acme-v9"), baseClaims()) }, token.VerifierOptions{}, "unknown_kid"},
		{"kid of another issuer", func(t *testing.T) string { return mint(t, e.otherKey, baseClaims()) }, token.VerifierOptions{}, "unknown_kid"},
		{"right kid, wrong key", func(t *testing.T) string { return mint(t, randomKey(t, "acme-v3"), baseClaims()) }, token.VerifierOptions{}, "bad_signature"},
		{"no kid, wrong key", func(t *testing.T) string { return mint(t, randomKey(t, ""), baseClaims()) }, token.VerifierOptions{}, "bad_signature"},
		{"unknown issuer", func(t *testing.T) string {
			return mint(t, randomKey(t, "nobody-v1"), with(func(c *token.Claims) { c.Issuer = "nobody" }))
		}, token.VerifierOptions{}, "unknown_issuer"},

		{"alg none", func(t *testing.T) string {
			return craft(t, `{"alg":"none","typ":"JWT"}`, payloadJSON(t, nil), nil, nil)
		}, token.VerifierOptions{}, "bad_alg"},
		{"alg none with a signature", func(t *testing.T) string {
			return craft(t, `{"alg":"none","kid":"acme-v3"}`, payloadJSON(t, nil), jwt.SigningMethodHS256, e.v3.Secret)
		}, token.VerifierOptions{}, "bad_alg"},
		{"RS256 header, HMAC signature with the issuer secret", func(t *testing.T) string {
			return craft(t, `{"alg":"RS256","typ":"JWT","kid":"acme-v3"}`, payloadJSON(t, nil), jwt.SigningMethodHS256, e.v3.Secret)
		}, token.VerifierOptions{}, "bad_alg"},
		{"HS384", func(t *testing.T) string {
			return craft(t, `{"alg":"HS384","kid":"acme-v3"}`, payloadJSON(t, nil), jwt.SigningMethodHS384, e.v3.Secret)
		}, token.VerifierOptions{}, "bad_alg"},
		{"lowercase hs256", func(t *testing.T) string {
			return craft(t, `{"alg":"hs256","kid":"acme-v3"}`, payloadJSON(t, nil), jwt.SigningMethodHS256, e.v3.Secret)
		}, token.VerifierOptions{}, "bad_alg"},
		{"unknown alg", func(t *testing.T) string {
			return craft(t, `{"alg":"XS999"}`, payloadJSON(t, nil), nil, nil)
		}, token.VerifierOptions{}, "bad_alg"},
		{"alg missing", func(t *testing.T) string {
			return craft(t, `{"typ":"JWT"}`, payloadJSON(t, nil), nil, nil)
		}, token.VerifierOptions{}, "bad_alg"},
		{"crafted HS256 is fine", func(t *testing.T) string {
			return craft(t, hs256kid, payloadJSON(t, nil), jwt.SigningMethodHS256, e.v3.Secret)
		}, token.VerifierOptions{}, ""},
		{"crit header", func(t *testing.T) string {
			return craft(t, `{"alg":"HS256","kid":"acme-v3","crit":["exp"]}`, payloadJSON(t, nil), jwt.SigningMethodHS256, e.v3.Secret)
		}, token.VerifierOptions{}, "malformed"},
		{"kid not a string", func(t *testing.T) string {
			return craft(t, `{"alg":"HS256","kid":3}`, payloadJSON(t, nil), jwt.SigningMethodHS256, e.v3.Secret)
		}, token.VerifierOptions{}, "malformed"},
		{"padded signature", func(t *testing.T) string {
			return mint(t, e.v3, baseClaims()) + "="
		}, token.VerifierOptions{}, "malformed"},
		{"tampered payload", func(t *testing.T) string {
			good := strings.Split(mint(t, e.v3, baseClaims()), ".")
			return good[0] + "." + seg([]byte(payloadJSON(t, map[string]string{"sub": `"admin"`}))) + "." + good[2]
		}, token.VerifierOptions{}, "bad_signature"},

		{"expired", func(t *testing.T) string {
			return mint(t, e.v3, with(func(c *token.Claims) { c.ExpiresAt = testNow.Add(-2 * time.Minute) }))
		}, token.VerifierOptions{}, "expired"},
		{"expired within leeway", func(t *testing.T) string {
			return mint(t, e.v3, with(func(c *token.Claims) { c.ExpiresAt = testNow.Add(-30 * time.Second) }))
		}, token.VerifierOptions{}, ""},
		{"expired exactly at leeway", func(t *testing.T) string {
			return mint(t, e.v3, with(func(c *token.Claims) { c.ExpiresAt = testNow.Add(-token.DefaultLeeway) }))
		}, token.VerifierOptions{}, "expired"},
		{"expired, no leeway", func(t *testing.T) string {
			return mint(t, e.v3, with(func(c *token.Claims) { c.ExpiresAt = testNow.Add(-time.Second) }))
		}, token.VerifierOptions{Leeway: -1}, "expired"},
		{"nbf in the future", func(t *testing.T) string {
			return mint(t, e.v3, with(func(c *token.Claims) { c.NotBefore = testNow.Add(2 * time.Minute) }))
		}, token.VerifierOptions{}, "not_yet_valid"},
		{"nbf within leeway", func(t *testing.T) string {
			return mint(t, e.v3, with(func(c *token.Claims) { c.NotBefore = testNow.Add(30 * time.Second) }))
		}, token.VerifierOptions{}, ""},
		{"iat in the future", func(t *testing.T) string {
			return mint(t, e.v3, with(func(c *token.Claims) { c.IssuedAt = testNow.Add(2 * time.Minute) }))
		}, token.VerifierOptions{}, "not_yet_valid"},
		{"iat within leeway", func(t *testing.T) string {
			return mint(t, e.v3, with(func(c *token.Claims) { c.IssuedAt = testNow.Add(30 * time.Second) }))
		}, token.VerifierOptions{}, ""},

		{"audience matches", func(t *testing.T) string {
			return mint(t, e.v3, with(func(c *token.Claims) { c.Audience = []string{"warren"} }))
		}, token.VerifierOptions{Audience: "warren"}, ""},
		{"audience in an array", func(t *testing.T) string {
			return mint(t, e.v3, with(func(c *token.Claims) { c.Audience = []string{"api", "warren"} }))
		}, token.VerifierOptions{Audience: "warren"}, ""},
		{"wrong audience", func(t *testing.T) string {
			return mint(t, e.v3, with(func(c *token.Claims) { c.Audience = []string{"someone-else"} }))
		}, token.VerifierOptions{Audience: "warren"}, "bad_audience"},
		{"audience missing when required", func(t *testing.T) string { return mint(t, e.v3, baseClaims()) },
			token.VerifierOptions{Audience: "warren"}, "bad_audience"},
		{"audience ignored when not configured", func(t *testing.T) string {
			return mint(t, e.v3, with(func(c *token.Claims) { c.Audience = []string{"someone-else"} }))
		}, token.VerifierOptions{}, ""},

		{"oversize", func(t *testing.T) string {
			return mint(t, e.v3, with(func(c *token.Claims) {
				c.SDKConfig = json.RawMessage(`{"systemPrompt":"` + strings.Repeat("x", 5000) + `"}`)
			}))
		}, token.VerifierOptions{MaxSize: 4096}, "oversize"},
		{"oversize default", func(t *testing.T) string { return strings.Repeat("a", token.DefaultMaxSize+1) }, token.VerifierOptions{}, "oversize"},

		{"missing exp", func(t *testing.T) string {
			return craft(t, hs256kid, payloadJSON(t, map[string]string{"-exp": ""}), jwt.SigningMethodHS256, e.v3.Secret)
		}, token.VerifierOptions{}, "bad_claims"},
		{"exp as a string", func(t *testing.T) string {
			return craft(t, hs256kid, payloadJSON(t, map[string]string{"exp": `"1999999999"`}), jwt.SigningMethodHS256, e.v3.Secret)
		}, token.VerifierOptions{}, "bad_claims"},
		{"exp out of range", func(t *testing.T) string {
			return craft(t, hs256kid, payloadJSON(t, map[string]string{"exp": `1e300`}), jwt.SigningMethodHS256, e.v3.Secret)
		}, token.VerifierOptions{}, "bad_claims"},
		{"missing sub", func(t *testing.T) string {
			return craft(t, hs256kid, payloadJSON(t, map[string]string{"-sub": ""}), jwt.SigningMethodHS256, e.v3.Secret)
		}, token.VerifierOptions{}, "bad_claims"},
		{"sub with a newline", func(t *testing.T) string {
			return craft(t, hs256kid, payloadJSON(t, map[string]string{"sub": `"a\nb"`}), jwt.SigningMethodHS256, e.v3.Secret)
		}, token.VerifierOptions{}, "bad_claims"},
		{"missing iss", func(t *testing.T) string {
			return craft(t, hs256kid, payloadJSON(t, map[string]string{"-iss": ""}), jwt.SigningMethodHS256, e.v3.Secret)
		}, token.VerifierOptions{}, "malformed"},
		{"iss not a string", func(t *testing.T) string {
			return craft(t, hs256kid, payloadJSON(t, map[string]string{"iss": `7`}), jwt.SigningMethodHS256, e.v3.Secret)
		}, token.VerifierOptions{}, "malformed"},
		{"iss case variant is another claim", func(t *testing.T) string {
			p := strings.Replace(payloadJSON(t, nil), `"iss":"acme"`, `"iss":"acme","ISS":"other"`, 1)
			return craft(t, hs256kid, p, jwt.SigningMethodHS256, e.v3.Secret)
		}, token.VerifierOptions{}, ""},
		{"iss twice, signed by the last one's key", func(t *testing.T) string {
			p := strings.Replace(payloadJSON(t, nil), `"iss":"acme"`, `"iss":"acme","iss":"other"`, 1)
			return craft(t, `{"alg":"HS256","typ":"JWT","kid":"`+e.otherKey.ID+`"}`, p, jwt.SigningMethodHS256, e.otherKey.Secret)
		}, token.VerifierOptions{}, "bad_claims"},
		{"bad window", func(t *testing.T) string {
			return craft(t, hs256kid, payloadJSON(t, map[string]string{"budget": `{"ai":1,"window":"year","windowStart":"2026-01-01T00:00:00Z"}`}), jwt.SigningMethodHS256, e.v3.Secret)
		}, token.VerifierOptions{}, "bad_claims"},
		{"missing windowStart", func(t *testing.T) string {
			return craft(t, hs256kid, payloadJSON(t, map[string]string{"budget": `{"ai":1,"window":"day"}`}), jwt.SigningMethodHS256, e.v3.Secret)
		}, token.VerifierOptions{}, "bad_claims"},
		{"windowStart not RFC 3339", func(t *testing.T) string {
			return craft(t, hs256kid, payloadJSON(t, map[string]string{"budget": `{"ai":1,"window":"day","windowStart":"yesterday"}`}), jwt.SigningMethodHS256, e.v3.Secret)
		}, token.VerifierOptions{}, "bad_claims"},
		{"lifetime needs no windowStart", func(t *testing.T) string {
			return craft(t, hs256kid, payloadJSON(t, map[string]string{"budget": `{"ai":1,"window":"lifetime"}`}), jwt.SigningMethodHS256, e.v3.Secret)
		}, token.VerifierOptions{}, ""},
		{"budget without window", func(t *testing.T) string {
			return craft(t, hs256kid, payloadJSON(t, map[string]string{"budget": `{"ai":1}`}), jwt.SigningMethodHS256, e.v3.Secret)
		}, token.VerifierOptions{}, "bad_claims"},
		{"negative ai", func(t *testing.T) string {
			return craft(t, hs256kid, payloadJSON(t, map[string]string{"budget": `{"ai":-1,"window":"lifetime"}`}), jwt.SigningMethodHS256, e.v3.Secret)
		}, token.VerifierOptions{}, "bad_claims"},
		{"fractional ai", func(t *testing.T) string {
			return craft(t, hs256kid, payloadJSON(t, map[string]string{"budget": `{"ai":1.5,"window":"lifetime"}`}), jwt.SigningMethodHS256, e.v3.Secret)
		}, token.VerifierOptions{}, "bad_claims"},
		{"no budget", func(t *testing.T) string {
			return craft(t, hs256kid, payloadJSON(t, map[string]string{"-budget": ""}), jwt.SigningMethodHS256, e.v3.Secret)
		}, token.VerifierOptions{}, ""},
		{"misspelt permission", func(t *testing.T) string {
			return craft(t, hs256kid, payloadJSON(t, map[string]string{"permissions": `{"blocked_tools":["Bash"]}`}), jwt.SigningMethodHS256, e.v3.Secret)
		}, token.VerifierOptions{}, "bad_claims"},
		{"negative maxTurns", func(t *testing.T) string {
			return craft(t, hs256kid, payloadJSON(t, map[string]string{"permissions": `{"maxTurns":-2}`}), jwt.SigningMethodHS256, e.v3.Secret)
		}, token.VerifierOptions{}, "bad_claims"},
		{"sdkConfig not an object", func(t *testing.T) string {
			return craft(t, hs256kid, payloadJSON(t, map[string]string{"sdkConfig": `["model"]`}), jwt.SigningMethodHS256, e.v3.Secret)
		}, token.VerifierOptions{}, "bad_claims"},
		{"unknown top-level claims are ignored", func(t *testing.T) string {
			return craft(t, hs256kid, payloadJSON(t, map[string]string{"jti": `"abc"`, "custom": `{"x":1}`}), jwt.SigningMethodHS256, e.v3.Secret)
		}, token.VerifierOptions{}, ""},
		{"header names kid twice", func(t *testing.T) string {
			return craft(t, `{"alg":"HS256","typ":"JWT","kid":"acme-v2","kid":"acme-v3"}`, payloadJSON(t, nil), jwt.SigningMethodHS256, e.v3.Secret)
		}, token.VerifierOptions{}, "malformed"},
		{"payload an array", func(t *testing.T) string {
			return craft(t, hs256kid, `[1,2]`, jwt.SigningMethodHS256, e.v3.Secret)
		}, token.VerifierOptions{}, "malformed"},
	}
	for _, junk := range []string{"", ".", "..", "...", "abc", "a.b", "a.b.c", "a.b.c.d", "eyJhbGciOiJIUzI1NiJ9..", "Bearer x.y.z", "\x00\xff.\x01.\x02", "eyJhbGciOiJIUzI1NiJ9.eyJpc3MiOiJhY21lIn0.!!!"} {
		tests = append(tests, struct {
			name  string
			token func(t *testing.T) string
			opts  token.VerifierOptions
			want  string
		}{fmt.Sprintf("garbage %q", junk), func(*testing.T) string { return junk }, token.VerifierOptions{}, "malformed"})
	}

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := tt.opts
			opts.Now = func() time.Time { return testNow }
			v := token.NewVerifier(e.store, opts)
			raw := tt.token(t)
			c, err := v.Verify(context.Background(), raw)
			if got := token.Reason(err); got != tt.want {
				t.Fatalf("Reason = %q (err %v), want %q", got, err, tt.want)
			}
			if err != nil {
				checkError(t, err, raw, e)
				if c != nil {
					t.Fatalf("claims returned with an error")
				}
				return
			}
			if c == nil || c.Issuer != "acme" {
				t.Fatalf("claims = %+v", c)
			}
		})
	}
}

// checkError asserts the error contract: a *wire.Error with a valid code, the reason in details, and nothing
// secret in either the message or the logged form.
func checkError(t testing.TB, err error, raw string, e *env) {
	t.Helper()
	var we *wire.Error
	if !errors.As(err, &we) {
		t.Fatalf("error %T is not a *wire.Error", err)
	}
	if !we.Code.Valid() || (we.Code != wire.Unauthenticated && we.Code != wire.Unavailable) {
		t.Fatalf("code %q", we.Code)
	}
	if we.Details["reason"] != token.Reason(err) {
		t.Fatalf("details.reason = %v, want %q", we.Details["reason"], token.Reason(err))
	}
	pub, _ := wire.Public(err)
	body, _ := json.Marshal(pub)
	for _, leak := range []string{err.Error(), string(body)} {
		if len(raw) > 16 && strings.Contains(leak, raw) {
			t.Fatalf("error carries the token: %s", leak)
		}
		for _, k := range []secrets.Key{e.v1, e.v2, e.v3, e.otherKey} {
			if strings.Contains(leak, base64.StdEncoding.EncodeToString(k.Secret)) || strings.Contains(leak, string(k.Secret)) {
				t.Fatalf("error carries a secret: %s", leak)
			}
		}
	}
}

func TestVerifyClaimsRoundTrip(t *testing.T) {
	e := newEnv(t, t.TempDir())
	v := token.NewVerifier(e.store, token.VerifierOptions{Now: func() time.Time { return testNow }})
	want := with(func(c *token.Claims) {
		c.Audience = []string{"warren"}
		c.NotBefore = testNow.Add(-time.Minute)
		c.Permissions.Tools = []string{} // allows no tool: must not come back as nil (= unrestricted)
		c.Template = "py"
	})
	got, err := v.Verify(context.Background(), mint(t, e.v3, want))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*got, want) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", *got, want)
	}
	if got.Permissions.Tools == nil {
		t.Fatal("empty tools list came back as nil")
	}

	noBudget := with(func(c *token.Claims) { c.HasBudget, c.Budget = false, token.Budget{} })
	got, err = v.Verify(context.Background(), mint(t, e.v3, noBudget))
	if err != nil || got.HasBudget {
		t.Fatalf("token without budget: HasBudget=%v err=%v", got != nil && got.HasBudget, err)
	}
}

// flaky wraps the real store and can be switched to fail like an unreachable backend.
type flaky struct {
	secrets.Store
	down  atomic.Bool
	calls atomic.Int64
}

func (f *flaky) IssuerKeys(ctx context.Context, iss string) ([]secrets.Key, error) {
	f.calls.Add(1)
	if f.down.Load() {
		return nil, fmt.Errorf("dial: %w", secrets.ErrUnavailable)
	}
	return f.Store.IssuerKeys(ctx, iss)
}

func TestVerifyUnavailable(t *testing.T) {
	e := newEnv(t, t.TempDir())
	fl := &flaky{Store: e.store}
	fl.down.Store(true)
	v := token.NewVerifier(fl, token.VerifierOptions{Now: func() time.Time { return testNow }})
	raw := mint(t, e.v3, baseClaims())
	_, err := v.Verify(context.Background(), raw)
	if token.Reason(err) != "unavailable" || wire.CodeOf(err) != wire.Unavailable {
		t.Fatalf("store down: reason %q code %q", token.Reason(err), wire.CodeOf(err))
	}
	if !errors.Is(err, secrets.ErrUnavailable) || !errors.Is(err, token.ErrUnavailable) {
		t.Fatalf("cause chain lost: %v", err)
	}
	checkError(t, err, raw, e)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	fl.down.Store(false)
	if _, err := v.Verify(ctx, raw); token.Reason(err) != "unavailable" {
		t.Fatalf("cancelled request: reason %q, want unavailable", token.Reason(err))
	}
}

// A key rotated after the cache was filled is usable at once: the unknown kid (or a no-kid signature that
// matches no cached key) makes the verifier refresh, and refreshes are rate-limited.
func TestVerifyRefreshesCacheOnRotation(t *testing.T) {
	e := newEnv(t, t.TempDir())
	fl := &flaky{Store: e.store}
	now := testNow
	cache := secrets.NewCache(fl, secrets.CacheOptions{Now: func() time.Time { return now }})
	v := token.NewVerifier(cache, token.VerifierOptions{Now: func() time.Time { return testNow }})
	if _, err := v.Verify(context.Background(), mint(t, e.v3, baseClaims())); err != nil {
		t.Fatal(err)
	}
	v4, err := e.store.Rotate("acme")
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(secrets.DefaultMinRefresh)
	if _, err := v.Verify(context.Background(), mint(t, v4, baseClaims())); err != nil {
		t.Fatalf("new kid right after rotation: %v", err)
	}
	if fl.calls.Load() != 2 {
		t.Fatalf("store calls = %d, want 2", fl.calls.Load())
	}
	// Forged kids within MinRefresh do not reach the store again.
	for range 5 {
		if _, err := v.Verify(context.Background(), mint(t, randomKey(t, "acme-v99"), baseClaims())); token.Reason(err) != "unknown_kid" {
			t.Fatalf("forged kid: %v", err)
		}
	}
	if fl.calls.Load() != 2 {
		t.Fatalf("store calls after forged kids = %d, want 2", fl.calls.Load())
	}

	v5, err := e.store.Rotate("acme")
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(secrets.DefaultMinRefresh)
	if _, err := v.Verify(context.Background(), mint(t, secrets.Key{Secret: v5.Secret}, baseClaims())); err != nil {
		t.Fatalf("new key without kid right after rotation: %v", err)
	}
}

// TestVerifyRotatedKeyAtOnce: a token signed with a key rotated a moment after the issuer's keys were
// cached is accepted at once (before, refused for MinRefresh, 10 s); a flood of bad-signature tokens, for
// one issuer and for many, reaches the key source at most once per issuer a second and at most
// secrets.DefaultRefreshRate times a second in all.
func TestVerifyRotatedKeyAtOnce(t *testing.T) {
	e := newEnv(t, t.TempDir())
	fl := &flaky{Store: e.store}
	now := testNow
	cache := secrets.NewCache(fl, secrets.CacheOptions{Now: func() time.Time { return now }, RefreshAhead: -1})
	v := token.NewVerifier(cache, token.VerifierOptions{Now: func() time.Time { return testNow }})
	ctx := context.Background()
	if _, err := v.Verify(ctx, mint(t, e.v3, baseClaims())); err != nil {
		t.Fatal(err)
	}
	v4, err := e.store.Rotate("acme")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(ctx, mint(t, v4, baseClaims())); err != nil {
		t.Fatalf("a key rotated a moment ago: %v", err)
	}
	if fl.calls.Load() != 2 {
		t.Fatalf("store calls = %d, want 2", fl.calls.Load())
	}

	forged := func(iss string) string {
		return mint(t, secrets.Key{Secret: []byte("not-the-secret")}, with(func(c *token.Claims) { c.Issuer = iss }))
	}
	const many = 60
	issuers := []string{"acme"}
	for i := range many {
		iss := fmt.Sprintf("iss-%d", i)
		k, err := e.store.CreateIssuer(iss)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v.Verify(ctx, mint(t, k, with(func(c *token.Claims) { c.Issuer = iss }))); err != nil {
			t.Fatal(err)
		}
		issuers = append(issuers, iss, fmt.Sprintf("unknown-%d", i))
	}
	for i := range many { // unknown issuers are looked up once, then remembered
		if _, err := v.Verify(ctx, forged(fmt.Sprintf("unknown-%d", i))); token.Reason(err) != "unknown_issuer" {
			t.Fatalf("unknown issuer: %v", err)
		}
	}
	flood := func(issuers []string) int64 {
		t.Helper()
		before := fl.calls.Load()
		for range 20 {
			for _, iss := range issuers {
				if _, err := v.Verify(ctx, forged(iss)); err == nil {
					t.Fatal("a forged token was accepted")
				}
			}
		}
		return fl.calls.Load() - before
	}
	if n := flood([]string{"acme"}); n != 0 {
		t.Fatalf("forged tokens right after a refresh reached the store %d times, want 0", n)
	}
	now = now.Add(secrets.DefaultMinRefresh)
	if n := flood([]string{"acme"}); n != 1 {
		t.Fatalf("forged tokens for one issuer reached the store %d times in a second, want 1", n)
	}
	now = now.Add(secrets.DefaultMinRefresh)
	if n := flood(issuers); n != secrets.DefaultRefreshRate {
		t.Fatalf("forged tokens for %d issuers reached the store %d times, want %d (the global bound)", len(issuers), n, secrets.DefaultRefreshRate)
	}
}

func TestReasons(t *testing.T) {
	want := []string{"oversize", "malformed", "bad_alg", "unknown_issuer", "unknown_kid", "bad_signature",
		"expired", "not_yet_valid", "bad_audience", "bad_claims", "unavailable"}
	if got := token.Reasons(); !slices.Equal(got, want) {
		t.Fatalf("Reasons() = %v", got)
	}
	if token.Reason(nil) != "" || token.Reason(errors.New("x")) != token.ReasonOther {
		t.Fatal("Reason of nil or a foreign error")
	}
	if token.Reason(fmt.Errorf("edge: %w", token.ErrExpired)) != "expired" {
		t.Fatal("Reason through a wrap")
	}
}

func TestMintRefuses(t *testing.T) {
	key := randomKey(t, "acme-v1")
	tests := []struct {
		name string
		key  secrets.Key
		c    token.Claims
	}{
		{"empty secret", secrets.Key{ID: "k"}, baseClaims()},
		{"kid with newline", secrets.Key{ID: "a\nb", Secret: key.Secret}, baseClaims()},
		{"no exp", key, with(func(c *token.Claims) { c.ExpiresAt = time.Time{} })},
		{"no sub", key, with(func(c *token.Claims) { c.Subject = "" })},
		{"long iss", key, with(func(c *token.Claims) { c.Issuer = strings.Repeat("i", 257) })},
		{"budget without HasBudget", key, with(func(c *token.Claims) { c.HasBudget = false })},
		{"bad window", key, with(func(c *token.Claims) { c.Budget.Window = "fortnight" })},
		{"missing window start", key, with(func(c *token.Claims) { c.Budget.WindowStart = time.Time{} })},
		{"negative compute", key, with(func(c *token.Claims) { c.Budget.ComputeSeconds = -1 })},
		{"sdkConfig not an object", key, with(func(c *token.Claims) { c.SDKConfig = json.RawMessage(`"x"`) })},
		{"template not a name", key, with(func(c *token.Claims) { c.Template = "../py" })},
		{"exp before 1970", key, with(func(c *token.Claims) { c.ExpiresAt = time.Unix(-5, 0) })},
		{"oversize", key, with(func(c *token.Claims) { c.SDKConfig = json.RawMessage(`{"p":"` + strings.Repeat("x", 9000) + `"}`) })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if s, err := token.Mint(tt.key, tt.c); err == nil {
				t.Fatalf("Mint accepted: %s", s)
			}
		})
	}
}

func TestWindowStart(t *testing.T) {
	at := time.Date(2026, 3, 4, 15, 30, 12, 5, time.FixedZone("X", -8*3600)) // Wed 23:30:12 UTC
	tests := []struct {
		w    token.Window
		want time.Time
	}{
		{token.WindowHour, time.Date(2026, 3, 4, 23, 0, 0, 0, time.UTC)},
		{token.WindowDay, time.Date(2026, 3, 4, 0, 0, 0, 0, time.UTC)},
		{token.WindowWeek, time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)},
		{token.WindowMonth, time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)},
		{token.WindowLifetime, time.Time{}},
		{"decade", time.Time{}},
	}
	for _, tt := range tests {
		t.Run(string(tt.w), func(t *testing.T) {
			if got := tt.w.Start(at); !got.Equal(tt.want) {
				t.Fatalf("Start = %v, want %v", got, tt.want)
			}
		})
	}
	// Sunday belongs to the week that began the Monday before; Monday starts its own.
	if got := token.WindowWeek.Start(time.Date(2026, 3, 8, 10, 0, 0, 0, time.UTC)); got.Day() != 2 {
		t.Fatalf("Sunday's week starts %v", got)
	}
	if got := token.WindowWeek.Start(time.Date(2026, 3, 9, 0, 0, 0, 0, time.UTC)); got.Day() != 9 {
		t.Fatalf("Monday's week starts %v", got)
	}
}
