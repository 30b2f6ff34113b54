package billing_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/sqlite"
	"github.com/warren-mesh/warren/internal/wire"
)

// createKey makes an API key of iss with the admin key and returns it with its secret.
func (e *apiEnv) createKey(t *testing.T, iss, name string) billing.NewAPIKey {
	t.Helper()
	var k billing.NewAPIKey
	e.call(t, "POST", "/v1/issuers/"+iss+"/api-keys", `{"name":"`+name+`"}`, &k)
	if id, ok := billing.ParseAPIKeySecret(k.Secret); !ok || id != k.ID || k.Issuer != iss || k.Name != name || k.Created.IsZero() {
		t.Fatalf("created key %+v", k)
	}
	return k
}

// expectCode sends rq and checks its status and wire code.
func (e *apiEnv) expectCode(t *testing.T, rq request, status int, code wire.Code) {
	t.Helper()
	r := e.send(t, rq)
	if we := r.err(t); r.status != status || we.Code != code {
		t.Fatalf("%s %s: %d %s (%s), want %d %s", rq.method, rq.path, r.status, we.Code, we.Message, status, code)
	}
}

// An issuer's API key reaches its own issuer's quotas and usage and nothing else: another issuer's
// quotas, usage and keys, and every admin-only route, are permission_denied.
func TestAPIKeyScope(t *testing.T) {
	e := newAPIEnv(t)
	recordEvents(t, e.ledger) // usage of acme and beta
	e.call(t, "PUT", "/v1/issuers/acme", `{}`, nil)
	e.call(t, "PUT", "/v1/issuers/beta", `{}`, nil)
	acme := e.createKey(t, "acme", "backend")
	beta := e.createKey(t, "beta", "")

	// Its own issuer: quotas written and read, usage reported.
	r := e.send(t, request{method: "PUT", path: "/v1/quotas/acme/users/alice", key: acme.Secret,
		body: `{"ai_microdollars":5,"compute_seconds":6,"window":"day","max_concurrent_sessions":1,"revision":0}`})
	if r.status != http.StatusOK {
		t.Fatalf("PUT own quota with the issuer key: %d %s", r.status, r.body)
	}
	if r := e.send(t, request{method: "GET", path: "/v1/issuers/acme", key: acme.Secret}); r.status != http.StatusOK {
		t.Fatalf("GET own issuer: %d %s", r.status, r.body)
	}
	const rng = "/v1/usage?from=2030-03-04&to=2030-03-06T00:00:00Z"
	for _, q := range []string{"", "&iss=acme", "&sub=alice"} {
		r := e.send(t, request{method: "GET", path: rng + q, key: acme.Secret})
		var page usageJSON
		if r.status != http.StatusOK || json.Unmarshal(r.body, &page) != nil || len(page.Rows) == 0 {
			t.Fatalf("usage%s: %d %s", q, r.status, r.body)
		}
		for _, row := range page.Rows {
			if row["iss"] != "acme" {
				t.Fatalf("usage%s with acme's key reports %v", q, row)
			}
		}
	}

	// Another issuer's: refused whatever the route.
	for _, rq := range []request{
		{method: "GET", path: "/v1/quotas/beta"},
		{method: "GET", path: "/v1/quotas/beta/users/carol"},
		{method: "PUT", path: "/v1/quotas/beta", body: `{"ai_microdollars":-1,"compute_seconds":-1,"window":"day","max_concurrent_sessions":-1}`},
		{method: "DELETE", path: "/v1/quotas/beta/users/carol"},
		{method: "GET", path: rng + "&iss=beta"},
		{method: "GET", path: rng + "&iss=beta&sub=carol"},
		{method: "GET", path: "/v1/issuers/beta"},
		{method: "GET", path: "/v1/issuers/beta/webhook-secret"},
		{method: "GET", path: "/v1/issuers/beta/api-keys"},
		{method: "DELETE", path: "/v1/issuers/beta/api-keys/" + beta.ID},
	} {
		rq.key = acme.Secret
		e.expectCode(t, rq, http.StatusForbidden, wire.PermissionDenied)
	}
	// Admin-only routes, even for its own issuer: no key can mint or revoke keys, rename or list issuers,
	// or change prices.
	for rt, scoped := range billing.ScopedRoutes() {
		if scoped {
			continue
		}
		method, pattern, _ := strings.Cut(rt, " ")
		e.expectCode(t, request{method: method, path: routePath(pattern), body: "{}", key: acme.Secret},
			http.StatusForbidden, wire.PermissionDenied)
	}
	// Beta's key still works: nothing above touched it.
	if r := e.send(t, request{method: "GET", path: "/v1/quotas/beta/users/carol", key: beta.Secret}); r.status != http.StatusNotFound {
		t.Fatalf("beta's key on its own user: %d %s", r.status, r.body)
	}
	if strings.Contains(e.logs.String(), acme.Secret[len(acme.Secret)-43:]) {
		t.Fatal("a key's secret reached the log")
	}
}

