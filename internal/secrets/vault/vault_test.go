package vault_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	vaultapi "github.com/hashicorp/vault/api"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/secrets"
	"github.com/warren-mesh/warren/internal/secrets/secretstest"
	"github.com/warren-mesh/warren/internal/secrets/vault"
	"github.com/warren-mesh/warren/internal/testenv"
	"github.com/warren-mesh/warren/internal/token"
)

// The Store plugs into the billing API as the file store does.
var (
	_ billing.KeyRotator                      = (*vault.Store)(nil)
	_ func(context.Context) ([]string, error) = (*vault.Store)(nil).AdminKeys
)

// env is a Vault dev server and a root client for a test, which uses its own prefix per store so that
// stores of one test never see each other's secrets.
type env struct {
	srv      *testenv.VaultServer
	root     *vaultapi.Client
	prefixes atomic.Int64
}

// testLogger logs to t, shown when the test fails or runs with -v.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func newEnv(t testing.TB) *env {
	t.Helper()
	srv := testenv.StartVault(t)
	cfg := vaultapi.DefaultConfig()
	cfg.Address = srv.Addr()
	root, err := vaultapi.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	root.SetToken(srv.RootToken())
	return &env{srv: srv, root: root}
}

func (e *env) prefix() string { return fmt.Sprintf("warren%d", e.prefixes.Add(1)) }