// A revoked key is refused from the next request on, by every API instance sharing the store (no
// instance caches keys), and a forged secret with a real key id is refused.
func TestAPIKeyRevokedAtOnce(t *testing.T) {
	e := newAPIEnv(t)
	e.call(t, "PUT", "/v1/issuers/acme", `{}`, nil)
	k := e.createKey(t, "acme", "ci")

	// A second instance over the same ledger file.
	other, err := sqlite.New(context.Background(), sqlite.Config{Path: e.dbPath})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	api2, err := billing.NewAPI(billing.APIConfig{Store: other, Keys: e.secrets, AdminKeys: e.secrets.AdminKeys})
	if err != nil {
		t.Fatal(err)
	}
	srv2 := httptest.NewServer(api2)
	t.Cleanup(srv2.Close)
	e2 := &apiEnv{url: srv2.URL, adminKey: e.adminKey}

	get := request{method: "GET", path: "/v1/issuers/acme", key: k.Secret}
	for _, env := range []*apiEnv{e, e2} {
		if r := env.send(t, get); r.status != http.StatusOK {
			t.Fatalf("before the revocation: %d %s", r.status, r.body)
		}
	}
	forged := k.Secret[:len(k.Secret)-1] + map[bool]string{true: "B", false: "A"}[strings.HasSuffix(k.Secret, "A")]
	e.expectCode(t, request{method: "GET", path: "/v1/issuers/acme", key: forged}, http.StatusUnauthorized, wire.Unauthenticated)

	var list struct{ Keys []billing.APIKey }
	e.call(t, "GET", "/v1/issuers/acme/api-keys", "", &list)
	if len(list.Keys) != 1 || list.Keys[0] != k.APIKey {
		t.Fatalf("list = %+v, want %+v", list.Keys, k.APIKey)
	}
	e.call(t, "DELETE", "/v1/issuers/acme/api-keys/"+k.ID, "", nil)
	for _, env := range []*apiEnv{e, e2} {
		env.expectCode(t, get, http.StatusUnauthorized, wire.Unauthenticated)
	}
	e.expectError(t, "DELETE", "/v1/issuers/acme/api-keys/"+k.ID, "", http.StatusNotFound, wire.NotFound, "")
}

// Bad input to the key routes is a typed error naming the field; nothing is created.
func TestAPIKeyInvalid(t *testing.T) {
	e := newAPIEnv(t)
	e.expectError(t, "POST", "/v1/issuers/ghost/api-keys", `{}`, http.StatusNotFound, wire.NotFound, "")
	e.call(t, "PUT", "/v1/issuers/acme", `{}`, nil)
	e.expectError(t, "POST", "/v1/issuers/acme/api-keys", `{"name":"`+strings.Repeat("n", billing.MaxNameLen+1)+`"}`,
		http.StatusBadRequest, wire.InvalidArgument, "name")
	e.expectError(t, "POST", "/v1/issuers/acme/api-keys", `{"name":"a\u0000b"}`, http.StatusBadRequest, wire.InvalidArgument, "name")
	e.expectError(t, "POST", "/v1/issuers/acme/api-keys", `{"scope":"admin"}`, http.StatusBadRequest, wire.InvalidArgument, "scope")
	e.expectError(t, "DELETE", "/v1/issuers/acme/api-keys/nope", "", http.StatusBadRequest, wire.InvalidArgument, "id")
	var list struct{ Keys []billing.APIKey }
	e.call(t, "GET", "/v1/issuers/acme/api-keys", "", &list)
	if list.Keys == nil || len(list.Keys) != 0 {
		t.Fatalf("keys after refused creations: %#v", list.Keys)
	}
}

// Authenticate, which admin APIs beside billing's use (workspace templates), passes the admin key only.
func TestAuthenticateRefusesIssuerKeys(t *testing.T) {
	e := newAPIEnv(t)
	e.call(t, "PUT", "/v1/issuers/acme", `{}`, nil)
	k := e.createKey(t, "acme", "")
	api, err := billing.NewAPI(billing.APIConfig{Store: e.ledger, Keys: e.secrets, AdminKeys: e.secrets.AdminKeys,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]wire.Code{k.Secret: wire.PermissionDenied, e.adminKey: "", "wak_x": wire.Unauthenticated} {
		req := httptest.NewRequest("GET", "/v1/templates", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		err := api.Authenticate(req)
		if got := wire.CodeOf(err); (want == "" && err != nil) || (want != "" && got != want) {
			t.Errorf("Authenticate(%.8s...) = %v, want %q", key, err, want)
		}
	}
}