// open makes a Store on the server, with the root token unless cfg names another way to log in, and a fresh
// prefix unless cfg has one.
func (e *env) open(t testing.TB, cfg vault.Config) *vault.Store {
	t.Helper()
	s, err := e.new(cfg)
	if err != nil {
		t.Fatalf("vault.New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func (e *env) new(cfg vault.Config) (*vault.Store, error) {
	cfg.Addr = e.srv.Addr()
	if cfg.Token == "" && cfg.AppRole == nil && cfg.JWT == nil {
		cfg.Token = e.srv.RootToken()
	}
	if cfg.Prefix == "" {
		cfg.Prefix = e.prefix()
	}
	return vault.New(context.Background(), cfg)
}

func (e *env) write(t testing.TB, path string, data map[string]any) *vaultapi.Secret {
	t.Helper()
	sec, err := e.root.Logical().Write(path, data)
	if err != nil {
		t.Fatalf("write %s: %v", path, err)
	}
	return sec
}

// policy writes the policy "warren": what a Warren role needs on every prefix of the secret/ mount.
func (e *env) policy(t testing.TB) {
	t.Helper()
	err := e.root.Sys().PutPolicy("warren", `
path "secret/data/*" { capabilities = ["create", "read", "update"] }
path "secret/metadata/*" { capabilities = ["read"] }
`)
	if err != nil {
		t.Fatal(err)
	}
}

// appRole enables AppRole with the role "warren" (fixed role and secret ids, so a restarted dev server can
// be given the same ones) and the warren policy.
func (e *env) appRole(t testing.TB, tokenTTL, tokenMaxTTL string) *vault.AppRole {
	t.Helper()
	e.policy(t)
	if err := e.root.Sys().EnableAuthWithOptions("approle", &vaultapi.EnableAuthOptions{Type: "approle"}); err != nil {
		t.Fatal(err)
	}
	e.write(t, "auth/approle/role/warren", map[string]any{
		"token_policies": "warren", "token_ttl": tokenTTL, "token_max_ttl": tokenMaxTTL,
	})
	e.write(t, "auth/approle/role/warren/role-id", map[string]any{"role_id": "warren-role"})
	e.write(t, "auth/approle/role/warren/custom-secret-id", map[string]any{"secret_id": "warren-secret"})
	return &vault.AppRole{RoleID: "warren-role", SecretID: "warren-secret"}
}

// token creates a token with the given policies and TTL ("" for the default).
func (e *env) token(t testing.TB, ttl string, policies ...string) string {
	t.Helper()
	sec, err := e.root.Auth().Token().Create(&vaultapi.TokenCreateRequest{Policies: policies, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	return sec.Auth.ClientToken
}

// versionCreated is when version v of an issuer's secret was written, as Vault recorded it.
func (e *env) versionCreated(t testing.TB, prefix, issuer string, v int) time.Time {
	t.Helper()
	vs, err := e.root.KVv2("secret").GetVersionsAsList(context.Background(), prefix+"/issuers/"+issuer)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range vs {
		if m.Version == v {
			return m.CreatedTime
		}
	}
	t.Fatalf("issuer %s has no version %d", issuer, v)
	return time.Time{}
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

func ids(ks []secrets.Key) string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = k.ID
	}
	return strings.Join(out, ",")
}

func wantKeys(t testing.TB, s secrets.Store, issuer string, want ...secrets.Key) {
	t.Helper()
	ks, err := s.IssuerKeys(context.Background(), issuer)
	if err != nil {
		t.Fatalf("IssuerKeys(%q): %v", issuer, err)
	}
	if len(ks) != len(want) {
		t.Fatalf("IssuerKeys(%q) = %s, want %s", issuer, ids(ks), ids(want))
	}
	for i := range want {
		if ks[i].ID != want[i].ID || !bytes.Equal(ks[i].Secret, want[i].Secret) {
			t.Fatalf("IssuerKeys(%q) = %s, want %s", issuer, ids(ks), ids(want))
		}
	}
}

func must[T any](t testing.TB) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func TestContract(t *testing.T) {
	e := newEnv(t)
	secretstest.Run(t, func(t *testing.T) secretstest.Subject {
		s := e.open(t, vault.Config{Timeout: 5 * time.Second})
		return secretstest.Subject{
			Store:        s,
			CreateIssuer: s.CreateIssuer,
			Rotate:       s.Rotate,
			ErrExists:    vault.ErrIssuerExists,
			ErrInvalid:   vault.ErrInvalidIssuer,
			ErrConflict:  vault.ErrConflict,
			Stop:         func(t *testing.T) { e.srv.Stop(t) },
			Start:        func(t *testing.T) { e.srv.Start(t) },
			Volatile:     true,
		}
	})
}

// The layout in Vault is the documented one, so operators can read and write it with the vault CLI.
func TestLayout(t *testing.T) {
	e := newEnv(t)
	s := e.open(t, vault.Config{Prefix: "team/warren"})
	k := must[secrets.Key](t)(s.CreateIssuer("acme"))
	got, err := e.root.KVv2("secret").Get(context.Background(), "team/warren/issuers/acme")
	if err != nil {
		t.Fatal(err)
	}
	// A new key is a text secret, stored as the text handed out.
	if k.Form != secrets.FormText || !secrets.ValidTextSecret(string(k.Secret)) ||
		got.Data["secret"] != string(k.Secret) || got.VersionMetadata.Version != 1 {
		t.Fatalf("secret/data/team/warren/issuers/acme = version %d, form %v, stored as given: %v",
			got.VersionMetadata.Version, k.Form, got.Data["secret"] == string(k.Secret))
	}
	// A legacy base64 version written by hand (vault kv put) is the next key and signs with its decoded
	// bytes; the text key before it stays the previous one.
	secret := bytes.Repeat([]byte{7}, 32)
	if _, err := e.root.KVv2("secret").Put(context.Background(), "team/warren/issuers/acme",
		map[string]any{"secret": base64.StdEncoding.EncodeToString(secret)}); err != nil {
		t.Fatal(err)
	}
	wantKeys(t, s, "acme", secrets.Key{ID: "acme-v2", Secret: secret}, k)
	if ks, err := s.IssuerKeys(context.Background(), "acme"); err != nil || ks[0].Form != secrets.FormBase64 || ks[1].Form != secrets.FormText {
		t.Fatalf("forms after a hand-written legacy version: %v, %v", ks, err)
	}
	// An issuer id that is not a plain path segment is stored under its base64url form.
	k = must[secrets.Key](t)(s.CreateIssuer("a/b"))
	if _, err := e.root.KVv2("secret").Get(context.Background(), "team/warren/issuers/~YS9i"); err != nil {
		t.Fatalf("issuer a/b: %v", err)
	}
	wantKeys(t, s, "a/b", k)
	// A legacy key too short or not base64, or a text secret with a bad length or alphabet, is refused, not
	// used.
	for _, bad := range []string{"c2hvcnQ=", "not base64", "wsk_short", "wsk_" + strings.Repeat("a", 42) + "-",
		"wsk_" + base64.StdEncoding.EncodeToString(secret)} {
		if _, err := e.root.KVv2("secret").Put(context.Background(), "team/warren/issuers/acme", map[string]any{"secret": bad}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.IssuerKeys(context.Background(), "acme"); !errors.Is(err, vault.ErrMalformed) {
			t.Fatalf("key %q: %v, want ErrMalformed", bad, err)
		}
	}
}

func TestPreviousGrace(t *testing.T) {
	e := newEnv(t)
	for _, tt := range []struct {
		name  string
		grace time.Duration
	}{{"default", 0}, {"hour", time.Hour}} {
		t.Run(tt.name, func(t *testing.T) {
			clk := &clock{t: time.Now()}
			prefix := e.prefix()
			s := e.open(t, vault.Config{Prefix: prefix, PreviousGrace: tt.grace, Now: clk.Now})
			grace := tt.grace
			if grace == 0 {
				grace = vault.DefaultPreviousGrace
			}
			k1 := must[secrets.Key](t)(s.CreateIssuer("acme"))
			k2 := must[secrets.Key](t)(s.Rotate("acme"))
			rotated := e.versionCreated(t, prefix, "acme", 2)
			clk.Set(rotated.Add(grace - time.Second))
			wantKeys(t, s, "acme", k2, k1)
			clk.Set(rotated.Add(grace))
			wantKeys(t, s, "acme", k2)
			k3 := must[secrets.Key](t)(s.Rotate("acme"))
			clk.Set(e.versionCreated(t, prefix, "acme", 3)) // the grace of k2 runs from k3's creation
			wantKeys(t, s, "acme", k3, k2)
		})
	}
}

// Versions deleted or destroyed (a compromised key, say) are skipped; an issuer with none left is unknown.
func TestDeletedVersions(t *testing.T) {
	e := newEnv(t)
	prefix := e.prefix()
	s := e.open(t, vault.Config{Prefix: prefix})
	kv := e.root.KVv2("secret")
	path := prefix + "/issuers/acme"
	ctx := context.Background()
	k1 := must[secrets.Key](t)(s.CreateIssuer("acme"))
	k2 := must[secrets.Key](t)(s.Rotate("acme"))
	k3 := must[secrets.Key](t)(s.Rotate("acme"))
	wantKeys(t, s, "acme", k3, k2)

	if err := kv.DeleteVersions(ctx, path, []int{3}); err != nil {
		t.Fatal(err)
	}
	wantKeys(t, s, "acme", k2, k1)
	if err := kv.Destroy(ctx, path, []int{2}); err != nil {
		t.Fatal(err)
	}
	wantKeys(t, s, "acme", k1)
	if err := kv.Undelete(ctx, path, []int{3}); err != nil {
		t.Fatal(err)
	}
	wantKeys(t, s, "acme", k3, k1)

	// Rotation writes after the newest version, deleted or not.
	if err := kv.DeleteVersions(ctx, path, []int{1, 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.IssuerKeys(ctx, "acme"); !errors.Is(err, secrets.ErrUnknownIssuer) {
		t.Fatalf("no live version: %v, want ErrUnknownIssuer", err)
	}
	if _, err := s.Rotate("acme"); !errors.Is(err, secrets.ErrUnknownIssuer) {
		t.Fatalf("Rotate with no live version: %v, want ErrUnknownIssuer", err)
	}
	if _, err := s.CreateIssuer("acme"); !errors.Is(err, vault.ErrIssuerExists) {
		t.Fatalf("CreateIssuer over deleted versions: %v, want ErrIssuerExists", err)
	}
	if err := kv.DeleteMetadata(ctx, path); err != nil {
		t.Fatal(err)
	}
	k := must[secrets.Key](t)(s.CreateIssuer("acme"))
	if k.ID != "acme-v1" {
		t.Fatalf("re-created issuer's key %s", k.ID)
	}
	wantKeys(t, s, "acme", k)
}

func TestAppRole(t *testing.T) {
	e := newEnv(t)
	role := e.appRole(t, "1h", "2h")
	s := e.open(t, vault.Config{AppRole: role})
	if s.CurrentToken() == "" || s.CurrentToken() == e.srv.RootToken() {
		t.Fatal("no AppRole token after New")
	}
	k := must[secrets.Key](t)(s.CreateIssuer("acme"))
	wantKeys(t, s, "acme", k)

	_, err := e.new(vault.Config{AppRole: &vault.AppRole{RoleID: role.RoleID, SecretID: "wrong"}})
	if !errors.Is(err, vault.ErrLogin) || errors.Is(err, secrets.ErrUnavailable) {
		t.Fatalf("New with a wrong secret id: %v, want ErrLogin", err)
	}
	if strings.Contains(err.Error(), "wrong") {
		t.Fatalf("the login error shows the secret id: %v", err)
	}
}

// jwtAuth enables the JWT auth method trusting a fresh ECDSA key, with the role "warren" for tokens of
// audience vault.io from issuer nomad-test, and returns the key to sign them with.
func (e *env) jwtAuth(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	e.policy(t)
	key := must[*ecdsa.PrivateKey](t)(ecdsa.GenerateKey(elliptic.P256(), rand.Reader))
	der := must[[]byte](t)(x509.MarshalPKIXPublicKey(&key.PublicKey))
	if err := e.root.Sys().EnableAuthWithOptions("jwt", &vaultapi.EnableAuthOptions{Type: "jwt"}); err != nil {
		t.Fatal(err)
	}
	e.write(t, "auth/jwt/config", map[string]any{
		"jwt_validation_pubkeys": []string{string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))},
		"bound_issuer":           "nomad-test",
	})
	e.write(t, "auth/jwt/role/warren", map[string]any{
		"role_type": "jwt", "user_claim": "sub", "bound_audiences": []string{"vault.io"},
		"token_policies": []string{"warren"}, "token_ttl": "1h",
	})
	return key
}

func signJWT(t testing.TB, key *ecdsa.PrivateKey) string {
	t.Helper()
	now := time.Now()
	return must[string](t)(jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{
		"iss": "nomad-test", "sub": "global:default:warren:edge", "aud": "vault.io",
		"iat": now.Unix(), "nbf": now.Add(-time.Minute).Unix(), "exp": now.Add(time.Hour).Unix(),
	}).SignedString(key))
}

func TestJWT(t *testing.T) {
	e := newEnv(t)
	key := e.jwtAuth(t)
	prefix := e.prefix()
	s := e.open(t, vault.Config{Prefix: prefix, JWT: &vault.JWT{Role: "warren", JWT: signJWT(t, key)}})
	k := must[secrets.Key](t)(s.CreateIssuer("acme"))

	// A Nomad workload identity is a file the task reads.
	file := filepath.Join(t.TempDir(), "nomad_vault.jwt")
	if err := os.WriteFile(file, []byte(signJWT(t, key)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fromFile := e.open(t, vault.Config{Prefix: prefix, JWT: &vault.JWT{Role: "warren", JWTFile: file}})
	wantKeys(t, fromFile, "acme", k)

	other := must[*ecdsa.PrivateKey](t)(ecdsa.GenerateKey(elliptic.P256(), rand.Reader))
	if _, err := e.new(vault.Config{JWT: &vault.JWT{Role: "warren", JWT: signJWT(t, other)}}); !errors.Is(err, vault.ErrLogin) {
		t.Fatalf("New with a JWT signed by an unknown key: %v, want ErrLogin", err)
	}
	if _, err := e.new(vault.Config{JWT: &vault.JWT{Role: "warren", JWTFile: filepath.Join(t.TempDir(), "missing")}}); !errors.Is(err, vault.ErrLogin) {
		t.Fatalf("New with a missing JWT file: %v, want ErrLogin", err)
	}
}

// useFor calls IssuerKeys every 100 ms for d, failing at the first error, and calls each after every call.
func useFor(t *testing.T, s *vault.Store, d time.Duration, each func()) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if _, err := s.IssuerKeys(context.Background(), "acme"); err != nil {
			t.Fatalf("IssuerKeys: %v", err)
		}
		each()
	}
}

// A short-lived renewable token given as Token is renewed: the store works long past its first TTL.
func TestTokenRenewal(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.policy(t)
	const ttl = 5 * time.Second // long enough for a renewal at 2/3 of it to land in time on a loaded machine
	tok := e.token(t, ttl.String(), "warren")
	s := e.open(t, vault.Config{Token: tok, Logger: testLogger(t)})
	must[secrets.Key](t)(s.CreateIssuer("acme"))
	useFor(t, s, 2*ttl+time.Second, func() {})
	if s.CurrentToken() != tok {
		t.Fatal("the static token was replaced")
	}
	// Unrenewed, it would have been revoked after ttl.
	if _, err := e.root.Auth().Token().Lookup(tok); err != nil {
		t.Fatalf("the token is gone after %v: %v", 2*ttl+time.Second, err)
	}
}

// An AppRole token that reaches its max TTL is replaced by a new login before it expires.
func TestAppRoleRelogin(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	role := e.appRole(t, "4s", "8s")
	s := e.open(t, vault.Config{AppRole: role, Logger: testLogger(t)})
	must[secrets.Key](t)(s.CreateIssuer("acme"))
	seen := map[string]bool{s.CurrentToken(): true}
	useFor(t, s, 10*time.Second, func() { seen[s.CurrentToken()] = true })
	if len(seen) < 2 {
		t.Fatalf("%d distinct tokens in 10 s with a max TTL of 8 s: no re-login", len(seen))
	}
}

// A store whose first login finds Vault down starts anyway, answers ErrUnavailable, and logs in once Vault
// is back.
func TestLoginWhileVaultDown(t *testing.T) {
	e := newEnv(t)
	role := e.appRole(t, "1h", "2h")
	e.srv.Stop(t)
	s := e.open(t, vault.Config{AppRole: role, Timeout: 2 * time.Second, Logger: testLogger(t)})
	if _, err := s.IssuerKeys(context.Background(), "acme"); !errors.Is(err, secrets.ErrUnavailable) {
		t.Fatalf("IssuerKeys before any login: %v, want ErrUnavailable", err)
	}
	if _, err := s.CreateIssuer("acme"); !errors.Is(err, secrets.ErrUnavailable) {
		t.Fatalf("CreateIssuer before any login: %v, want ErrUnavailable", err)
	}
	e.srv.Start(t)
	e.appRole(t, "1h", "2h") // the dev server came back empty
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := s.IssuerKeys(context.Background(), "acme")
		if errors.Is(err, secrets.ErrUnknownIssuer) {
			break
		}
		if !errors.Is(err, secrets.ErrUnavailable) || time.Now().After(deadline) {
			t.Fatalf("IssuerKeys after Vault came back: %v, want ErrUnknownIssuer once logged in", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	must[secrets.Key](t)(s.CreateIssuer("acme"))
}

// A token without the policy gets a permission error that says what to grant, never "unknown issuer".
func TestPermissionDenied(t *testing.T) {
	e := newEnv(t)
	s := e.open(t, vault.Config{Token: e.token(t, "", "default")})
	_, err := s.IssuerKeys(context.Background(), "acme")
	if !errors.Is(err, vault.ErrPermissionDenied) || errors.Is(err, secrets.ErrUnknownIssuer) || errors.Is(err, secrets.ErrUnavailable) {
		t.Fatalf("IssuerKeys without the policy: %v, want ErrPermissionDenied only", err)
	}
	if !strings.Contains(err.Error(), "read on secret/metadata/") {
		t.Fatalf("the error does not say which policy is missing: %v", err)
	}
	if _, err := s.CreateIssuer("acme"); !errors.Is(err, vault.ErrPermissionDenied) {
		t.Fatalf("CreateIssuer without the policy: %v", err)
	}
	if _, err := s.AdminKeys(context.Background()); !errors.Is(err, vault.ErrPermissionDenied) {
		t.Fatalf("AdminKeys without the policy: %v", err)
	}
}

// A sealed Vault answers 503: unavailable.
func TestSealed(t *testing.T) {
	e := newEnv(t)
	s := e.open(t, vault.Config{Timeout: 2 * time.Second})
	must[secrets.Key](t)(s.CreateIssuer("acme"))
	if err := e.root.Sys().Seal(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.IssuerKeys(context.Background(), "acme"); !errors.Is(err, secrets.ErrUnavailable) {
		t.Fatalf("IssuerKeys of a sealed Vault: %v, want ErrUnavailable", err)
	}
}

func TestAdminKeys(t *testing.T) {
	e := newEnv(t)
	clk := &clock{t: time.Now()}
	prefix := e.prefix()
	s := e.open(t, vault.Config{Prefix: prefix, Now: clk.Now, PreviousGrace: time.Hour})
	ctx := context.Background()
	if keys, err := s.AdminKeys(ctx); err != nil || len(keys) != 0 {
		t.Fatalf("AdminKeys of an empty prefix: %d keys, %v", len(keys), err)
	}

	// Racing EnsureAdminKey calls agree on one key, written once.
	const racers = 4
	var created atomic.Int64
	got := make([]string, racers)
	var wg sync.WaitGroup
	for i := range racers {
		wg.Go(func() {
			key, c, err := s.EnsureAdminKey(ctx)
			if err != nil {
				t.Errorf("EnsureAdminKey: %v", err)
			}
			if c {
				created.Add(1)
			}
			got[i] = key
		})
	}
	wg.Wait()
	key := got[0]
	if created.Load() != 1 || !strings.HasPrefix(key, "wak_") || len(key) < 40 {
		t.Fatalf("EnsureAdminKey created %d keys; first is %d bytes", created.Load(), len(key))
	}
	for _, k := range got {
		if k != key {
			t.Fatal("racing EnsureAdminKey calls returned different keys")
		}
	}

	// Rotation is a new version; the old key stays valid for PreviousGrace.
	sec := e.write(t, "secret/data/"+prefix+"/admin", map[string]any{"data": map[string]any{"key": "wak_second"}})
	if keys := must[[]string](t)(s.AdminKeys(ctx)); strings.Join(keys, ",") != "wak_second,"+key {
		t.Fatalf("after rotation: %d keys", len(keys))
	}
	rotated, err := time.Parse(time.RFC3339Nano, sec.Data["created_time"].(string))
	if err != nil {
		t.Fatal(err)
	}
	clk.Set(rotated.Add(time.Hour))
	if keys := must[[]string](t)(s.AdminKeys(ctx)); len(keys) != 1 || keys[0] != "wak_second" {
		t.Fatalf("past the grace: %d keys", len(keys))
	}
	if k, c, err := s.EnsureAdminKey(ctx); err != nil || c || k != "wak_second" {
		t.Fatalf("EnsureAdminKey with a key: created %v, %v", c, err)
	}
}

func TestModelAPIKey(t *testing.T) {
	e := newEnv(t)
	prefix := e.prefix()
	s := e.open(t, vault.Config{Prefix: prefix})
	ctx := context.Background()
	if _, err := s.ModelAPIKey(ctx); !errors.Is(err, vault.ErrNotFound) {
		t.Fatalf("ModelAPIKey with none: %v, want ErrNotFound", err)
	}
	for _, k := range []string{"sk-first", "sk-second"} {
		e.write(t, "secret/data/"+prefix+"/model", map[string]any{"data": map[string]any{"api_key": k}})
		if got := must[string](t)(s.ModelAPIKey(ctx)); got != k {
			t.Fatalf("ModelAPIKey = %q, want %q", got, k)
		}
	}
	e.write(t, "secret/data/"+prefix+"/model", map[string]any{"data": map[string]any{"apikey": "typo"}})
	if _, err := s.ModelAPIKey(ctx); !errors.Is(err, vault.ErrMalformed) {
		t.Fatalf("ModelAPIKey without the field: %v, want ErrMalformed", err)
	}
}

// docs/ARCHITECTURE.md#failure-behaviour: with Vault down, the cache keeps verifying tokens of issuers it
// holds until its TTL, and refuses tokens of issuers it never saw as unavailable (not as unknown).
func TestCacheThroughOutage(t *testing.T) {
	e := newEnv(t)
	s := e.open(t, vault.Config{Timeout: 2 * time.Second})
	k := must[secrets.Key](t)(s.CreateIssuer("acme"))
	clk := &clock{t: time.Now()}
	cache := secrets.NewCache(s, secrets.CacheOptions{Now: clk.Now})
	t.Cleanup(func() { cache.Close() })
	verifier := token.NewVerifier(cache, token.VerifierOptions{Now: clk.Now})
	raw := must[string](t)(token.Mint(k, token.Claims{Issuer: "acme", Subject: "user-1", ExpiresAt: clk.Now().Add(24 * time.Hour)}))
	ctx := context.Background()
	if _, err := verifier.Verify(ctx, raw); err != nil {
		t.Fatalf("Verify with Vault up: %v", err)
	}

	e.srv.Stop(t)
	clk.Set(clk.Now().Add(secrets.DefaultCacheTTL - time.Second)) // in the refresh window too: it fails quietly
	if _, err := verifier.Verify(ctx, raw); err != nil {
		t.Fatalf("Verify with Vault down, within the TTL: %v", err)
	}
	if _, err := cache.IssuerKeys(ctx, "never-seen"); !errors.Is(err, secrets.ErrUnavailable) || errors.Is(err, secrets.ErrUnknownIssuer) {
		t.Fatalf("uncached issuer with Vault down: %v, want ErrUnavailable", err)
	}
	clk.Set(clk.Now().Add(time.Second))
	if _, err := verifier.Verify(ctx, raw); token.Reason(err) != "unavailable" {
		t.Fatalf("Verify with Vault down past the TTL: %v (reason %q), want unavailable", err, token.Reason(err))
	}
}

func TestConfig(t *testing.T) {
	for name, cfg := range map[string]vault.Config{
		"no addr":          {Token: "t"},
		"no auth":          {Addr: "http://127.0.0.1:1"},
		"two auths":        {Addr: "http://127.0.0.1:1", Token: "t", AppRole: &vault.AppRole{RoleID: "r", SecretID: "s"}},
		"approle no id":    {Addr: "http://127.0.0.1:1", AppRole: &vault.AppRole{SecretID: "s"}},
		"jwt both":         {Addr: "http://127.0.0.1:1", JWT: &vault.JWT{Role: "r", JWT: "x", JWTFile: "f"}},
		"jwt none":         {Addr: "http://127.0.0.1:1", JWT: &vault.JWT{Role: "r"}},
		"bad mount":        {Addr: "http://127.0.0.1:1", Token: "t", Mount: "../sys"},
		"bad prefix":       {Addr: "http://127.0.0.1:1", Token: "t", Prefix: "a/../b"},
		"bad approle path": {Addr: "http://127.0.0.1:1", AppRole: &vault.AppRole{Mount: "a/", RoleID: "r", SecretID: "s"}},
	} {
		if s, err := vault.New(context.Background(), cfg); err == nil {
			s.Close()
			t.Errorf("%s: New accepted %+v", name, cfg)
		}
	}
	// A static token needs no server at New; calls then fail as unavailable.
	s, err := vault.New(context.Background(), vault.Config{Addr: "http://127.0.0.1:1", Token: "t", Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.IssuerKeys(context.Background(), "acme"); !errors.Is(err, secrets.ErrUnavailable) {
		t.Fatalf("IssuerKeys with nothing listening: %v, want ErrUnavailable", err)
	}
	if _, err := s.IssuerKeys(context.Background(), "a\x00"); !errors.Is(err, secrets.ErrUnknownIssuer) || !errors.Is(err, vault.ErrInvalidIssuer) {
		t.Fatalf("IssuerKeys of an invalid id: %v, want ErrUnknownIssuer without asking Vault", err)
	}
}
